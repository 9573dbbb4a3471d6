use super::*;
use crate::cuda_arch::{Arch, Cc, Variant};
use std::collections::HashMap;

fn v(s: &str) -> Version {
    s.parse().unwrap()
}

fn a(s: &str) -> Arch {
    s.parse().unwrap()
}

#[test]
fn kb_loads_and_is_consistent() {
    // `kb()` panics on an invalid file; parse again to get the error text if it ever fails.
    if let Err(e) = KnowledgeBase::parse(KB_TEXT) {
        panic!("{e}");
    }
    let kb = kb();
    assert!(!kb.torch_arch_lists.is_empty());
    assert!(kb.targets.len() >= 40, "{} target rows", kb.targets.len());
    assert!(kb.gpus.len() >= 45, "{} gpu rows", kb.gpus.len());
    assert_eq!(
        kb.cuda_majors.iter().map(|c| c.major).collect::<Vec<_>>(),
        [11, 12, 13]
    );
}

#[test]
fn validation_rejects_bad_rows() {
    // A row with an empty source, a bad arch or an unknown segment must make parsing fail.
    let with = |extra: &str| format!("{KB_TEXT}\n{extra}\n");
    let empty_source =
        with("[[target]]\narch = \"99.0\"\nfamily = \"X\"\nfirst_cuda = \"13.0\"\nsource = \" \"");
    assert!(KnowledgeBase::parse(&empty_source)
        .unwrap_err()
        .0
        .contains("no source"));
    let dup = with(
        "[[target]]\narch = \"9.0\"\nfamily = \"Hopper\"\nfirst_cuda = \"11.8\"\nsource = \"x\"",
    );
    assert!(KnowledgeBase::parse(&dup)
        .unwrap_err()
        .0
        .contains("two rows"));
    let seg = with("[[gpu]]\nname = \"X1\"\ncc = \"9.0\"\nsegment = \"cloud\"\nsource = \"x\"");
    assert!(KnowledgeBase::parse(&seg)
        .unwrap_err()
        .0
        .contains("segment"));
    let unknown_field = with(
        "[[cuda_major]]\nmajor = 14\nminor_compat_min_driver = \"700\"\nsource = \"x\"\nextra = 1",
    );
    assert!(KnowledgeBase::parse(&unknown_field).is_err());
}

#[test]
fn every_row_has_a_source() {
    let kb = kb();
    let nonempty = |s: &str| !s.trim().is_empty();
    assert!(nonempty(&kb.releases.source));
    assert!(kb
        .targets
        .iter()
        .all(|r| nonempty(&r.source) && nonempty(&r.family)));
    assert!(kb.gpus.iter().all(|r| nonempty(&r.source)));
    assert!(kb
        .cuda
        .iter()
        .all(|r| nonempty(&r.driver_source) && nonempty(&r.host_compiler_source)));
    assert!(kb.cuda_majors.iter().all(|r| nonempty(&r.source)));
    assert!(kb.torch.iter().all(|r| nonempty(&r.source)));
    assert!(kb.torch_arch_lists.iter().all(|r| nonempty(&r.source)));
    assert!(kb
        .torch_cmake_arch_lists
        .iter()
        .all(|r| nonempty(&r.source)));
    assert!(kb.manylinux_policies.iter().all(|r| nonempty(&r.source)));
    assert!(kb
        .manylinux_symbol_versions
        .iter()
        .all(|r| nonempty(&r.source)));
}

#[test]
fn gpu_lookup_by_many_spellings() {
    let kb = kb();
    let cases = [
        // nvidia-smi / torch.cuda.get_device_name() strings
        ("NVIDIA A100-SXM4-80GB", "8.0"),
        ("NVIDIA A100-SXM4-40GB", "8.0"),
        ("NVIDIA A100-PCIE-40GB", "8.0"),
        ("NVIDIA A100 80GB PCIe", "8.0"),
        ("NVIDIA H100 80GB HBM3", "9.0"),
        ("NVIDIA H100 PCIe", "9.0"),
        ("NVIDIA H100 NVL", "9.0"),
        ("NVIDIA H200", "9.0"),
        ("NVIDIA GH200 480GB", "9.0"),
        ("NVIDIA GH200 144G HBM3e", "9.0"),
        ("NVIDIA B200", "10.0"),
        ("NVIDIA B300 SXM6 AC", "10.3"),
        ("Tesla V100-SXM2-16GB", "7.0"),
        ("Tesla V100-PCIE-32GB", "7.0"),
        ("Tesla P100-PCIE-16GB", "6.0"),
        ("Tesla T4", "7.5"),
        ("Tesla K80", "3.7"),
        ("NVIDIA L4", "8.9"),
        ("NVIDIA L40S", "8.9"),
        ("NVIDIA A10G", "8.6"),
        ("NVIDIA GeForce RTX 4090", "8.9"),
        ("NVIDIA GeForce RTX 3090", "8.6"),
        ("NVIDIA GeForce RTX 5090", "12.0"),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", "8.9"),
        ("NVIDIA GeForce RTX 2080 Ti", "7.5"),
        ("NVIDIA RTX A6000", "8.6"),
        ("NVIDIA RTX 6000 Ada Generation", "8.9"),
        ("Quadro RTX 6000", "7.5"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0"),
        (
            "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
            "12.0",
        ),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0"),
        ("NVIDIA GB10", "12.1"),
        ("Orin (nvgpu)", "8.7"),
        ("NVIDIA Thor", "11.0"),
        ("NVIDIA TITAN V", "7.0"),
        // what people type
        ("H100 SXM", "9.0"),
        ("h100", "9.0"),
        ("rtx4090", "8.9"),
        ("RTX-4090", "8.9"),
        ("rtx_3060", "8.6"),
        ("A100", "8.0"),
        ("a100 sxm4", "8.0"),
        ("GTX 1080 Ti", "6.1"),
        ("K40", "3.5"),
        ("Jetson Nano", "5.3"),
        ("Jetson TX2", "6.2"),
        ("Jetson AGX Xavier", "7.2"),
        ("Jetson Orin Nano", "8.7"),
        ("Jetson AGX Thor", "11.0"),
        ("DGX Spark", "12.1"),
        ("Rubin", "10.7"),
        ("GB300", "10.3"),
        ("B100", "10.0"),
        ("H20", "9.0"),
        ("RTX 5060 Ti", "12.0"),
    ];
    let mut wrong = Vec::new();
    for (query, cc) in cases {
        match kb.gpu(query) {
            Some(g) if g.cc == cc => {}
            Some(g) => wrong.push(format!("{query}: {} ({}), expected {cc}", g.name, g.cc)),
            None => wrong.push(format!("{query}: not found, expected {cc}")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // "Grace Blackwell" names both GB200 (10.0) and DGX Spark's GB10 (12.1): it must not guess.
    for unknown in [
        "",
        "   ",
        "NVIDIA",
        "80GB",
        "RTX 9999",
        "Radeon RX 7900",
        "Grace Blackwell",
    ] {
        assert!(
            kb.gpu(unknown).is_none(),
            "{unknown:?} should not match a GPU"
        );
    }
}

#[test]
fn normalize_spelling_rules() {
    let n = normalize_gpu_name;
    // case, spaces, dashes and underscores
    assert_eq!(n("RTX 4090"), "rtx4090");
    assert_eq!(n("rtx-4090"), "rtx4090");
    assert_eq!(n("RTX_4090"), "rtx4090");
    // vendor and product-line words
    assert_eq!(n("NVIDIA GeForce RTX 4090"), "rtx4090");
    assert_eq!(n("Tesla T4"), "t4");
    assert_eq!(n("Quadro RTX 8000"), "rtx8000");
    assert_eq!(n("NVIDIA GeForce RTX 4090 Laptop GPU"), "rtx4090");
    // memory sizes, with and without the B
    assert_eq!(n("NVIDIA A100-SXM4-80GB"), "a100");
    assert_eq!(n("NVIDIA GH200 144G HBM3e"), "gh200");
    // form factors and memory types
    assert_eq!(n("NVIDIA H100 80GB HBM3"), "h100");
    assert_eq!(n("NVIDIA H100 PCIe"), "h100");
    assert_eq!(n("Tesla V100-SXM2-16GB"), "v100");
    assert_eq!(n("H100 SXM"), "h100");
    assert_eq!(n("Tesla P100-PCIE-16GB"), "p100");
    // Jetson's nvidia-smi suffix in parentheses
    assert_eq!(n("Orin (nvgpu)"), "orin");
    // words that change the chip stay
    assert_eq!(n("RTX 4070 Ti SUPER"), "rtx4070tisuper");
    assert_eq!(n("RTX 6000 Ada Generation"), "rtx6000adageneration");
    assert_eq!(n("RTX PRO 6000 Blackwell Max-Q"), "rtxpro6000blackwellmaxq");
    assert_eq!(n("H100 NVL"), "h100nvl");
    // names that merely contain the patterns are kept whole
    assert_eq!(n("A10G"), "a10g");
    assert_eq!(n("GB10"), "gb10");
    assert_eq!(n("HBM"), "hbm");
    assert_eq!(n("16GB"), "");
}

#[test]
fn no_two_gpu_rows_share_a_normalized_name() {
    let mut owner: HashMap<String, &str> = HashMap::new();
    let mut clashes = Vec::new();
    for g in &kb().gpus {
        let mut mine: Vec<String> = std::iter::once(&g.name)
            .chain(&g.aliases)
            .map(|n| normalize_gpu_name(n))
            .collect();
        mine.sort();
        mine.dedup();
        for key in mine {
            if let Some(other) = owner.insert(key.clone(), &g.name) {
                clashes.push(format!("`{key}`: {other} and {}", g.name));
            }
        }
    }
    assert!(clashes.is_empty(), "{clashes:#?}");
}

#[test]
fn every_gpu_cc_has_a_plain_target_row() {
    let kb = kb();
    for g in &kb.gpus {
        let cc: Cc = g.cc.parse().unwrap();
        assert!(
            kb.target(Arch::new(cc.major, cc.minor, Variant::Plain))
                .is_some(),
            "{} has cc {} without a target row",
            g.name,
            g.cc
        );
        assert!(kb.family(cc).is_some());
    }
    assert_eq!(kb.family("9.0".parse().unwrap()), Some("Hopper"));
    assert_eq!(kb.family("8.9".parse().unwrap()), Some("Ada"));
}

#[test]
fn the_issue_lists_every_gpu_it_names() {
    let kb = kb();
    let named = [
        "T4",
        "L4",
        "L40",
        "L40S",
        "A2",
        "A10",
        "A10G",
        "A16",
        "A30",
        "A40",
        "A100",
        "H100",
        "H200",
        "GH200",
        "H20",
        "B100",
        "B200",
        "GB200",
        "B300",
        "GB300",
        "RTX 2080 Ti",
        "RTX 3060",
        "RTX 3070",
        "RTX 3080",
        "RTX 3090",
        "RTX 4060",
        "RTX 4070",
        "RTX 4080",
        "RTX 4090",
        "RTX 5060",
        "RTX 5070",
        "RTX 5080",
        "RTX 5090",
        "RTX A6000",
        "RTX 6000 Ada",
        "RTX PRO 6000 Blackwell",
        "RTX PRO 6000 Blackwell Max-Q",
        "RTX PRO 6000 Blackwell Server Edition",
        "V100",
        "Titan V",
        "P100",
        "P4",
        "P40",
        "GTX 1080 Ti",
        "K40",
        "K80",
        "M60",
        "Jetson Nano",
        "Jetson TX2",
        "Jetson Xavier",
        "Jetson AGX Orin",
        "Jetson Orin NX",
        "Jetson Orin Nano",
        "Jetson Thor",
        "DGX Spark",
        "GB10",
        "Rubin",
    ];
    let missing: Vec<&str> = named
        .iter()
        .copied()
        .filter(|n| kb.gpu(n).is_none())
        .collect();
    assert!(missing.is_empty(), "{missing:?}");
    for seg in GPU_SEGMENTS {
        assert!(
            kb.gpus.iter().filter(|g| g.segment == seg).count() >= 4,
            "few {seg} GPUs"
        );
    }
}

#[test]
fn cuda_supports_edge_cases() {
    let kb = kb();
    let yes = |cuda: &str, arch: &str| {
        assert!(
            kb.cuda_supports(&v(cuda), a(arch)),
            "CUDA {cuda} should compile {arch}"
        )
    };
    let no = |cuda: &str, arch: &str| {
        assert!(
            !kb.cuda_supports(&v(cuda), a(arch)),
            "CUDA {cuda} should not compile {arch}"
        )
    };
    // Maxwell…Volta: until 12.9, gone in 13.0.
    yes("12.9", "5.0");
    yes("12.9.1", "5.0");
    no("13.0", "5.0");
    no("13.0.88", "7.2");
    yes("12.9", "7.0");
    // Thor: sm_101 through 12.9, sm_110 from 13.0.
    yes("12.8", "10.1");
    yes("12.9", "10.1");
    no("13.0", "10.1");
    no("13.0", "10.1a");
    no("12.9", "11.0");
    yes("13.0", "11.0");
    yes("13.0", "11.0f");
    // Rubin from 13.4.
    no("13.3", "10.7");
    yes("13.4", "10.7");
    yes("13.5", "10.7a");
    // `f` from 12.9 only.
    no("12.8", "10.0f");
    yes("12.9", "10.0f");
    yes("12.9", "12.1f");
    no("12.8", "12.0f");
    // `a`: 9.0a from 12.0, 10.0a from 12.8.
    no("11.8", "9.0a");
    yes("12.0", "9.0a");
    no("12.6", "10.0a");
    yes("12.8", "10.0a");
    // Kepler: 3.0/3.2 until 10.2, 3.5/3.7 until 11.8.
    yes("10.2", "3.0");
    no("11.0", "3.0");
    no("11.0", "3.2");
    yes("11.8", "3.5");
    no("12.0", "3.7");
    // additions
    no("11.0", "8.6");
    yes("11.1", "8.6");
    no("11.7", "9.0");
    yes("11.8", "8.9");
    no("12.9", "8.8");
    yes("13.0", "8.8");
    // never a target
    no("13.5", "9.0f");
    no("13.5", "8.0a");
}

#[test]
fn cuda_targets_per_release() {
    let kb = kb();
    let list = |cuda: &str| {
        kb.cuda_targets(&v(cuda))
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        list("10.2"),
        "3.0 3.2 3.5 3.7 5.0 5.2 5.3 6.0 6.1 6.2 7.0 7.2 7.5"
    );
    assert_eq!(
        list("12.0"),
        "5.0 5.2 5.3 6.0 6.1 6.2 7.0 7.2 7.5 8.0 8.6 8.7 8.9 9.0 9.0a"
    );
    assert_eq!(
        list("13.0"),
        "7.5 8.0 8.6 8.7 8.8 8.9 9.0 9.0a 10.0 10.0a 10.0f 10.3 10.3a 10.3f 11.0 11.0a 11.0f 12.0 12.0a 12.0f 12.1 12.1a 12.1f"
    );
    assert!(list("13.4").contains("10.7 10.7a 10.7f"));
    // Table order is (major, minor, variant) so listings read naturally.
    let archs: Vec<Arch> = kb.targets.iter().map(|t| a(&t.arch)).collect();
    assert!(
        archs.windows(2).all(|w| w[0] < w[1]),
        "target rows out of order"
    );
}

#[test]
fn cuda_rows_cover_every_release_in_order() {
    let kb = kb();
    let versions: Vec<String> = kb.cuda.iter().map(|c| c.version.to_string()).collect();
    let expected = "10.2 11.0 11.1 11.2 11.3 11.4 11.5 11.6 11.7 11.8 12.0 12.1 12.2 12.3 12.4 12.5 12.6 12.8 12.9 13.0 13.1 13.2 13.3 13.4 13.5";
    assert_eq!(versions.join(" "), expected);
    // Host compilers only ever get newer; drivers too where known.
    for w in kb.cuda.windows(2) {
        assert!(
            w[0].max_gcc <= w[1].max_gcc && w[0].max_clang <= w[1].max_clang,
            "{} → {}",
            w[0].version,
            w[1].version
        );
        if let (Some(x), Some(y)) = (&w[0].min_driver_linux, &w[1].min_driver_linux) {
            assert!(x < y, "driver floor {} → {}", w[0].version, w[1].version);
        }
    }
    let row = kb.cuda_row(&v("13.0.88")).unwrap();
    assert_eq!((row.max_gcc, row.max_clang), (Some(15), Some(20)));
    assert_eq!(row.min_driver_linux, Some(v("580.65.06")));
    assert_eq!(
        kb.cuda_row(&v("13.4")).unwrap().min_driver_branch,
        Some(615)
    );
    assert!(
        kb.cuda_row(&v("12.7")).is_none(),
        "CUDA 12.7 was never released"
    );
    // Every major's minor-compat floor lies on the driver branch of its .0 release (11.x: 450.80.02
    // is above 11.0 GA's own 450.51.05, so "at most the .0 floor" would be wrong) and below every later minor's.
    for m in &kb.cuda_majors {
        let mut rows = kb.cuda.iter().filter(|c| c.version.major() == m.major);
        let first = rows.next().unwrap();
        assert_eq!(
            m.minor_compat_min_driver.major(),
            first.min_driver_linux.as_ref().unwrap().major(),
            "cuda {}",
            m.major
        );
        for later in rows.filter_map(|c| c.min_driver_linux.as_ref()) {
            assert!(
                m.minor_compat_min_driver <= *later,
                "cuda {} floor above {later}",
                m.major
            );
        }
    }
    // The newest CUDA named in [releases] has a row.
    assert!(kb.cuda_row(&kb.releases.newest_cuda).is_some());
}

#[test]
fn torch_rows_are_ordered_and_complete() {
    let kb = kb();
    let versions: Vec<String> = kb.torch.iter().map(|t| t.version.to_string()).collect();
    // Every torch release on PyPI from 1.12.1 to 2.15.0 (PyPI JSON API, 2026-11).
    let expected = "1.12.1 1.13.0 1.13.1 2.0.0 2.0.1 2.1.0 2.1.1 2.1.2 2.2.0 2.2.1 2.2.2 2.3.0 2.3.1 2.4.0 2.4.1 2.5.0 2.5.1 \
                    2.6.0 2.7.0 2.7.1 2.8.0 2.9.0 2.9.1 2.10.0 2.11.0 2.12.0 2.12.1 2.13.0 2.14.0 2.14.1 2.15.0";
    assert_eq!(versions.join(" "), expected);
    assert!(kb.torch.windows(2).all(|w| w[0].version < w[1].version));
    assert_eq!(kb.torch.last().unwrap().version, kb.releases.newest_torch);
    for t in &kb.torch {
        let at = |what: &str| format!("torch {}: {what}", t.version);
        assert!(!t.torchvision.is_empty(), "{}", at("no torchvision"));
        assert!(t.python_min < t.python_max, "{}", at("python range"));
        assert!(
            ["c++14", "c++17", "c++20"].contains(&t.cxx_std.as_str()),
            "{}",
            at("cxx_std")
        );
        assert!(!t.wheel_sass.is_empty(), "{}", at("wheel_sass"));
        let pypi = t
            .pypi_cuda
            .as_ref()
            .expect("every release in range has a CUDA default on PyPI");
        assert!(
            t.cuda_variants.contains(pypi),
            "{}",
            at("pypi_cuda not among cuda_variants")
        );
        // The wheel's SASS must be compilable by the CUDA it was built with.
        for s in &t.wheel_sass {
            assert!(
                kb.cuda_supports(pypi, a(s)),
                "{}",
                at(&format!("sm {s} not compilable by CUDA {pypi}"))
            );
        }
        // And torch's own cpp_extension must know those archs.
        let list = kb
            .torch_arch_list(&t.version)
            .unwrap_or_else(|| panic!("{}", at("no torch_arch_list row")));
        for s in &t.wheel_sass {
            assert!(
                list.supported.contains(s),
                "{}",
                at(&format!("{s} not in supported_arches"))
            );
        }
    }
    let t = kb.torch_row(&v("2.15.0")).unwrap();
    assert_eq!(
        (t.cxx_std.as_str(), t.python_min.to_string().as_str()),
        ("c++20", "3.11")
    );
    assert_eq!(t.pypi_cuda, Some(v("13.2")));
    assert!(t.wheel_ptx.is_empty());
    assert_eq!(kb.torch_row(&v("2.0.1")).unwrap().cxx_std, "c++17");
    assert_eq!(kb.torch_row(&v("1.13.1")).unwrap().cxx_std, "c++14");
    assert_eq!(kb.torch_row(&v("2.12.0")).unwrap().cxx_std, "c++20");
    // torchaudio 2.11.1 requires torch>=2.11: the one torchaudio for every torch since.
    assert_eq!(
        kb.torch_row(&v("2.12.0")).unwrap().torchaudio,
        [v("2.11.1")]
    );
}

#[test]
fn host_compiler_limits_per_patch_release() {
    let kb = kb();
    let limits = |cuda: &str| {
        let l = kb
            .cuda_row(&v(cuda))
            .unwrap()
            .host_compiler_limits(&v(cuda));
        (l.max_gcc, l.max_clang)
    };
    // 12.2 GA (12.2.91) stops at clang 15; 12.2.128 and later accept 16.
    assert_eq!(limits("12.2"), (Some(12), Some(15)));
    assert_eq!(limits("12.2.91"), (Some(12), Some(15)));
    assert_eq!(limits("12.2.128"), (Some(12), Some(16)));
    assert_eq!(limits("12.2.140"), (Some(12), Some(16)));
    // 11.4.0 rejects gcc 11; 11.4.1 and later accept it.
    assert_eq!(limits("11.4.0"), (Some(10), Some(12)));
    assert_eq!(limits("11.4.4"), (Some(11), Some(12)));
    assert_eq!(limits("13.4.59"), (Some(16), Some(22)));
    // An update must be a patch of its own minor.
    let bad = KB_TEXT.replacen("from = \"12.2.128\"", "from = \"12.3.1\"", 1);
    assert!(KnowledgeBase::parse(&bad)
        .unwrap_err()
        .0
        .contains("not a patch release"));
}

#[test]
fn target_bounds_are_real_cuda_releases() {
    let kb = kb();
    let known = |ver: &Version| kb.cuda_row(ver).is_some();
    let tracked_from = v("10.2");
    for t in &kb.targets {
        // A typo such as 12.7 (never released) would silently shift the range.
        assert!(
            t.first_cuda < tracked_from || known(&t.first_cuda),
            "{}: first_cuda {} has no [[cuda]] row",
            t.arch,
            t.first_cuda
        );
        if let Some(last) = &t.last_cuda {
            assert!(
                known(last),
                "{}: last_cuda {last} has no [[cuda]] row",
                t.arch
            );
        }
    }
    for c in &kb.cuda {
        assert!(
            !kb.cuda_targets(&c.version).is_empty(),
            "CUDA {} compiles nothing",
            c.version
        );
    }
}

#[test]
fn every_arch_torch_names_has_a_target_row() {
    let kb = kb();
    let mut named: Vec<(String, &str)> = Vec::new();
    for r in &kb.torch_arch_lists {
        named.extend(r.supported.iter().map(|s| (s.clone(), "torch_arch_list")));
    }
    for r in &kb.torch_cmake_arch_lists {
        for n in &r.named {
            named.extend(
                n.bin
                    .iter()
                    .chain(&n.ptx)
                    .map(|s| (s.clone(), "torch_cmake_arch_list")),
            );
        }
    }
    for t in &kb.torch {
        named.extend(
            t.wheel_sass
                .iter()
                .chain(&t.wheel_ptx)
                .chain(&t.wheel_extra_sass)
                .map(|s| (s.clone(), "torch")),
        );
    }
    for r in &kb.torch_variants {
        named.extend(
            r.sass
                .iter()
                .chain(&r.ptx)
                .map(|s| (s.clone(), "torch_variant")),
        );
        // A variant's archs must be compilable by its own CUDA release.
        for s in r.sass.iter().chain(&r.ptx) {
            assert!(
                kb.cuda_supports(&r.cuda, a(s)),
                "torch_variant {}–{} {}: CUDA {} cannot compile {s}",
                r.from,
                r.to,
                r.tag(),
                r.cuda
            );
        }
    }
    let missing: Vec<_> = named
        .iter()
        .filter(|(s, _)| kb.target(a(s)).is_none())
        .collect();
    assert!(missing.is_empty(), "{missing:?}");
}

#[test]
fn torch_rows_and_variant_rows_agree() {
    let kb = kb();
    let mut wrong = Vec::new();
    for t in &kb.torch {
        let mut from_variants: Vec<String> = kb
            .torch_variants
            .iter()
            .filter(|r| r.covers(&t.version))
            .map(|r| r.cuda.to_string())
            .collect();
        from_variants.sort_by_key(|x| v(x));
        from_variants.dedup();
        let listed: Vec<String> = t.cuda_variants.iter().map(|c| c.to_string()).collect();
        if from_variants != listed {
            wrong.push(format!(
                "torch {}: cuda_variants {listed:?}, torch_variant rows {from_variants:?}",
                t.version
            ));
        }
        // The PyPI default variant's arch list is the one measured in the wheel.
        if let Some(pypi) = &t.pypi_cuda {
            if let Some(r) = kb
                .torch_variants
                .iter()
                .find(|r| r.covers(&t.version) && r.cuda == *pypi)
            {
                if r.sass != t.wheel_sass {
                    wrong.push(format!(
                        "torch {} {}: wheel_sass {:?}, torch_variant sass {:?}",
                        t.version,
                        r.tag(),
                        t.wheel_sass,
                        r.sass
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Jetson Thor was sm_101 through CUDA 12.9 and is sm_110 from 13.0; each CUDA gets its own answer.
#[test]
fn jetson_thor_reports_the_cc_of_the_cuda_in_question() {
    let kb = kb();
    let (name, newest) = kb.resolve_gpu("Jetson Thor").unwrap();
    assert_eq!(newest.to_string(), "11.0");
    let cc = |cuda: &str| {
        kb.gpu_cc_with_cuda(&name, newest, &cuda.parse().unwrap())
            .to_string()
    };
    assert_eq!(cc("12.8"), "10.1");
    assert_eq!(cc("12.9"), "10.1");
    assert_eq!(cc("13.0"), "11.0");
    assert_eq!(cc("13.2"), "11.0");
    // Both are real nvcc targets of exactly those releases (the target rows kb check verifies).
    assert!(kb.cuda_supports(&"12.9".parse().unwrap(), "10.1".parse().unwrap()));
    assert!(!kb.cuda_supports(&"13.0".parse().unwrap(), "10.1".parse().unwrap()));
    assert!(kb.cuda_supports(&"13.0".parse().unwrap(), "11.0".parse().unwrap()));
    // A GPU that never changed keeps its CC.
    let (l4, l4cc) = kb.resolve_gpu("L4").unwrap();
    assert_eq!(
        kb.gpu_cc_with_cuda(&l4, l4cc, &"11.8".parse().unwrap()),
        l4cc
    );
}

/// A GPU's driver floor: the driver of the first CUDA that compiled for its CC.
#[test]
fn gpu_driver_floors_come_from_the_first_cuda_of_their_cc() {
    let kb = kb();
    let floor = |gpu: &str| {
        let (name, cc) = kb.resolve_gpu(gpu).unwrap();
        kb.gpu_driver_floor(&name, cc).map(|f| f.driver.to_string())
    };
    assert_eq!(floor("RTX 5090").as_deref(), Some("570.26"));
    assert_eq!(floor("L4").as_deref(), Some("520.61.05"));
    assert_eq!(floor("H100").as_deref(), Some("520.61.05"));
}

#[test]
fn ambiguous_gpu_names_list_real_gpus_and_ask() {
    let kb = kb();
    assert!(!kb.ambiguous_gpu_names.is_empty());
    for a in &kb.ambiguous_gpu_names {
        let light = light_gpu_name(&a.name);
        assert!(
            kb.gpus.iter().all(|g| std::iter::once(&g.name)
                .chain(&g.aliases)
                .all(|n| light_gpu_name(n) != light)),
            "`{}` is ambiguous but also a GPU's name or alias",
            a.name
        );
        assert!(a.candidates.len() >= 2, "{}", a.name);
        for c in &a.candidates {
            assert!(
                kb.gpu(c).is_some(),
                "{}: candidate {c} is no [[gpu]] row",
                a.name
            );
        }
    }
    let e = kb.resolve_gpu("RTX 6000").unwrap_err().to_string();
    assert!(
        e.contains("names more than one GPU")
            && e.contains("\"Quadro RTX 6000\" (CC 7.5)")
            && e.contains("\"RTX 6000 Ada\" (CC 8.9)"),
        "{e}"
    );
    assert_eq!(kb.resolve_gpu("rtx 6000 ada").unwrap().1.to_string(), "8.9");
    assert_eq!(
        kb.resolve_gpu("Quadro RTX 6000").unwrap().1.to_string(),
        "7.5"
    );
}

/// Issue 62: a port installs what a package imports without declaring it only by the names the
/// knowledge base lists, as the requirement each row gives; a name not listed is never looked
/// up by its import name.
#[test]
fn import_names_map_to_requirements_and_unlisted_names_to_none() {
    use std::str::FromStr;
    let kb = kb();
    for row in &kb.python_import_names {
        let req = pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(&row.distribution);
        assert!(req.is_ok(), "{}: {:?}", row.import, req.err());
        assert!(!row.source.is_empty(), "{}", row.import);
    }
    assert_eq!(kb.distribution_for_import("skimage"), Some("scikit-image"));
    assert_eq!(
        kb.distribution_for_import("skimage.measure"),
        Some("scikit-image")
    );
    assert_eq!(
        kb.distribution_for_import("google.protobuf.message"),
        Some("protobuf")
    );
    assert_eq!(
        kb.distribution_for_import("pkg_resources"),
        Some("setuptools<82")
    );
    assert_eq!(kb.distribution_for_import("google"), None);
    assert_eq!(kb.distribution_for_import("utils"), None);
}
