//! The load check side by side with the real loader: shared objects built here with gcc (each
//! failure the loader has: a missing library, a missing symbol version, an undefined symbol, a
//! CPython tag of another Python, a module without its `PyInit_`; and the loads: weak references,
//! `$ORIGIN` RUNPATH, versioned symbols) are loaded by the host Python in a fresh interpreter each,
//! and the verdict must equal what Python did, file by file. Then `readelf` and the reader agree
//! on what a real system library needs and offers.

use archsmith::binary::dynamic;
use archsmith::process::Cmd;
use archsmith::python::import_check::import_in_fresh_interpreter;
use archsmith::verify::load_check::linker::Objects;
use archsmith::verify::load_check::{check_paths, Target};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn cc(dir: &Path, out: &str, source: &str, extra: &[&str]) -> PathBuf {
    let src = dir.join(format!("{out}.c"));
    std::fs::write(&src, source).unwrap();
    let path = dir.join(out);
    Cmd::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&path)
        .arg(&src)
        .args(extra)
        .read()
        .unwrap_or_else(|e| panic!("building {out}: {e:#}"));
    path
}

fn python() -> PathBuf {
    archsmith::python::host_python().unwrap()
}

/// The fixtures: `lib/` holds what is there at load time, `build/` what some were linked against.
fn fixtures(root: &Path) -> Vec<PathBuf> {
    let build = root.join("build");
    let lib = root.join("lib");
    let ext = root.join("ext");
    for d in [&build, &lib, &ext] {
        std::fs::create_dir_all(d).unwrap();
    }
    // libdep 1: DEP_1 { dep_a }. libdep 2 (linked against, not shipped): DEP_2 { dep_b; dep_c }.
    std::fs::write(root.join("v1.map"), "DEP_1 { global: dep_a; local: *; };\n").unwrap();
    std::fs::write(
        root.join("v2.map"),
        "DEP_1 { global: dep_a; local: *; };\nDEP_2 { global: dep_b; dep_c; } DEP_1;\n",
    )
    .unwrap();
    let v1 = format!("-Wl,--version-script={}", root.join("v1.map").display());
    let v2 = format!("-Wl,--version-script={}", root.join("v2.map").display());
    cc(
        &lib,
        "libdep.so.1",
        "int dep_a(void){return 1;}",
        &["-Wl,-soname,libdep.so.1", &v1],
    );
    cc(
        &build,
        "libdep.so.1",
        "int dep_a(void){return 1;} int dep_b(void){return 2;} int dep_c(void){return 3;}",
        &["-Wl,-soname,libdep.so.1", &v2],
    );
    std::fs::copy(build.join("libdep.so.1"), build.join("libdep.so")).unwrap();
    cc(
        &build,
        "libgone.so.3",
        "int gone(void){return 0;}",
        &["-Wl,-soname,libgone.so.3"],
    );
    // Unversioned: libplain has plain_a at load time, was linked against one that also had plain_b.
    cc(&lib, "libplain.so", "int plain_a(void){return 1;}", &[]);
    // auditwheel's layout: a vendored library with no RPATH of its own needs another vendored one;
    // glibc finds it through the RPATH of the module that loaded it (numpy.libs' libopenblas).
    cc(&build, "libchain_b.so", "int chain_b(void){return 2;}", &[]);
    let from_build = format!("-L{}", build.display());
    cc(
        &build,
        "libchain_a.so",
        "int chain_b(void); int chain_a(void){return chain_b();}",
        &[&from_build, "-Wl,--no-as-needed", "-lchain_b"],
    );
    for l in ["libchain_a.so", "libchain_b.so"] {
        std::fs::copy(build.join(l), lib.join(l)).unwrap();
    }
    cc(
        &build,
        "libplain.so",
        "int plain_a(void){return 1;} int plain_b(void){return 2;}",
        &[],
    );

    let link_dep = |extra: &[&str]| -> Vec<String> {
        let mut v = vec![
            format!("-L{}", build.display()),
            "-Wl,--no-as-needed".into(),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        v.push("-Wl,-rpath,$ORIGIN/../lib".into());
        v
    };
    let build_ext = |name: &str, src: &str, libs: &[&str]| {
        let args = link_dep(libs);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cc(&ext, name, src, &args)
    };
    let module = |name: &str, body: &str| {
        format!("#include <Python.h>\n{body}\nstatic struct PyModuleDef d = {{PyModuleDef_HEAD_INIT, \"{name}\", 0, -1, 0}};\nPyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&d); }}\n")
    };
    let include = format!("-I{}", python_include());
    let with_py = |name: &str, file: &str, body: &str, libs: &[&str]| {
        let mut l = vec![include.as_str()];
        l.extend_from_slice(libs);
        build_ext(file, &module(name, body), &l)
    };
    let tag = python_tag();
    vec![
        build_ext(
            "libok.so",
            "int dep_a(void); int ok(void){return dep_a();}",
            &["-ldep"],
        ),
        build_ext(
            "libversioned.so",
            "int dep_b(void); int v(void){return dep_b();}",
            &["-ldep"],
        ),
        build_ext(
            "libundefined.so",
            "int plain_b(void); int u(void){return plain_b();}",
            &["-lplain"],
        ),
        build_ext(
            "libweak.so",
            "int plain_b(void) __attribute__((weak)); int w(void){return plain_b ? plain_b() : 0;}",
            &["-lplain"],
        ),
        build_ext(
            "libchained.so",
            "int chain_a(void); int c(void){return chain_a();}",
            &[
                "-lchain_a",
                &format!("-Wl,-rpath-link,{}", build.display()),
                // DT_RPATH, as auditwheel writes it: a DT_RUNPATH is not searched for
                // the dependencies of dependencies.
                "-Wl,--disable-new-dtags",
            ],
        ),
        build_ext(
            "libmissing.so",
            "int gone(void); int m(void){return gone();}",
            &["-l:libgone.so.3"],
        ),
        with_py(
            "okmod",
            &format!("okmod.{tag}.so"),
            "int dep_a(void); int f(void){return dep_a();}",
            &["-ldep"],
        ),
        with_py("plainmod", "plainmod.so", "", &[]),
        with_py(
            "othertag",
            "othertag.cpython-39-x86_64-linux-gnu.so",
            "",
            &[],
        ),
        with_py("realname", &format!("renamed.{tag}.so"), "", &[]),
        // A build variant its package loads by path (mpi4py's `MPI.mpich.cpython-312-….so`).
        with_py("variant", &format!("variant.mpich.{tag}.so"), "", &[]),
        with_py(
            "badmod",
            &format!("badmod.{tag}.so"),
            "int plain_b(void); int f(void){return plain_b();}",
            &["-lplain"],
        ),
    ]
}

fn python_include() -> String {
    Cmd::new(python())
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['include'])",
        ])
        .read()
        .unwrap()
}

fn python_tag() -> String {
    Cmd::new(python())
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX')[1:-3])",
        ])
        .read()
        .unwrap()
}

#[test]
fn every_verdict_equals_what_python_does_with_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let files = fixtures(dir.path());
    let mut objects = Objects::default();
    let target = Target::from_python(&python(), &mut objects).unwrap();
    let verdicts = check_paths(&target, &mut objects, &files).unwrap();
    assert_eq!(verdicts.len(), files.len());
    let mut failures = BTreeSet::new();
    for (file, v) in files.iter().zip(&verdicts) {
        let name = file
            .file_name()
            .unwrap()
            .to_string_lossy()
            .split('.')
            .next()
            .unwrap()
            .to_string();
        let truth =
            import_in_fresh_interpreter(&python(), file, v.kind, &name, &v.preloads(&target))
                .unwrap();
        assert_eq!(
            v.loads,
            truth.loads,
            "{}: verdict {v:?}, Python: {truth:?}",
            file.display()
        );
        if !truth.loads {
            assert!(truth.link_failed(), "{truth:?}");
            failures.insert(v.failure.unwrap());
            // The loader's own words are in the reason.
            let said = truth.error.as_deref().unwrap();
            let key = match v.failure.unwrap() {
                "missing-library" => "libgone.so.3: cannot open shared object file",
                "missing-version" => "version `DEP_2' not found",
                "undefined-symbol" => "undefined symbol: plain_b",
                "python-tag" => "No module named",
                "no-init" => "PyInit_renamed",
                other => panic!("unexpected failure {other}"),
            };
            assert!(said.contains(key), "Python said {said}");
            let reason = v.reason.as_deref().unwrap();
            let ours = key.replace("No module named", "Python does not find it");
            assert!(reason.contains(&ours), "{reason} lacks {ours}");
            assert!(v.fix.is_some());
        }
    }
    let want: BTreeSet<&str> = [
        "missing-library",
        "missing-version",
        "undefined-symbol",
        "python-tag",
        "no-init",
    ]
    .into();
    assert_eq!(failures, want, "each kind of failure is exercised");
    assert_eq!(verdicts.iter().filter(|v| v.loads).count(), 6);
    let chained = files
        .iter()
        .position(|f| f.ends_with("libchained.so"))
        .unwrap();
    assert!(verdicts[chained].loads, "{:?}", verdicts[chained]);
}

/// Hostile bytes: every byte of a real gcc-built library's headers and dynamic tables replaced
/// (three values each), and every truncation, read without a panic.
#[test]
fn corrupted_and_truncated_libraries_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let lib = cc(
        dir.path(),
        "libfuzzseed.so",
        "int a(void){return 1;} extern int b(void) __attribute__((weak)); int c(void){return b ? b() : 0;}",
        &["-s"],
    );
    let good = std::fs::read(&lib).unwrap();
    let info = dynamic::read(&good).unwrap();
    assert!(info.defined().any(|s| s.name == "a"));
    assert!(info.undefined().any(|s| s.name == "b" && s.weak));
    let (mut read, mut refused) = (0, 0);
    let mut bytes = good.clone();
    for i in 0..good.len().min(8192) {
        for value in [0x00, 0xff, good[i] ^ 0x80] {
            bytes[i] = value;
            match dynamic::read(&bytes) {
                Ok(d) => {
                    read += 1;
                    std::hint::black_box(d.cxx_abi(dynamic::Which::Undefined));
                }
                Err(_) => refused += 1,
            }
        }
        bytes[i] = good[i];
    }
    for cut in (0..good.len()).step_by(7) {
        let _ = dynamic::read(&good[..cut]);
    }
    assert!(read > 0 && refused > 0, "read {read}, refused {refused}");
}

/// `readelf`'s reading of a real system library equals the reader's.
#[test]
fn the_reader_agrees_with_readelf_on_a_system_library() {
    let lib = [
        "/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .expect("libstdc++ (installed with g++)");
    let data = std::fs::read(&lib).unwrap();
    let info = dynamic::read(&data).unwrap();
    let d = Cmd::new("readelf")
        .args(["-d", "-W"])
        .arg(&lib)
        .read()
        .unwrap();
    let needed: Vec<&str> = d
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.strip_suffix(']'))
        .collect();
    assert_eq!(info.needed, needed);
    assert_eq!(info.soname, Some("libstdc++.so.6"));
    let v = Cmd::new("readelf")
        .args(["-V", "-W"])
        .arg(&lib)
        .read()
        .unwrap();
    let defs: BTreeSet<&str> = v
        .lines()
        .filter(|l| l.contains("Name:") && l.contains("Flags: none"))
        .filter_map(|l| l.split("Name: ").nth(1)?.split_whitespace().next())
        .filter(|n| n.starts_with("GLIBCXX_") || n.starts_with("CXXABI_"))
        .collect();
    let ours: BTreeSet<&str> = info
        .version_defs
        .iter()
        .copied()
        .filter(|n| n.starts_with("GLIBCXX_") || n.starts_with("CXXABI_"))
        .collect();
    assert!(ours.len() > 20, "{ours:?}");
    assert_eq!(ours, defs);
    let syms = Cmd::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(&lib)
        .read()
        .unwrap();
    let readelf_defined = syms.lines().filter(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 8
            && f[0].trim_end_matches(':').parse::<u64>().is_ok()
            && f[4] != "LOCAL"
            && f[6] != "UND"
            && !f[7].is_empty()
    });
    assert_eq!(readelf_defined.count(), info.defined().count());
    let needs: Vec<&str> = info.version_needs.iter().map(|n| n.file).collect();
    assert!(needs.contains(&"libc.so.6"), "{needs:?}");
}

/// The newest torch release the knowledge base knows, its env (the one the heavy tests share)
/// and that env's `torch/lib`.
fn newest_torch_lib() -> (
    archsmith::version::Version,
    archsmith::python::TorchEnv,
    PathBuf,
) {
    let torch = archsmith::kb::kb().releases.newest_torch.clone();
    let env = archsmith::python::ensure_torch_env(&torch).unwrap();
    let lib = archsmith::python::probe(&env.python, archsmith::python::Depth::Files)
        .unwrap()
        .torch_dir
        .unwrap()
        .join("lib");
    (torch, env, lib)
}

/// A library binding two C shims every release since 2.11 exports.
const TWO_SHIMS_C: &str = "extern int aoti_torch_get_numel(void *, long *);\nextern int aoti_torch_get_dim(void *, long *);\nlong n(void *t) { long a = 0, b = 0; aoti_torch_get_numel(t, &a); aoti_torch_get_dim(t, &b); return a + b; }\n";
/// A library binding one c10 symbol.
const TIED_C: &str = "extern char _ZN3c1019UndefinedTensorImpl10_singletonE[];\nvoid *undefined_tensor(void) { return _ZN3c1019UndefinedTensorImpl10_singletonE; }\n";
/// A library needing only libc.
const PLAIN_C: &str =
    "#include <string.h>\nvoid copy(char *d, const char *s) { memcpy(d, s, 4); }\n";

/// What an extension needs from torch, read against torch 2.15's real libraries (the env the
/// heavy tests share): a library binding only two stable-ABI C shims is `stable`; one binding a
/// `c10::` symbol is tied to this torch, named demangled; one binding a shim this torch does not
/// export (a later release's) lists it as missing and does not load; one needing nothing of
/// torch's has no verdict. Each load verdict equals what Python does after `import torch`.
#[test]
fn the_torch_abi_verdict_reads_torchs_real_exports_and_python_agrees() {
    let (torch, env, lib) = newest_torch_lib();
    let dir = tempfile::tempdir().unwrap();
    let link = [
        format!("-L{}", lib.display()),
        "-ltorch_cpu".into(),
        "-lc10".into(),
    ];
    let link: Vec<&str> = link.iter().map(String::as_str).collect();
    let stable = cc(dir.path(), "libstable.so", TWO_SHIMS_C, &link);
    let tied = cc(dir.path(), "libtied.so", TIED_C, &link);
    let future = cc(
        dir.path(),
        "libfuture.so",
        "extern int aoti_torch_get_numel(void *, long *);\nextern int aoti_torch_from_a_later_release(void *);\nint f(void *t) { long a; aoti_torch_get_numel(t, &a); return aoti_torch_from_a_later_release(t); }\n",
        &link,
    );
    let plain = cc(dir.path(), "libplain.so", PLAIN_C, &[]);
    let files = vec![stable, tied, future, plain];
    let mut objects = Objects::default();
    let target = Target::from_python(&env.python, &mut objects).unwrap();
    let verdicts = check_paths(&target, &mut objects, &files).unwrap();
    for (file, v) in files.iter().zip(&verdicts) {
        let truth =
            import_in_fresh_interpreter(&env.python, file, v.kind, "x", &v.preloads(&target))
                .unwrap();
        assert_eq!(
            v.loads,
            truth.loads,
            "{}: {v:?} / {truth:?}",
            file.display()
        );
    }
    let abi = |i: usize| verdicts[i].torch_abi.clone();
    let s = abi(0).expect("a verdict for the stable library");
    assert_eq!(
        (
            s.tally.kind.as_str(),
            s.tally.stable_shims,
            s.tally.unstable_cxx
        ),
        ("stable", 2, 0),
        "{s:?}"
    );
    assert!(
        s.verdict.starts_with("stable ABI: 2 C shim(s)"),
        "{}",
        s.verdict
    );
    assert!(s.verdict.contains("exports all of them"), "{}", s.verdict);
    let t = abi(1).expect("a verdict for the tied library");
    assert_eq!(
        (t.tally.kind.as_str(), t.tally.unstable_cxx),
        ("tied", 1),
        "{t:?}"
    );
    assert_eq!(t.unstable, ["c10::UndefinedTensorImpl::_singleton"]);
    assert!(
        t.verdict.starts_with(&format!("tied to torch {torch}")),
        "{}",
        t.verdict
    );
    let f = abi(2).expect("a verdict for the later-release library");
    assert_eq!(
        f.missing_shims,
        ["aoti_torch_from_a_later_release"],
        "{f:?}"
    );
    assert!(!verdicts[2].loads);
    assert!(f.verdict.contains("lacks 1 of them"), "{}", f.verdict);
    assert_eq!(abi(3), None, "{:?}", verdicts[3]);
}

/// `verify binary --target 'torch>=…'`: each release's real exports, read from its PyPI wheel
/// once. The exports read that way for torch 2.15.0 equal those of the same release installed in
/// the heavy tests' env, library by library (libtorch_python, which binds CPython, within 1%: the
/// list is the newest CPython's wheel's, the env another Python's — 8 of 2,441 names differ). Over 2.12.1–2.13.0: a library binding two shims every
/// release has loads on both; one binding `torch_exception_get_what` (first exported by 2.13.0)
/// loads on 2.13.0 only, "needs shims up to 2.13.0", 2.12.1 named as lacking it; one binding a
/// `c10::` symbol is tied; one linked against CUDA 12's runtime loads on neither (both wheels
/// bring CUDA 13); one needing nothing of torch's has no verdict.
#[test]
fn the_range_verdict_reads_each_releases_real_exports() {
    use archsmith::verify::load_check::release_exports::ReleaseExports;
    use archsmith::verify::load_check::release_range::RangeReport;
    let (torch, _env, lib) = newest_torch_lib();
    let read = ReleaseExports::of(&torch, &|l| eprintln!("{l}")).unwrap();
    let mut libraries: Vec<&str> = read.libraries().collect();
    libraries.sort();
    assert!(libraries.contains(&"libtorch_cpu.so"), "{libraries:?}");
    for name in libraries {
        let bytes = std::fs::read(lib.join(name)).unwrap();
        let info = dynamic::read(&bytes).unwrap();
        let installed: BTreeSet<&str> = info
            .defined()
            .filter(|s| !s.hidden)
            .map(|s| s.name)
            .collect();
        let from_pypi: BTreeSet<&str> = read.names(name).unwrap().iter().map(|n| &**n).collect();
        let only_pypi: Vec<&&str> = from_pypi.difference(&installed).take(5).collect();
        let only_env: Vec<&&str> = installed.difference(&from_pypi).take(5).collect();
        eprintln!(
            "{name}: {} exported; only in the PyPI list {}, only installed {}",
            installed.len(),
            from_pypi.difference(&installed).count(),
            installed.difference(&from_pypi).count()
        );
        // libtorch_python binds CPython and differs between the wheels of two Pythons (the list
        // is read from the newest CPython's wheel, the env has another); every other library is
        // the same file in each.
        let differ = from_pypi.symmetric_difference(&installed).count();
        let allowed = if name == "libtorch_python.so" {
            installed.len() / 100
        } else {
            0
        };
        assert!(differ <= allowed, "{name}: {only_pypi:?} / {only_env:?}");
    }

    let dir = tempfile::tempdir().unwrap();
    let cudart = cc(
        dir.path(),
        "libcudart.so.12",
        "int cudaGetDeviceCount(int *n) { *n = 0; return 0; }\n",
        &["-Wl,-soname,libcudart.so.12"],
    );
    let old = cc(dir.path(), "libold.so", TWO_SHIMS_C, &[]);
    let new = cc(
        dir.path(),
        "libnew.so",
        "extern const char *torch_exception_get_what(void *);\nconst char *what(void *e) { return torch_exception_get_what(e); }\n",
        &[],
    );
    let tied = cc(dir.path(), "libtied.so", TIED_C, &[]);
    let cuda12 = cc(
        dir.path(),
        "libcuda12.so",
        "extern int aoti_torch_get_numel(void *, long *);\nextern int cudaGetDeviceCount(int *);\nlong n(void *t) { long a = 0; int d = 0; cudaGetDeviceCount(&d); aoti_torch_get_numel(t, &a); return a + d; }\n",
        &[cudart.to_str().unwrap()],
    );
    let plain = cc(dir.path(), "libplain.so", PLAIN_C, &[]);
    let files = vec![old, new, tied, cuda12, plain];
    let report = RangeReport::check("torch>=2.12.1,<2.14", &files).unwrap();
    let checked: Vec<&str> = report.releases.iter().map(|r| r.torch.as_str()).collect();
    assert_eq!(checked, ["2.12.1", "2.13.0"]);
    let fit = |i: usize| report.files[i].torch.clone();
    let o = fit(0).expect("a verdict for the old-shim library");
    assert_eq!(
        (o.tally.kind.as_str(), o.loads_on.len()),
        ("stable", 2),
        "{o:?}"
    );
    let n = fit(1).expect("a verdict for the new-shim library");
    assert_eq!(n.loads_on, ["2.13.0"], "{n:?}");
    assert_eq!(n.shims_up_to.as_deref(), Some("2.13.0"));
    assert_eq!(n.releases[0].first_missing, ["torch_exception_get_what"]);
    assert!(
        n.verdict
            .starts_with("stable: loads on torch 2.13.0 (PyPI's CUDA 13.0 wheel) of 2.12.1–2.13.0 checked; needs shims up to 2.13.0"),
        "{}",
        n.verdict
    );
    let t = fit(2).expect("a verdict for the tied library");
    assert_eq!(
        (t.tally.kind.as_str(), t.tally.unstable_cxx),
        ("tied", 1),
        "{t:?}"
    );
    assert!(
        t.verdict.starts_with("tied to torch's C++ ABI"),
        "{}",
        t.verdict
    );
    let c = fit(3).expect("a verdict for the CUDA 12 library");
    assert!(c.loads_on.is_empty(), "{c:?}");
    assert!(
        c.releases[0]
            .cuda_mismatch
            .as_deref()
            .is_some_and(|m| m.contains("libcudart.so.12") && m.contains("CUDA 13.0")),
        "{c:?}"
    );
    assert!(fit(4).is_none());
    assert!(!report.loads_everywhere);
    let table = report.table();
    assert!(
        table.contains("libnew.so") && table.contains("NO"),
        "{table}"
    );
}

/// A file tagged `abi3` that calls `PyUnicode_AsUTF8` (outside CPython's limited API until 3.13)
/// beside limited-API calls: the check names exactly that symbol, as the compiler does — built
/// with `-DPy_LIMITED_API` for 3.10 the same source does not compile, its declaration absent.
#[test]
fn an_abi3_file_is_held_to_the_limited_api_its_headers_declare() {
    use archsmith::verify::load_check::limited_api::check;
    let dir = tempfile::tempdir().unwrap();
    let include = format!("-I{}", python_include());
    let source = "#include <Python.h>\n\
                  static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, \"probe\", NULL, -1, NULL};\n\
                  PyObject* PyInit_probe(void) { PyObject* m = PyModule_Create(&def);\n\
                  const char* s = PyUnicode_AsUTF8(m); (void)s; return m; }\n";
    let so = cc(dir.path(), "probe.abi3.so", source, &[&include]);
    let mut objects = Objects::default();
    let object = objects.get(&so).unwrap();
    let undefined: Vec<&str> = object.undefined.iter().map(|n| &*n.name).collect();
    let got = check(&undefined, (3, 10)).unwrap();
    assert_eq!(got.violations, ["PyUnicode_AsUTF8"], "{got:?}");
    // The compiler's own answer for the same floor.
    let src = dir.path().join("limited.c");
    std::fs::write(&src, source).unwrap();
    let limited = Cmd::new("cc")
        .args(["-c", "-fPIC", "-DPy_LIMITED_API=0x030A0000"])
        .args(["-Werror=implicit-function-declaration", &include, "-o"])
        .arg(dir.path().join("limited.o"))
        .arg(&src)
        .output()
        .unwrap();
    assert!(!limited.success(), "the limited build compiled");
    assert!(
        limited.stderr.contains("PyUnicode_AsUTF8"),
        "{}",
        limited.stderr
    );
    // The same calls without it: nothing outside the limited API.
    let clean = source.replace("const char* s = PyUnicode_AsUTF8(m); (void)s; ", "");
    let so = cc(dir.path(), "clean.abi3.so", &clean, &[&include]);
    let object = objects.get(&so).unwrap();
    let undefined: Vec<&str> = object.undefined.iter().map(|n| &*n.name).collect();
    assert!(check(&undefined, (3, 10)).unwrap().violations.is_empty());
}
