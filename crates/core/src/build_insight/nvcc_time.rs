//! nvcc's own account of a compile: `--time FILE` appends one CSV row per compilation phase
//! (`source file name , phase name , phase input files , phase output file , arch , tool, metric
//! , unit`), each with its milliseconds; the per-arch rows are the device work an arch costs.
//!
//! The phases of one arch are its device-side preprocessing (`gcc (preprocessing 1)`, on
//! `compute_XX`), `cicc` (`compute_XX` → PTX) and `ptxas` (PTX → `sm_XX` SASS). `cudafe++` and
//! `gcc (compiling)` carry an arch in that column too, but they are the host side, done once
//! whatever the arch list; `fatbinary`, `gcc (preprocessing 4)` and the driver are shared as well.

use serde::{Deserialize, Serialize};

/// One row of nvcc's `--time` output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// `cicc`, `ptxas`, `gcc (preprocessing 1)`, `cudafe++`, `fatbinary`…
    pub name: String,
    /// The arch column as nvcc wrote it (`compute_75`, `sm_90`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    pub ms: f64,
}

/// Phases whose work is one arch's device code (everything else is done once per compile).
const DEVICE_PHASES: [&str; 3] = ["gcc (preprocessing 1)", "cicc", "ptxas"];

impl Phase {
    /// The arch whose device code this phase makes (`75` for `compute_75` and `sm_75`, `90a`
    /// for `sm_90a`), None for a phase done once per compile.
    pub fn device_arch(&self) -> Option<String> {
        if !DEVICE_PHASES.contains(&self.name.as_str()) {
            return None;
        }
        let a = self.arch.as_deref()?;
        let n = a
            .strip_prefix("compute_")
            .or_else(|| a.strip_prefix("sm_"))
            .or_else(|| a.strip_prefix("lto_"))?;
        (!n.is_empty()).then(|| n.to_string())
    }
}

/// The phases in `csv` (nvcc's `--time` file: a header line, then rows; several compiles may
/// append to one file, each with its header). Rows that are not nvcc's shape are skipped: the
/// file is a report, never a reason to fail a build.
pub fn parse(csv: &str) -> Vec<Phase> {
    csv.lines()
        .filter_map(|line| {
            // Fields are separated by " , " (the `tool` header is followed by ", "); file names
            // with commas are rare and only ever in the first four columns, so read from the end.
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            if fields.len() < 8 || fields[1] == "phase name" {
                return None;
            }
            let n = fields.len();
            let unit = fields[n - 1];
            let value: f64 = fields[n - 2]
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)?;
            let ms = match unit {
                "ms" => value,
                "s" => value * 1000.0,
                "us" => value / 1000.0,
                _ => return None,
            };
            let arch = fields[n - 4];
            Some(Phase {
                name: fields[1].to_string(),
                arch: (!arch.is_empty()).then(|| arch.to_string()),
                ms,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What nvcc 13.0 wrote for a three-arch compile of a small kernel (temporary paths shortened).
    const THREE_ARCHS: &str = "\
source file name , phase name , phase input files , phase output file , arch , tool, metric , unit
k.cu , gcc (preprocessing 4) , k.cu  , /tmp/x-5_k.cpp4.ii ,  , nvcc , 121.4390 , ms
k.cu , cudafe++ , /tmp/x-5_k.cpp4.ii  , /tmp/x-6_k.compute_90.cudafe1.cpp , compute_90 , nvcc , 383.4790 , ms
k.cu , gcc (preprocessing 1) , k.cu  , /tmp/x-9_k.compute_75.cpp1.ii , compute_75 , nvcc , 138.3160 , ms
k.cu , cicc ,  /tmp/x-9_k.compute_75.cpp1.ii  , /tmp/x-8_k.compute_75.ptx , compute_75 , nvcc , 216.7300 , ms
k.cu , ptxas , /tmp/x-8_k.compute_75.ptx  , /tmp/x-10_k.compute_75.cubin , sm_75 , nvcc , 14.5360 , ms
k.cu , gcc (preprocessing 1) , k.cu  , /tmp/x-11_k.compute_89.cpp1.ii , compute_89 , nvcc , 86.5140 , ms
k.cu , cicc ,  /tmp/x-11_k.compute_89.cpp1.ii  , /tmp/x-7_k.compute_89.ptx , compute_89 , nvcc , 299.2170 , ms
k.cu , ptxas , /tmp/x-7_k.compute_89.ptx  , /tmp/x-12_k.compute_89.cubin , sm_89 , nvcc , 18.1900 , ms
k.cu , gcc (preprocessing 1) , k.cu  , /tmp/x-13_k.compute_90.cpp1.ii , compute_90 , nvcc , 81.8890 , ms
k.cu , cicc ,  /tmp/x-13_k.compute_90.cpp1.ii  , /tmp/x-6_k.compute_90.ptx , compute_90 , nvcc , 308.8740 , ms
k.cu , ptxas , /tmp/x-6_k.compute_90.ptx  , /tmp/x-14_k.compute_90.sm_90.cubin , sm_90 , nvcc , 21.1290 , ms
k.cu , fatbinary , /tmp/x-10_k.compute_75.cubin /tmp/x-12_k.compute_89.cubin  , /tmp/x-3_k.fatbin ,  , nvcc , 3.0200 , ms
k.cu , gcc (compiling) ,   , k.o , compute_90 , nvcc , 244.3630 , ms
 , nvcc (driver) ,  , k.o ,  , nvcc , 1.1570 , ms
";

    #[test]
    fn every_row_is_read_and_only_device_phases_belong_to_an_arch() {
        let phases = parse(THREE_ARCHS);
        assert_eq!(phases.len(), 14);
        let per_arch = |a: &str| -> f64 {
            phases
                .iter()
                .filter(|p| p.device_arch().as_deref() == Some(a))
                .map(|p| p.ms)
                .sum()
        };
        assert!((per_arch("75") - (138.316 + 216.73 + 14.536)).abs() < 1e-6);
        assert!((per_arch("90") - (81.889 + 308.874 + 21.129)).abs() < 1e-6);
        // cudafe++ and the host compile name compute_90 but are done once.
        let shared: Vec<&str> = phases
            .iter()
            .filter(|p| p.device_arch().is_none())
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            shared,
            [
                "gcc (preprocessing 4)",
                "cudafe++",
                "fatbinary",
                "gcc (compiling)",
                "nvcc (driver)"
            ]
        );
    }

    #[test]
    fn hostile_lines_are_skipped() {
        for junk in [
            "",
            ",,,,,,,",
            "a , b , c , d , e , f , NaN , ms",
            "a , b , c , d , e , f , -3 , ms",
            "\u{0} , , , , , , 1 , parsecs",
        ] {
            assert!(parse(junk).is_empty(), "{junk:?}");
        }
    }
}
