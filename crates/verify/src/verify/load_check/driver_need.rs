//! The NVIDIA driver a file's device code needs, from the CUDA releases that wrote its cubins
//! ([`crate::binary::device_toolkit`]) and the CUDA runtime it links, with the knowledge base's
//! floors: a cubin loads on any driver from its major's minor-version-compatibility floor on
//! (525.60.13 for 12.x, 580 for 13.x). Its PTX runs where no cubin fits (a newer GPU) once the
//! driver JIT-compiles it, which needs a driver that knows the PTX's ISA: the oldest release
//! that writes that ISA ([`crate::kb::KnowledgeBase::ptx_isa_release`]) and that release's own
//! minimum driver (550.54.14 for 12.4's ISA 8.4).

use crate::binary::device_toolkit::DeviceToolkits;
use crate::kb::kb;
use crate::version::Version;
use serde::Serialize;

/// What a file's device code asks of the driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriverNeed {
    /// The releases that wrote its cubins (`12.4`).
    pub sass_cuda: Vec<String>,
    /// Cubins that record no release (the ptxas of CUDA 12.4 and older writes no note).
    pub unrecorded_cubins: usize,
    /// The oldest driver that loads its cubins and the runtime a `libcudart.so.N` brings.
    pub driver_floor: Option<String>,
    /// The ISA versions of its PTX (`8.4`).
    pub ptx_isa: Vec<String>,
    /// The oldest driver that JIT-compiles all of its PTX (None without PTX, or for an ISA the
    /// knowledge base does not place).
    pub jit_driver_floor: Option<String>,
    /// One sentence.
    pub said: String,
}

/// From the releases in `found` and the CUDA major of a `libcudart.so.N` the file needs (None
/// for a file with no device code that records its release or its PTX ISA, and no runtime).
pub fn driver_need(found: &DeviceToolkits, runtime_major: Option<u32>) -> Option<DriverNeed> {
    let list = |s: &std::collections::BTreeSet<Version>| -> Vec<String> {
        s.iter().map(ToString::to_string).collect()
    };
    let cubins = format!("cubins from CUDA {}", list(&found.sass).join(", "));
    let runtime = runtime_major.map(|m| {
        let what = format!("its CUDA {m} runtime, libcudart.so.{m}");
        (Version::new(&[m, 0]), what)
    });
    let floor = (found.sass.iter().map(|v| (v.clone(), cubins.clone())))
        .chain(runtime)
        .filter_map(|(v, what)| kb().driver_floor(&v).map(|(d, _)| (d, v, what)))
        .max_by(|a, b| a.0.cmp(&b.0));
    let jit = jit_floor(&found.ptx_isa);
    if floor.is_none() && jit.is_none() {
        return None;
    }
    let mut said = Vec::new();
    if let Some((d, v, what)) = &floor {
        said.push(format!(
            "needs an NVIDIA driver >= {d} ({what}: CUDA {}.x's floor)",
            v.major()
        ));
    }
    if found.unrecorded > 0 {
        said.push(format!(
            "{} cubin(s) record no CUDA release (the ptxas of CUDA 12.4 and older writes none)",
            found.unrecorded
        ));
    }
    if let Some((d, isa, release)) = &jit {
        said.push(format!(
            "its PTX (ISA {isa}, written by CUDA {release} or later) JIT-compiles on drivers >= {d}, where no cubin fits the GPU"
        ));
    }
    Some(DriverNeed {
        sass_cuda: list(&found.sass),
        unrecorded_cubins: found.unrecorded,
        driver_floor: floor.map(|(d, _, _)| d.to_string()),
        ptx_isa: list(&found.ptx_isa),
        jit_driver_floor: jit.map(|(d, _, _)| d.to_string()),
        said: said.join("; "),
    })
}

/// The driver that JITs PTX of the newest ISA in `isas`, that ISA and the oldest release that
/// writes it. None without PTX, or where the knowledge base places no release or driver.
fn jit_floor(isas: &std::collections::BTreeSet<Version>) -> Option<(Version, Version, Version)> {
    let isa = isas.iter().max()?;
    let release = kb().ptx_isa_release(isa)?;
    let driver = kb().ptx_min_driver(release)?;
    Some((driver, isa.clone(), release.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(sass: &[&str], unrecorded: usize) -> DeviceToolkits {
        DeviceToolkits {
            sass: sass.iter().map(|v| v.parse().unwrap()).collect(),
            unrecorded,
            ptx_isa: Default::default(),
        }
    }

    /// A 12.4 build's cubins record nothing; its PTX's ISA 8.4 places 12.4 and its driver.
    #[test]
    fn ptx_sets_the_floor_of_its_jit() {
        let mut f = found(&[], 2);
        f.ptx_isa.insert("8.4".parse().unwrap());
        let n = driver_need(&f, None).unwrap();
        assert_eq!(n.driver_floor, None);
        assert_eq!(n.jit_driver_floor.as_deref(), Some("550.54.14"));
        assert!(
            n.said.contains("its PTX (ISA 8.4, written by CUDA 12.4 or later) JIT-compiles on drivers >= 550.54.14"),
            "{}",
            n.said
        );
        // 12.5 and 12.6 both write 8.5: the older places it. An ISA no release writes: the
        // next release that reads it (8.6: 12.8's 8.7). Older than the table: unplaced.
        let place = |isa: &str| {
            kb().ptx_isa_release(&isa.parse().unwrap())
                .map(ToString::to_string)
        };
        assert_eq!(place("8.5").as_deref(), Some("12.5"));
        assert_eq!(place("8.6").as_deref(), Some("12.8"));
        assert_eq!(place("7.7"), None);
        assert_eq!(place("99.0"), None);
    }

    #[test]
    fn cubins_set_their_majors_floor_and_a_dynamic_runtime_its_own() {
        let twelve = kb().driver_floor(&"12.4".parse().unwrap()).unwrap().0;
        let thirteen = kb().driver_floor(&"13.2".parse().unwrap()).unwrap().0;
        let n = driver_need(&found(&["12.4"], 0), None).unwrap();
        assert_eq!(n.driver_floor, Some(twelve.to_string()));
        assert!(n.said.contains("cubins from CUDA 12.4"), "{}", n.said);
        // A CUDA 13 runtime it links dynamically raises the floor over its 12.4 cubins.
        let n = driver_need(&found(&["12.4"], 2), Some(13)).unwrap();
        assert_eq!(n.driver_floor, Some(thirteen.to_string()));
        assert!(
            n.said.contains("its CUDA 13 runtime, libcudart.so.13"),
            "{}",
            n.said
        );
        assert!(
            n.said.contains("2 cubin(s) record no CUDA release"),
            "{}",
            n.said
        );
        assert_eq!(driver_need(&found(&[], 3), None), None);
    }
}
