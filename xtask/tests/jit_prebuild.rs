//! `build-ext` on a tree of JIT extensions (torch's `load()`/`load_inline()`, no setup.py): the
//! fixture `jit-ext` (direct `load`, direct `load_inline`, and `load` through the package's own
//! wrapper with a warning-only fallback) prebuilt for 7.5/8.9/9.0 with the real torch 2.15 and
//! CUDA 13.2, audited, then imported by the real torch in a fresh process that could not compile:
//! nothing on PATH (no nvcc, no ninja, no c++), no CUDA_HOME.

mod support;

use archsmith::paths::repo_root;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn xtask(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .expect("run xtask");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `build-ext TREE --arch ARCH --out OUT --json EXTRA…`: its exit code, its document, stderr.
fn build_ext_json(
    tree: &Path,
    arch: &str,
    out: &Path,
    extra: &[&str],
) -> (i32, serde_json::Value, String) {
    let mut args = vec![
        "build-ext",
        tree.to_str().unwrap(),
        "--arch",
        arch,
        "--out",
        out.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = xtask(&args);
    let doc = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("no JSON document ({e}):\n{stdout}\n{stderr}"));
    (code, doc, stderr)
}

/// Every file under `dir` with its size and modification time: a compile would change it.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), (m.len(), m.modified().unwrap()));
            }
        }
    }
    out
}

/// The env's Python with nothing on PATH and no CUDA: it can load, never compile.
fn no_compiler_python(python: &Path, empty: &Path, tree: &Path, ext_dir: Option<&Path>) -> Command {
    let mut cmd = Command::new(python);
    cmd.env_clear()
        .env("PATH", empty)
        .env("HOME", std::env::temp_dir())
        .env("PYTHONPATH", tree)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(tree);
    if let Some(d) = ext_dir {
        cmd.env("TORCH_EXTENSIONS_DIR", d);
    }
    cmd
}

const USE_THEM: &str = r#"
import json, warnings
warnings.simplefilter("error")  # the wrapper's fallback warning would fail this run
import torch
from jit_ext import direct, inline, wrapped
x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
print(json.dumps({"scale": direct.scale(x, 2.5).tolist(), "add_one": inline.add_one(x).tolist(),
                  "rowsum": wrapped.rowsum(x).tolist(), "fallback": wrapped._plugin is None}))
"#;

/// A user's env (`--python ENV`) with torch and no `ninja` of its own: a venv over archsmith's
/// torch env's packages (a `.pth`), its bin dir holding only Python.
fn env_without_ninja(base: &Path, at: &Path) -> PathBuf {
    let status = Command::new(base)
        .args(["-m", "venv", "--without-pip"])
        .arg(at)
        .status()
        .unwrap();
    assert!(status.success());
    let python = at.join("bin/python");
    let base_site = archsmith::python::probe(base, archsmith::python::Depth::Files)
        .unwrap()
        .purelib;
    let site = archsmith::python::probe(&python, archsmith::python::Depth::Files)
        .unwrap()
        .purelib;
    std::fs::write(
        site.join("archsmith-test-torch-env.pth"),
        format!("{}\n", base_site.display()),
    )
    .unwrap();
    assert!(!at.join("bin/ninja").exists());
    python
}

/// Issue 60 (0b): the prebuild runs in the user's env given with `--python`, which has no ninja
/// (a prebuild there stopped with torch's "Ninja is required to load C++ extensions"): the
/// prebuild supplies ninja itself, as a wheel build does.
#[test]
fn jit_extensions_prebuild_for_the_plan_and_load_with_no_compiler_on_path() {
    let out = support::scratch("jit-prebuild");
    let fixture = repo_root().join("xtask/tests/fixtures/jit-ext");
    let base = archsmith::python::ensure_torch_env(&archsmith::kb::kb().releases.newest_torch)
        .unwrap()
        .python;
    let python = env_without_ninja(&base, &out.join("user-env"));
    let (code, v, stderr) = build_ext_json(
        &fixture,
        "7.5,8.9,9.0",
        &out,
        &["--python", python.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{v}\n{stderr}");
    let jit = &v["jit"];
    assert_eq!(jit["wrappers"], serde_json::json!(["get_plugin"]), "{jit}");
    let triggers: Vec<String> = jit["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let t = &s["trigger"];
            format!(
                "{}:{}",
                t["module"].as_str().unwrap(),
                t["call"].as_str().unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(
        triggers,
        [
            "jit_ext.direct:-",
            "jit_ext.inline:-",
            "jit_ext.wrapped:_init"
        ],
        "{jit}"
    );
    // Each extension carries exactly the plan; the C++-only one no device code.
    let mut names = Vec::new();
    for e in jit["extensions"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap();
        names.push(name.to_string());
        let (sass, with_cuda) = if name == "jit_wrapped" {
            (serde_json::json!([]), false)
        } else {
            (serde_json::json!(["sm_75", "sm_89", "sm_90"]), true)
        };
        assert_eq!(e["sass"], sass, "{name}");
        assert_eq!(e["ptx"], serde_json::json!([]), "{name}");
        assert_eq!(e["with_cuda"], with_cuda, "{name}");
    }
    names.sort();
    assert_eq!(names, ["jit_direct", "jit_inline", "jit_wrapped"]);
    // The three triggers shared one pool of job slots (one per core here), each timed.
    if archsmith::host::cores() >= 2 {
        assert!(jit["triggers_at_once"].as_u64().unwrap() >= 2, "{jit}");
        assert_eq!(jit["trigger_times"].as_array().unwrap().len(), 3, "{jit}");
    }
    assert!(jit["loaded_offline"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["ok"] == true));

    // The directory as an image would carry it: `verify binary` audits every file in it against
    // the plan and the load check says each module loads after `import torch`.
    let ext_dir = PathBuf::from(jit["extensions_dir"].as_str().unwrap());
    let (code, stdout, stderr) = xtask(&[
        "verify",
        "binary",
        ext_dir.to_str().unwrap(),
        "--expect-arch",
        "7.5,8.9,9.0",
        "--strict",
        "--target",
        python.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("3 of 3 files load"), "{stdout}");

    // The user's own tree (not archsmith's copy), a fresh process that could not compile: every
    // extension loads from the prebuild, the ops run on CPU, and nothing in the directory changes.
    let empty = out.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let before = snapshot(&ext_dir);
    let run = no_compiler_python(&python, &empty, &fixture, Some(&ext_dir))
        .args(["-c", USE_THEM])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(
        got,
        serde_json::json!({"scale": [[0.0, 2.5, 5.0], [7.5, 10.0, 12.5]],
                           "add_one": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
                           "rowsum": [3.0, 12.0], "fallback": false})
    );
    assert_eq!(snapshot(&ext_dir), before, "a compile ran");

    // Without the prebuild torch must compile, and cannot there: the same code fails, which is
    // what makes the run above a proof.
    let run = no_compiler_python(&python, &empty, &fixture, None)
        .args(["-c", "import jit_ext.direct"])
        .env("TORCH_EXTENSIONS_DIR", out.join("elsewhere"))
        .output()
        .unwrap();
    assert!(!run.status.success());
    assert!(
        String::from_utf8_lossy(&run.stderr).contains("Ninja is required"),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    // A source changed since the prebuild matches nothing: the hook says so and leaves the call to
    // torch (which compiles for the plan's arch list where it can; here it cannot).
    let changed = out.join("changed");
    archsmith::build_ext::source::copy_tree(&fixture, &changed).unwrap();
    let cpp = changed.join("jit_ext/csrc/scale.cpp");
    let text = std::fs::read_to_string(&cpp).unwrap();
    std::fs::write(&cpp, text.replace("y = a * x", "y = x * a")).unwrap();
    let run = no_compiler_python(&python, &empty, &changed, Some(&ext_dir))
        .args(["-c", "import jit_ext.direct"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(
        err.contains("JIT extension jit_direct matches no prebuilt one")
            && err.contains("TORCH_CUDA_ARCH_LIST=7.5;8.9;9.0")
            && err.contains("Ninja is required"),
        "{err}"
    );
    assert_eq!(snapshot(&ext_dir), before);
    let _ = std::fs::remove_dir_all(&out);
}

/// A call only the program can reach (a method, a function that needs arguments) is named with
/// the reason, and a tree with nothing reachable stops before anything is built (exit 2).
#[test]
fn jit_calls_the_prebuild_cannot_reach_are_named() {
    let dir = support::scratch("jit-unreached");
    std::fs::write(
        dir.join("model.py"),
        "from torch.utils.cpp_extension import load\n\
         class Op:\n    def build(self):\n        return load('op', ['op.cpp'])\n\
         def make(name):\n    return load(name, [name + '.cpp'])\n",
    )
    .unwrap();
    let (code, _, stderr) = xtask(&[
        "build-ext",
        dir.to_str().unwrap(),
        "--arch",
        "8.9",
        "--out",
        dir.join("out").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("no load()/load_inline() call the prebuild can reach")
            && stderr.contains("model.py:4: load inside Op.build, which only the program calls"),
        "{stderr}"
    );
    // `make` passes its parameter on: a wrapper no code calls, so it is not a site either.
    assert!(!stderr.contains("model.py:6"), "{stderr}");
    // A directory with no build script and no JIT call is still refused by name.
    let empty = support::scratch("jit-none");
    let (code, _, stderr) = xtask(&["build-ext", empty.to_str().unwrap(), "--arch", "8.9"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("calls torch's load()/load_inline()"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&empty);
}

/// A tree whose git submodule is empty stops before anything is prepared, naming it; with
/// `--skip-missing-submodules` the trigger that needs it fails alone and is reported, and the
/// rest is prebuilt, published and loaded with no compiler. Both triggers run in the pool.
#[test]
fn empty_submodules_stop_a_jit_prebuild_and_the_flag_builds_the_rest() {
    let dir = support::scratch("jit-submodules");
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("pkg")).unwrap();
    std::fs::create_dir_all(tree.join("dep/lib")).unwrap();
    std::fs::write(
        tree.join(".gitmodules"),
        "[submodule \"lib\"]\n\tpath = dep/lib\n\turl = https://example.com/lib.git\n",
    )
    .unwrap();
    std::fs::write(tree.join("pkg/__init__.py"), "").unwrap();
    let module = |name: &str, extra: &str| {
        format!(
            "import os\nfrom torch.utils.cpp_extension import load\n_here = os.path.dirname(os.path.abspath(__file__))\n\
             lib = load('sub_{name}', [os.path.join(_here, '{name}.cpp')], is_python_module=False{extra})\n"
        )
    };
    std::fs::write(tree.join("pkg/plain.py"), module("plain", "")).unwrap();
    std::fs::write(
        tree.join("pkg/needs_lib.py"),
        module(
            "needs_lib",
            ", extra_include_paths=[os.path.join(_here, '..', 'dep')]",
        ),
    )
    .unwrap();
    std::fs::write(
        tree.join("pkg/plain.cpp"),
        "int plain_answer() { return 42; }\n",
    )
    .unwrap();
    std::fs::write(
        tree.join("pkg/needs_lib.cpp"),
        "#include \"lib/lib.h\"\nint lib_answer() { return LIB_VALUE; }\n",
    )
    .unwrap();
    let out = dir.join("out");
    let (code, _, stderr) = build_ext_json(&tree, "8.9", &out, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("1 git submodule it declares is empty")
            && stderr.contains("dep/lib  https://example.com/lib.git"),
        "{stderr}"
    );
    assert!(
        !out.join("torch-extensions").exists(),
        "the prebuild started"
    );

    let (code, v, stderr) = build_ext_json(&tree, "8.9", &out, &["--skip-missing-submodules"]);
    assert_eq!(code, 0, "{v}\n{stderr}");
    let jit = &v["jit"];
    let names: Vec<&str> = jit["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sub_plain"], "{jit}");
    assert_eq!(
        jit["skipped_submodules"],
        serde_json::json!(["dep/lib"]),
        "{jit}"
    );
    let not_built = jit["not_built"].as_array().unwrap();
    assert_eq!(not_built.len(), 1, "{jit}");
    assert_eq!(not_built[0]["trigger"], "pkg.needs_lib", "{jit}");
    assert!(
        not_built[0]["error"]
            .as_str()
            .unwrap()
            .contains("sub_needs_lib"),
        "{jit}"
    );
    let loaded = jit["loaded_offline"].as_array().unwrap();
    assert_eq!(loaded.len(), 1, "{jit}");
    assert!(
        loaded[0]["ok"] == true && loaded[0]["module"] == "pkg.plain",
        "{jit}"
    );
    if archsmith::host::cores() >= 2 {
        assert_eq!(jit["triggers_at_once"], 2, "{jit}");
        let times = jit["trigger_times"].as_array().unwrap();
        assert_eq!(times.len(), 2, "{jit}");
        assert!(
            times
                .iter()
                .any(|t| t["ok"] == false && t["name"] == "pkg.needs_lib"),
            "{jit}"
        );
    }
    // The first compiler error says what the submodule would have held.
    let log = std::fs::read_to_string(jit["log"].as_str().unwrap()).unwrap();
    assert!(log.contains("lib/lib.h"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A JIT extension that does not compile fails the prebuild (exit 1) with the first compiler
/// error in the user's file, even where the other trigger built: nothing is published as if whole.
#[test]
fn a_jit_extension_that_does_not_compile_fails_the_prebuild_with_its_first_error() {
    let dir = support::scratch("jit-broken");
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("pkg")).unwrap();
    std::fs::write(tree.join("pkg/__init__.py"), "").unwrap();
    for (name, code) in [
        ("good", "int good_answer() { return 42; }\n"),
        ("broken", "int broken_answer() { return 42 }\n"),
    ] {
        std::fs::write(
            tree.join(format!("pkg/{name}.py")),
            format!(
                "import os\nfrom torch.utils.cpp_extension import load\n\
                 lib = load('jit_{name}', [os.path.join(os.path.dirname(os.path.abspath(__file__)), '{name}.cpp')], is_python_module=False)\n"
            ),
        )
        .unwrap();
        std::fs::write(tree.join(format!("pkg/{name}.cpp")), code).unwrap();
    }
    let out = dir.join("out");
    let (code, v, stderr) = build_ext_json(&tree, "8.9", &out, &[]);
    assert_eq!(code, 1, "{v}\n{stderr}");
    let f = &v["failure"];
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("building the JIT extension jit_broken failed"),
        "{f}"
    );
    let first = &f["first_error"];
    assert!(
        first["file"].as_str().unwrap().ends_with("pkg/broken.cpp"),
        "{f}"
    );
    assert!(
        !first["file"].as_str().unwrap().contains("builds/ext"),
        "{f}"
    );
    assert_eq!(first["line"], 1, "{f}");
    assert!(!out
        .join("torch-extensions")
        .join("archsmith-jit.json")
        .exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A package that compiles its extension at run time cannot become a stable-ABI wheel: the
/// prebuild is `load()`'s own build against this torch. `--stable-abi` on one is refused before
/// anything is built, and the outcome says no stable ABI (it once prebuilt the ordinary way and
/// reported `stable_abi` with the target it would have had).
#[test]
fn a_stable_abi_port_of_a_jit_package_is_refused_before_building() {
    let fixture = repo_root().join("xtask/tests/fixtures/jit-ext");
    let (code, stdout, stderr) = support::xtask(&[
        "port-extension",
        "--src",
        fixture.to_str().unwrap(),
        "--stable-abi",
        "--arch",
        "9.0",
        "--json",
    ]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["failure"]["stage"], "stable-abi", "{v}");
    assert!(
        v["jit"].is_null() && v["build"].is_null(),
        "nothing built: {v}"
    );
    assert!(
        v["failure"]["message"]
            .as_str()
            .unwrap()
            .contains("torch.utils.cpp_extension.load"),
        "{v}"
    );
}
