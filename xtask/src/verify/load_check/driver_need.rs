//! The NVIDIA driver a file's device code needs, from the CUDA releases that wrote its cubins
//! ([`crate::binary::device_toolkit`]) and the CUDA runtime it links, with the knowledge base's
//! floors: a cubin loads on any driver from its major's minor-version-compatibility floor on
//! (525.60.13 for 12.x, 580 for 13.x). Not stated: the driver that JITs its PTX (at least the
//! release that wrote it: the embedded PTX records only its ISA version).

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
    /// One sentence.
    pub said: String,
}

/// From the releases in `found` and the CUDA major of a `libcudart.so.N` the file needs (None
/// for a file with no device code that records its release and no runtime).
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
    floor.as_ref()?;
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
    Some(DriverNeed {
        sass_cuda: list(&found.sass),
        unrecorded_cubins: found.unrecorded,
        driver_floor: floor.map(|(d, _, _)| d.to_string()),
        said: said.join("; "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(sass: &[&str], unrecorded: usize) -> DeviceToolkits {
        DeviceToolkits {
            sass: sass.iter().map(|v| v.parse().unwrap()).collect(),
            unrecorded,
        }
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
