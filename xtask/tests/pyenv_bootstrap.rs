//! On a machine without uv, archsmith bootstraps uv from PyPI into its own cache (and only a
//! completed bootstrap is ever used). This file is its own test process because it changes PATH.

use archsmith::process::Cmd;

#[test]
#[ignore = "live tier: installs uv from PyPI into an empty cache; cargo test -- --ignored"]
fn uv_is_bootstrapped_into_the_cache_when_not_on_path() {
    let home = std::env::temp_dir().join(format!("archsmith-uv-bootstrap-{}", std::process::id()));
    let python = archsmith::python::host_python().unwrap();
    // A PATH that offers the real Python (resolved through any shim) but no uv.
    let real_python = Cmd::new(&python)
        .args(["-c", "import sys; print(sys.executable)"])
        .read()
        .unwrap();
    let clean = tempdir_with_only_python(&home, &real_python);
    // SAFETY: this test binary runs this single test; nothing else reads the environment concurrently.
    unsafe {
        std::env::set_var("ARCHSMITH_HOME", &home);
        std::env::set_var("ARCHSMITH_PYTHON", real_python.trim());
        std::env::set_var("PATH", format!("{}:/usr/bin:/bin", clean.display()));
    }
    assert!(
        archsmith::process::which("uv").is_none(),
        "test setup: uv still on PATH"
    );
    let uv = archsmith::python::installer::uv_binary().expect("uv bootstrapped");
    assert!(uv.starts_with(&home), "{}", uv.display());
    let version = Cmd::new(&uv).arg("--version").read().unwrap();
    assert!(version.starts_with("uv "), "{version}");
    // A second call reuses it without pip.
    assert_eq!(archsmith::python::installer::uv_binary().unwrap(), uv);
    let _ = std::fs::remove_dir_all(&home);
}

/// A directory holding just a `python3` link, so PATH can offer Python without whatever else sits
/// beside it (pyenv shims put uv there too).
fn tempdir_with_only_python(home: &std::path::Path, python: &str) -> std::path::PathBuf {
    let dir = home.join("path-bin");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("python3");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(python.trim(), &link).unwrap();
    dir
}
