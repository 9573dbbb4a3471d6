//! Hostile and careless input (issue 15's classes): a missing `HOME` never sends the cache to a
//! shared, predictable path, and a CI script that asks for `--json` gets a document even when the
//! command stops on bad input.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn xtask(args: &[&str], envs: &[(&str, &std::path::Path)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.env_clear().env("PATH", "/usr/bin:/bin").args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn without_home_the_cache_is_private_or_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out, err) = xtask(
        &["archs", "--arch", "7.5", "--print", "sass"],
        &[("TMPDIR", tmp.path())],
    );
    assert_eq!((code, out.trim()), (0, "sm_75"), "{err}");
    assert!(
        err.contains("HOME is not set: archsmith's cache is"),
        "{err}"
    );
    let dirs: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
    assert_eq!(dirs.len(), 1);
    let dir = dirs[0].path();
    assert!(dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("archsmith-"));
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", dir.display());
    // A fallback directory anyone could have prepared is refused before any work.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, _, err) = xtask(
        &["archs", "--arch", "7.5", "--print", "sass"],
        &[("TMPDIR", tmp.path())],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is not a directory private to you") && err.contains("ARCHSMITH_HOME"),
        "{err}"
    );
}

#[test]
fn bad_input_with_json_prints_an_error_document() {
    let home = tempfile::tempdir().unwrap();
    let (code, out, err) = xtask(
        &["archs", "--arch", "garbage", "--json"],
        &[("ARCHSMITH_HOME", home.path())],
    );
    assert_eq!(code, 2);
    assert!(err.contains("error: invalid --arch `garbage`"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((&v["schema"], &v["document"]), (&1.into(), &"error".into()));
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("`garbage` is not an arch"));
    assert_eq!(v["error"]["exit_code"], 2);
    // Without --json, stdout stays empty.
    let (code, out, _) = xtask(
        &["archs", "--arch", "garbage"],
        &[("ARCHSMITH_HOME", home.path())],
    );
    assert_eq!((code, out.as_str()), (2, ""));
}

/// Every argument is validated before any work, a dry run included, naming the argument at fault.
#[test]
fn port_extension_validates_every_argument_up_front() {
    let home = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            &["--arch", "garbage"][..],
            "--arch garbage: `garbage` is not an arch",
        ),
        (
            &["--arch", "3.5"][..],
            "--arch 3.5: 3.5 is not supported by CUDA",
        ),
        (
            &["--cuda", "99.0"][..],
            "'99.0' for '--cuda <VER>': CUDA 99.0 does not exist",
        ),
        (
            &["--torch", "99.0"][..],
            "'99.0' for '--torch <VER>': torch 99.0 does not exist",
        ),
    ] {
        let mut all = vec!["port-extension", "legacy-demo", "--dry-run"];
        all.extend(args);
        let (code, _, err) = xtask(&all, &[("ARCHSMITH_HOME", home.path())]);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!home.path().join("port").exists(), "{args:?}: work started");
    }
}

/// Writes a wheel whose members are `mib` MiB each, `first` starting the first MiB.
fn write_wheel(
    path: &std::path::Path,
    method: zip::CompressionMethod,
    members: &[&str],
    mib: usize,
    first: &[u8],
) {
    use std::io::Write;
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(method)
        .compression_level((method == zip::CompressionMethod::Deflated).then_some(9))
        .large_file(true);
    let zeros = vec![0u8; 1 << 20];
    let mut head = zeros.clone();
    head[..first.len()].copy_from_slice(first);
    for name in members {
        z.start_file(*name, opts).unwrap();
        for i in 0..mib {
            z.write_all(if i == 0 { &head } else { &zeros }).unwrap();
        }
    }
    z.finish().unwrap();
}

/// Runs `verify binary PATH` and samples its peak resident memory (VmHWM only grows, so the last
/// sample before it exits is close to its peak).
fn verify_peak_kib(path: &std::path::Path) -> (i32, String, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["verify", "binary"])
        .arg(path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_file) {
            for l in text.lines() {
                if let Some(v) = l.strip_prefix("VmHWM:") {
                    let kib: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                    peak = peak.max(kib);
                }
            }
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status.code().unwrap_or(-1), err, peak)
}

/// A wheel whose `.so` members are zip bombs (1 GiB of zeros each, a megabyte compressed):
/// nothing is inflated that is not an ELF file, so memory stays small whatever the archive
/// declares.
#[test]
fn zip_bombs_do_not_become_memory() {
    let dir = tempfile::tempdir().unwrap();
    let wheel = dir.path().join("bomb-1.0-py3-none-any.whl");
    let bombs = ["bomb/a.so", "bomb/b.so", "bomb/c.so"];
    write_wheel(&wheel, zip::CompressionMethod::Deflated, &bombs, 1024, &[]);
    let size = std::fs::metadata(&wheel).unwrap().len();
    assert!(size < 16 << 20, "{size}");
    let (code, err, peak_kib) = verify_peak_kib(&wheel);
    // Audited (no device code anywhere), in little memory.
    assert_eq!(code, 0, "{err}");
    assert!(
        peak_kib < 200 << 10,
        "peak {peak_kib} KiB reading 3 GiB of declared zeros"
    );
}

/// A wheel truncated while `verify binary` reads it (its memory map faults past the new end):
/// whenever the truncation lands, the run ends with a message and exit status, never killed by
/// a signal with the shell's bare "Bus error".
#[test]
fn a_wheel_truncated_while_read_gets_a_message_not_a_bus_error() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.whl");
    // One stored (uncompressed) 384 MiB ELF-looking member: its CRC check reads every page.
    let member = ["big/libbig.so"];
    write_wheel(
        &source,
        zip::CompressionMethod::Stored,
        &member,
        384,
        b"\x7fELF",
    );
    let mut signalled = Vec::new();
    let mut hit = 0;
    for delay_ms in [0u64, 20, 60, 150, 300] {
        let wheel = dir.path().join("big-1.0-py3-none-any.whl");
        std::fs::copy(&source, &wheel).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["verify", "binary"])
            .arg(&wheel)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&wheel)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if let Some(sig) = out.status.signal() {
            signalled.push((delay_ms, sig));
        } else if err.contains("truncated or replaced while archsmith read it") {
            assert_eq!(out.status.code(), Some(2));
            hit += 1;
        }
    }
    assert!(signalled.is_empty(), "killed by a signal: {signalled:?}");
    eprintln!("{hit} of 5 truncations landed during the read");
}

/// Issue 60: a FIFO made `trace-build` and `codemod --rules` hang, `/dev/zero` made them (and
/// `audit upgrade --changes`) read until memory ran out, and `verify pins` called a FIFO "no such
/// file". Every reader refuses what is not a regular file, at once, naming it; each run is
/// bounded by a timeout so a hang fails the test instead of stalling it.
#[test]
fn fifos_and_devices_are_refused_by_every_reader() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("input.cu");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let f = fifo.to_str().unwrap();
    for input in [f, "/dev/zero"] {
        let kind = if input == f {
            "is a FIFO"
        } else {
            "is a character device"
        };
        let runs: [&[&str]; 6] = [
            &["trace-build", input],
            &["codemod", "--check", "--rules", input, "."],
            &[
                "audit",
                "upgrade",
                "--from",
                "2.0",
                "--to",
                "2.6",
                "--changes",
                input,
                ".",
            ],
            &["verify", "pins", input],
            &["codemod", "--check", input],
            &["verify", "binary", input],
        ];
        for args in runs {
            if input == "/dev/zero" && args[0] == "codemod" && args[2] == input {
                continue; // `/dev/zero` is no source name the codemod takes
            }
            let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
                .args(args)
                .current_dir(dir.path())
                .env("ARCHSMITH_HOME", home.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while child.try_wait().unwrap().is_none() {
                if std::time::Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("{args:?} still running after 20 s");
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            let said = format!("{err}{}", String::from_utf8_lossy(&out.stdout));
            assert_eq!(out.status.code(), Some(2), "{args:?}: {said}");
            assert!(
                said.contains(kind) || said.contains("not a regular file"),
                "{args:?}: {said}"
            );
        }
    }
}
