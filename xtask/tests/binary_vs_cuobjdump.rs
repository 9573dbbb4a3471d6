//! Side by side with NVIDIA's cuobjdump: per-arch SASS and PTX counts from archsmith's pure-Rust
//! reader must equal what `cuobjdump` (PyPI `nvidia-cuda-cuobjdump`) lists, on binaries built here
//! by the real nvcc in every layout nvcc produces, and on torch 2.15.0's libtorch_cuda.so.
//!
//! Two views are compared:
//! * cuobjdump's default dump prints each entry header's `arch =` including the `a`/`f` flags, so
//!   our flags-derived names must match it exactly (including concatenated sub-entries);
//! * `--list-elf`/`--list-ptx` name images by the cubin's own arch, which never encodes `f` (family
//!   cubins are identical to plain ones), so there our `sm_100f` is compared as `sm_100`.

mod support;

use archsmith::binary::input::{audit_paths, Options, Outcome};
use archsmith::binary::{ElfAudit, Kind};
use archsmith::process::Cmd;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

type Hist = BTreeMap<String, usize>;

const KERNEL: &str = r#"
__global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }
__global__ void add(float* x, const float* y) { x[threadIdx.x] += y[threadIdx.x]; }
void launch(float* x, const float* y) { scale<<<1, 32>>>(x, 2.0f); add<<<1, 32>>>(x, y); }
"#;

/// SASS for 7.5, 9.0a, 10.0f and 12.0; PTX for 12.0 and 10.0a: plain, `a` and `f` in both kinds.
const GENCODE: &[&str] = &[
    "-gencode=arch=compute_75,code=sm_75",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_100f,code=sm_100f",
    "-gencode=arch=compute_120,code=[sm_120,compute_120]",
    "-gencode=arch=compute_100a,code=compute_100a",
];

/// A file nvcc wrote, and the scratch directory holding it (removed with it).
struct Built {
    _dir: support::Scratch,
    path: PathBuf,
}

impl std::ops::Deref for Built {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Built {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for Built {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

fn nvcc(name: &str, out_file: &str, flags: &[&str]) -> Built {
    let tc = support::cuda();
    let dir = support::scratch(&format!("nvcc-{name}"));
    std::fs::write(dir.join("k.cu"), KERNEL).unwrap();
    tc.cmd(tc.nvcc())
        .dir(&dir)
        .args(GENCODE)
        .args(flags)
        .args(["-Xcompiler", "-fPIC", "-o", out_file, "k.cu"])
        .read()
        .unwrap_or_else(|e| panic!("nvcc {name}: {e:#}"));
    Built {
        path: dir.join(out_file),
        _dir: dir,
    }
}

fn audit(path: &Path) -> ElfAudit {
    let files = audit_paths(&[path.to_path_buf()], &Options::default());
    assert_eq!(files.len(), 1);
    match files.into_iter().next().unwrap().outcome {
        Outcome::Audited(a) => a,
        Outcome::Failed(e) => panic!("{}: {e}", path.display()),
    }
}

/// Our counts of `kind` in the counted section (or all sections), named as cuobjdump names them.
fn ours(a: &ElfAudit, kind: Kind, all_sections: bool, family_as_plain: bool) -> Hist {
    let mut h = Hist::new();
    for s in a.sections.iter().filter(|s| all_sections || s.counted) {
        for i in s.images.iter().filter(|i| i.kind == kind) {
            let suffix = match i.arch.variant {
                archsmith::arch::Variant::FamilySpecific if family_as_plain => "",
                v => v.suffix(),
            };
            *h.entry(format!("sm_{}{suffix}", i.arch.number))
                .or_default() += 1;
        }
    }
    h
}

fn cuobjdump(args: &[&str], file: &Path) -> String {
    let out = Cmd::new(support::cuobjdump())
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.success(),
        "cuobjdump {args:?} {}: {}\n{}",
        file.display(),
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// `ELF file    1: libk.1.sm_90a.cubin` → histogram of the `sm_…` component.
fn listed(text: &str, prefix: &str) -> Hist {
    let mut h = Hist::new();
    for line in text.lines().filter(|l| l.starts_with(prefix)) {
        let name = line.rsplit(": ").next().unwrap();
        let arch = name
            .split('.')
            .find(|c| c.starts_with("sm_"))
            .unwrap_or_else(|| panic!("no arch in `{line}`"));
        *h.entry(arch.to_string()).or_default() += 1;
    }
    h
}

/// The default dump's `arch = …` lines per block kind (elf, ptx), concatenated sub-entries included.
fn dumped(text: &str) -> (Hist, Hist) {
    let (elf, ptx, _) = dumped_with_ir(text);
    (elf, ptx)
}

/// Also the NVVM/LTO IR blocks.
fn dumped_with_ir(text: &str) -> (Hist, Hist, Hist) {
    let (mut elf, mut ptx, mut ir) = (Hist::new(), Hist::new(), Hist::new());
    let mut current: Option<&mut Hist> = None;
    for line in text.lines().map(|l| l.trim()) {
        match line {
            "Fatbin elf code:" => current = Some(&mut elf),
            "Fatbin ptx code:" => current = Some(&mut ptx),
            "Fatbin nvvm code:" => current = Some(&mut ir),
            l if l.starts_with("Fatbin ") => current = None,
            l => {
                if let (Some(arch), Some(h)) = (l.strip_prefix("arch = "), current.as_deref_mut()) {
                    *h.entry(arch.to_string()).or_default() += 1;
                }
            }
        }
    }
    (elf, ptx, ir)
}

/// Compares both views; returns our audit for further checks.
fn side_by_side(file: &Path) -> ElfAudit {
    let a = audit(file);
    let (elf, ptx) = dumped(&cuobjdump(&[], file));
    assert_eq!(
        ours(&a, Kind::Elf, false, false),
        elf,
        "{}: header archs (default dump)",
        file.display()
    );
    assert_eq!(
        ours(&a, Kind::Ptx, false, false),
        ptx,
        "{}: PTX header archs (default dump)",
        file.display()
    );
    let lelf = listed(&cuobjdump(&["--list-elf"], file), "ELF file");
    assert_eq!(
        ours(&a, Kind::Elf, false, true),
        lelf,
        "{}: --list-elf",
        file.display()
    );
    let lptx = listed(&cuobjdump(&["--list-ptx"], file), "PTX file");
    assert_eq!(
        ours(&a, Kind::Ptx, false, true),
        lptx,
        "{}: --list-ptx",
        file.display()
    );
    assert!(
        !elf.is_empty(),
        "{}: cuobjdump found no cubins; the comparison would be vacuous",
        file.display()
    );
    a
}

fn compression_of(a: &ElfAudit) -> Vec<&'static str> {
    a.compression().keys().map(|c| c.name()).collect()
}

/// Every arch and variant the build asked for, as the flags say.
fn assert_variants(a: &ElfAudit) {
    let sass = ours(a, Kind::Elf, false, false);
    for want in ["sm_75", "sm_90a", "sm_100f", "sm_120"] {
        assert!(sass.contains_key(want), "missing {want} in {sass:?}");
    }
    let ptx = ours(a, Kind::Ptx, false, false);
    assert_eq!(
        ptx.keys().collect::<Vec<_>>(),
        ["sm_100a", "sm_120"],
        "{ptx:?}"
    );
}

#[test]
fn shared_object_default_compression() {
    let a = side_by_side(&nvcc("default", "libk.so", &["-shared"]));
    assert_variants(&a);
}

#[test]
fn shared_object_uncompressed() {
    let a = side_by_side(&nvcc("nocompress", "libk.so", &["-shared", "-no-compress"]));
    assert_variants(&a);
    assert_eq!(compression_of(&a), ["none"]);
}

#[test]
fn shared_object_compress_all() {
    let a = side_by_side(&nvcc(
        "compress-all",
        "libk.so",
        &["-shared", "-Xfatbin", "-compress-all"],
    ));
    assert_variants(&a);
    assert!(
        !compression_of(&a).contains(&"none"),
        "{:?}",
        a.compression()
    );
}

#[test]
fn shared_object_compress_mode_size_is_zstd() {
    let a = side_by_side(&nvcc(
        "size",
        "libk.so",
        &[
            "-shared",
            "-Xfatbin",
            "-compress-all",
            "-compress-mode=size",
        ],
    ));
    assert_variants(&a);
    assert_eq!(compression_of(&a), ["zstd"]);
}

#[test]
fn shared_object_compress_mode_speed_is_lz4() {
    let a = side_by_side(&nvcc(
        "speed",
        "libk.so",
        &[
            "-shared",
            "-Xfatbin",
            "-compress-all",
            "-compress-mode=speed",
        ],
    ));
    assert_variants(&a);
    assert_eq!(compression_of(&a), ["lz4"]);
}

#[test]
fn shared_object_concatenated_entries() {
    let so = nvcc("concat", "libk.so", &["-shared", "-concat"]);
    let a = side_by_side(&so);
    assert_variants(&a);
    let concatenated = a
        .counted()
        .unwrap()
        .images
        .iter()
        .filter(|i| i.concatenated)
        .count();
    assert!(concatenated > 0, "-concat produced no concatenated entries");
    // Decompressing and splitting the blob yields one image per sub-entry.
    let bytes = std::fs::read(&so).unwrap();
    let mut n = 0;
    archsmith::binary::extract::for_each_image(&bytes, |kind, _, b| {
        if kind == Kind::Elf {
            assert!(b.starts_with(b"\x7fELF"), "a decompressed cubin is not ELF");
        }
        n += 1;
    })
    .unwrap();
    assert_eq!(n, a.counted().unwrap().images.len());
}

#[test]
fn relocatable_object_and_rdc_shared_object() {
    let obj = nvcc("rdc-obj", "k.o", &["-rdc=true", "-c"]);
    let a = side_by_side(&obj);
    assert_eq!(a.counted().unwrap().name, archsmith::binary::REL_SECTION);
    assert_variants(&a);
    let so = nvcc("rdc-so", "libk.so", &["-rdc=true", "-shared"]);
    let a = side_by_side(&so);
    assert_eq!(a.counted().unwrap().name, archsmith::binary::EXEC_SECTION);
    // `-all` lists the relocatable section too.
    let all = listed(&cuobjdump(&["-all", "--list-elf"], &so), "ELF file");
    assert_eq!(ours(&a, Kind::Elf, true, true), all, "-all --list-elf");
}

const TORCH_SPEC: &str = "7.5,8.0,8.6,9.0,10.0,12.0+PTX";

#[test]
fn torch_libtorch_cuda_matches_cuobjdump() {
    let wheel = support::torch_wheel();
    let dir = support::scratch("torch-lib");
    let so = dir.join("libtorch_cuda.so");
    {
        let mut z = zip::ZipArchive::new(std::fs::File::open(&wheel).unwrap()).unwrap();
        let mut member = z.by_name("torch/lib/libtorch_cuda.so").unwrap();
        std::io::copy(&mut member, &mut std::fs::File::create(&so).unwrap()).unwrap();
    }
    let a = side_by_side(&so);
    let s = a.counted().unwrap();
    assert_eq!(s.containers, 476);
    assert_eq!(
        s.images.iter().filter(|i| i.kind == Kind::Elf).count(),
        2981
    );
    assert!(
        ours(&a, Kind::Ptx, false, false).is_empty(),
        "torch 2.15 ships no PTX in libtorch_cuda.so"
    );
    assert_eq!(compression_of(&a), ["zstd"]);
    // The flags-derived variants that --list-elf cannot show.
    let sass = ours(&a, Kind::Elf, false, false);
    assert_eq!(
        (sass["sm_103f"], sass["sm_100a"], sass["sm_90a"]),
        (59, 59, 4)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn verify_binary_on_the_torch_wheel_names_missing_ptx_and_extra_a_images() {
    let wheel = support::torch_wheel();
    let run = |extra: &[&str]| {
        Cmd::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["verify", "binary"])
            .arg(&wheel)
            .args(["--expect-arch", TORCH_SPEC])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert_eq!(out.status, Some(1), "{}\n{}", out.stdout, out.stderr);
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("torch/lib/libtorch_cuda.so:"))
        .unwrap_or_else(|| panic!("no verdict for libtorch_cuda.so in\n{}", out.stdout));
    assert!(line.starts_with("  FAIL"), "{line}");
    assert!(line.contains("missing PTX compute_120"), "{line}");
    for extra in [
        "sm_90a×4",
        "sm_100a×59",
        "sm_103f×59",
        "sm_120a×1",
        "sm_121a×1",
    ] {
        assert!(line.contains(extra), "{extra} not in {line}");
    }
    let json = run(&["--json"]);
    assert_eq!(json.status, Some(1));
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let files = v["files"].as_array().unwrap();
    let lib = files
        .iter()
        .find(|f| {
            f["path"]
                .as_str()
                .unwrap()
                .ends_with("!torch/lib/libtorch_cuda.so")
        })
        .unwrap();
    assert_eq!(lib["sass"]["sm_75"], 476);
    assert_eq!(lib["containers"], 476);
    assert_eq!(lib["expect"]["missing_ptx"][0]["arch"], "compute_120");
    let no_code = files
        .iter()
        .filter(|f| f["status"] == "no_device_code")
        .count();
    assert!(no_code > 0, "torch ships CPU-only libraries too");
    assert!(files.iter().all(|f| f["status"] != "error"));
}

/// `--extract` must write exactly the bytes cuobjdump extracts (`-xelf all -xptx all`), for every
/// storage kind: raw, LZ4, zstd and concatenated blobs. Compared as multisets of file contents,
/// since cuobjdump names `f` cubins as plain. Byte for byte: PTX with the payload's trailing
/// NULs (written before 2026-12-02) made ptxas stop with "Unexpected EOF".
fn extract_matches_cuobjdump(name: &str, file: &Path) {
    let ours_dir = support::scratch(&format!("extract-ours-{name}"));
    let theirs_dir = support::scratch(&format!("extract-theirs-{name}"));
    let out = Cmd::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["verify", "binary"])
        .arg(file)
        .arg("--extract")
        .arg(&ours_dir)
        .output()
        .unwrap();
    assert_eq!(out.status, Some(0), "{}\n{}", out.stdout, out.stderr);
    let out = Cmd::new(support::cuobjdump())
        .dir(&theirs_dir)
        .args(["-xelf", "all", "-xptx", "all"])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.success(), "{}", out.stderr);
    let contents = |dir: &Path| {
        let mut files = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    files.push(std::fs::read(&p).unwrap());
                }
            }
        }
        files.sort();
        files
    };
    let (ours, theirs) = (contents(&ours_dir), contents(&theirs_dir));
    assert!(!theirs.is_empty(), "cuobjdump extracted nothing");
    assert_eq!(
        ours.len(),
        theirs.len(),
        "{name}: number of extracted images"
    );
    assert!(
        ours == theirs,
        "{name}: extracted bytes differ from cuobjdump's"
    );
    std::fs::remove_dir_all(&ours_dir).unwrap();
    std::fs::remove_dir_all(&theirs_dir).unwrap();
}

#[test]
fn extract_writes_the_same_images_as_cuobjdump() {
    for (name, flags) in [
        ("x-zstd-concat", &["-shared", "-concat"][..]),
        (
            "x-lz4",
            &[
                "-shared",
                "-Xfatbin",
                "-compress-all",
                "-compress-mode=speed",
            ][..],
        ),
        ("x-raw", &["-shared", "-no-compress"][..]),
    ] {
        extract_matches_cuobjdump(name, &nvcc(name, "libk.so", flags));
    }
}

#[test]
fn lto_ir_objects() {
    // `code=lto_90` puts NVVM IR (kind 8) in the relocatable fatbin next to the SASS.
    let obj = nvcc(
        "lto",
        "k.o",
        &["-rdc=true", "-c", "-gencode=arch=compute_90,code=lto_90"],
    );
    let a = side_by_side(&obj);
    let (_, _, ir) = dumped_with_ir(&cuobjdump(&[], &obj));
    assert_eq!(ours(&a, Kind::Ir, false, false), ir, "nvvm entries");
    assert_eq!(ir.get("sm_90"), Some(&1), "{ir:?}");
}

/// The CUDA release each cubin records (ptxas's `.note.nv.tkinfo`) is the one `nvcc --version`
/// names, compressed or not: what `verify binary` states a file's driver floor from.
#[test]
fn each_cubin_records_the_release_of_the_nvcc_that_built_it() {
    use archsmith::binary::device_toolkit::device_toolkits;
    let tc = support::cuda();
    let says = tc.cmd(tc.nvcc()).arg("--version").read().unwrap();
    let release = says
        .split("release ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("nvcc --version: {says}"));
    for (name, flags) in [
        ("tk-default", &["-shared"][..]),
        (
            "tk-compress-all",
            &["-shared", "-Xfatbin", "-compress-all"][..],
        ),
    ] {
        let built = nvcc(name, "libk.so", flags);
        let found = device_toolkits(&std::fs::read(&built).unwrap()).unwrap();
        let releases: Vec<String> = found.sass.iter().map(ToString::to_string).collect();
        assert_eq!(
            (releases, found.unrecorded),
            (vec![release.to_string()], 0),
            "{name}"
        );
    }
}
