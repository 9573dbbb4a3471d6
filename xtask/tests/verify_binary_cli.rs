//! The `verify binary` CLI on synthetic files (no toolkit needed): exit codes, offsets in errors,
//! files without device code, the JSON shape, expectations and runs-on verdicts.

use archsmith::binary::synth::{self, Store};
use archsmith::binary::{fatbin::FLAG_ARCH_SPECIFIC as A, EXEC_SECTION};
use archsmith::process::{Cmd, Output};
use std::path::Path;

mod support;

fn scratch(name: &str) -> support::Scratch {
    support::scratch(&format!("cli-{name}"))
}

fn verify(args: &[&str], paths: &[&Path]) -> Output {
    Cmd::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["verify", "binary"])
        .args(paths)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn truncated_and_corrupted_files_exit_2_naming_the_file_and_offset() {
    let dir = scratch("bad");
    let lib = synth::sample_library();
    let truncated = dir.join("truncated.so");
    std::fs::write(&truncated, &lib[..lib.len() - 10]).unwrap();
    let out = verify(&[], &[&truncated]);
    assert_eq!(out.status, Some(2), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("truncated.so: at byte offset"),
        "{}",
        out.stderr
    );
    // A wheel cut short (its zip directory lost): said in the user's words.
    let wheel = dir.join("cut-1.0-py3-none-any.whl");
    std::fs::write(&wheel, b"PK\x03\x04\x14\x00\x00\x00\x08\x00 cut here").unwrap();
    let out = verify(&[], &[&wheel]);
    assert_eq!(out.status, Some(2), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("truncated, or not a wheel at all"),
        "{}",
        out.stderr
    );
    // A fatbin whose first entry claims more payload than its container holds.
    let mut c = synth::container(&[synth::entry(2, 90, 0, &synth::fake_cubin(1), Store::Raw)]);
    c[16 + 8..16 + 16].copy_from_slice(&1_000_000u64.to_le_bytes());
    let bad = dir.join("bad.so");
    let data = synth::elf64(&[(EXEC_SECTION, c)]);
    std::fs::write(&bad, &data).unwrap();
    let out = verify(&["--json"], &[&bad]);
    assert_eq!(out.status, Some(2));
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let f = &v["files"][0];
    assert_eq!(f["status"], "error");
    let offset = f["error"]["offset"].as_u64().unwrap();
    let base = archsmith::binary::elf::Elf::parse(&data)
        .unwrap()
        .section_by_name(b".nv_fatbin")
        .unwrap()
        .unwrap()
        .offset;
    assert_eq!(
        offset,
        base + 16 + 8,
        "the offset names the entry's size field"
    );
    // Something that is neither ELF nor wheel, named explicitly.
    let text = dir.join("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    let out = verify(&[], &[&text]);
    assert_eq!(out.status, Some(2));
    assert!(
        out.stderr.contains("expected an ELF file"),
        "{}",
        out.stderr
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file without device code is listed, not an error; but expecting archs of inputs with no
/// device code at all (a CPU-only library, an empty directory) fails instead of passing vacuously.
#[test]
fn files_without_device_code_are_listed_and_cannot_meet_an_expectation() {
    let dir = scratch("plain");
    let plain = dir.join("libplain.so");
    std::fs::write(&plain, synth::elf64(&[(".text", vec![0xc3; 16])])).unwrap();
    let out = verify(&[], &[&plain]);
    assert_eq!(out.status, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("no device code"), "{}", out.stdout);
    let out = verify(&["--expect-arch", "8.0"], &[&plain]);
    assert_eq!(out.status, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("nothing here carries the expected archs"),
        "{}",
        out.stdout
    );
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = verify(&["--expect-arch", "8.0"], &[&empty]);
    assert_eq!(out.status, Some(1), "{}{}", out.stdout, out.stderr);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn expectations_strictness_and_device_verdicts_set_the_exit_code() {
    let dir = scratch("expect");
    let lib = dir.join("libk.so");
    let c = synth::container(&[
        synth::entry(2, 80, 0, &synth::fake_cubin(1), Store::Raw),
        synth::entry(2, 90, A, &synth::fake_cubin(2), Store::Zstd),
        synth::entry(1, 90, 0, b".target sm_90", Store::Lz4),
    ]);
    std::fs::write(&lib, synth::elf64(&[(EXEC_SECTION, c)])).unwrap();
    // Everything asked for is there; the extra sm_90a is reported but only fails with --strict.
    let out = verify(&["--expect-arch", "8.0,9.0+PTX"], &[&lib]);
    assert_eq!(out.status, Some(1), "sm_90 SASS is missing: {}", out.stdout);
    let out = verify(&["--expect-arch", "8.0,9.0a"], &[&lib]);
    assert_eq!(out.status, Some(0), "{}", out.stdout);
    assert!(
        out.stdout.contains("extra PTX compute_90×1"),
        "{}",
        out.stdout
    );
    let out = verify(&["--expect-arch", "8.0,9.0a", "--strict"], &[&lib]);
    assert_eq!(out.status, Some(1), "{}", out.stdout);
    // sm_80 SASS runs on 8.6; compute_90 PTX JITs on 12.0; nothing runs on 7.5.
    let out = verify(&["--cc", "8.6", "--cc", "12.0", "--json"], &[&lib]);
    assert_eq!(out.status, Some(0), "{}", out.stdout);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let runs = &v["files"][0]["runs_on"];
    assert_eq!(
        (runs[0]["via"].as_str(), runs[1]["via"].as_str()),
        (Some("sm_80"), Some("compute_90"))
    );
    let out = verify(&["--cc", "7.5"], &[&lib]);
    assert_eq!(out.status, Some(1), "{}", out.stdout);
    assert!(out.stdout.contains("runs on CC 7.5: NO"), "{}", out.stdout);
    // The JSON carries per-arch counts in arch order, with the a suffix from the header flags.
    let out = verify(&["--json"], &[&lib]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let sass: Vec<(&String, &serde_json::Value)> =
        v["files"][0]["sass"].as_object().unwrap().iter().collect();
    assert_eq!(
        sass,
        [
            (&"sm_80".to_string(), &1.into()),
            (&"sm_90a".to_string(), &1.into())
        ]
    );
    assert_eq!(
        v["files"][0]["compression"],
        serde_json::json!({"none": 1, "lz4": 1, "zstd": 1})
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_device_needs_an_image_in_every_container() {
    let dir = scratch("containers");
    let lib = dir.join("libsplit.so");
    let both = synth::container(&[
        synth::entry(2, 75, 0, &synth::fake_cubin(1), Store::Raw),
        synth::entry(2, 80, 0, &synth::fake_cubin(2), Store::Raw),
    ]);
    let only_80 = synth::container(&[synth::entry(2, 80, 0, &synth::fake_cubin(3), Store::Raw)]);
    std::fs::write(
        &lib,
        synth::elf64(&[(EXEC_SECTION, [both, only_80].concat())]),
    )
    .unwrap();
    // The union has sm_75, but the second container's kernels cannot load on 7.5.
    let out = verify(&["--cc", "7.5", "--expect-arch", "7.5,8.0"], &[&lib]);
    assert_eq!(out.status, Some(1), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("1 of 2 containers have no image for CC 7.5"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("missing SASS sm_75 (present in only 1 of 2 containers)"),
        "{}",
        out.stdout
    );
    let out = verify(&["--cc", "8.6"], &[&lib]);
    assert_eq!(out.status, Some(0), "{}", out.stdout);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A FIFO named like a wheel would block a reader forever: it is refused at once, named, exit 2;
/// inside a directory walk it is not a file to audit.
#[test]
fn a_fifo_is_refused_not_waited_on() {
    let dir = scratch("fifo");
    let fifo = dir.join("k.whl");
    Cmd::new("mkfifo").arg(&fifo).read().unwrap();
    // Under `timeout`: the old reader blocked on the FIFO forever.
    let verify_within = |path: &Path| {
        Cmd::new("timeout")
            .arg("30")
            .arg(env!("CARGO_BIN_EXE_xtask"))
            .args(["verify", "binary"])
            .arg(path)
            .output()
            .unwrap()
    };
    let out = verify_within(&fifo);
    assert_eq!(out.status, Some(2), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("not a regular file"), "{}", out.stderr);
    let out = verify_within(&dir);
    assert_eq!(out.status, Some(0), "{}{}", out.stdout, out.stderr);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--extract` never loses or misplaces an image: two inputs with one file name get a directory
/// each, and a link planted where a directory will go is left alone, not written through.
#[test]
fn extract_keeps_same_named_inputs_apart_and_ignores_planted_links() {
    let dir = scratch("extract");
    let lib = synth::sample_library();
    for d in ["d1", "d2"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
        std::fs::write(dir.join(d).join("k.so"), &lib).unwrap();
    }
    let count = |root: &Path| -> usize {
        let mut n = 0;
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let ft = e.file_type().unwrap();
                if ft.is_dir() {
                    stack.push(e.path());
                } else if ft.is_file() {
                    n += 1;
                }
            }
        }
        n
    };
    let one = dir.join("one");
    let out = verify(
        &["--extract", one.to_str().unwrap()],
        &[&dir.join("d1/k.so")],
    );
    assert_eq!(out.status, Some(0), "{}{}", out.stdout, out.stderr);
    let per_lib = count(&one);
    assert!(per_lib > 0);
    // Same file name twice, and a planted link where the first one's directory would go.
    let two = dir.join("two");
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&two).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    for e in std::fs::read_dir(&one).unwrap().flatten() {
        std::os::unix::fs::symlink(&elsewhere, two.join(e.file_name())).unwrap();
    }
    let out = verify(
        &["--extract", two.to_str().unwrap()],
        &[&dir.join("d1/k.so"), &dir.join("d2/k.so")],
    );
    assert_eq!(out.status, Some(0), "{}{}", out.stdout, out.stderr);
    assert_eq!(count(&elsewhere), 0, "written through the planted link");
    assert_eq!(
        count(&two),
        2 * per_lib,
        "one input's images overwrote the other's"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// doctor and verify give one answer for torch 2.15.0 on a T4: doctor from the knowledge base's
/// `partial_sass` fact, verify from the real library read out of the wheel on PyPI (by range,
/// 8.5 MB): the linear-algebra library carries sm_75 in 1 of its 33 containers, the other 32 hold
/// MAGMA's kernels — "partly" in both, with the same numbers, and verify fails (exit 1).
#[test]
fn doctor_and_verify_agree_that_torch_2_15_runs_on_a_t4_only_partly() {
    let pypi = archsmith::pypi::Pypi::recorded(archsmith::pypi::repository_recordings());
    let files = pypi.files("torch").expect("PyPI's file list for torch");
    let wheel = files
        .iter()
        .find(|f| {
            f.wheel_version() == Some("2.15.0")
                && f.filename.contains("-cp311-")
                && f.filename.ends_with("x86_64.whl")
        })
        .expect("torch 2.15.0 cp311 Linux wheel on PyPI");
    let lib = pypi
        .members(wheel, &["torch/lib/libtorch_cuda_linalg.so"])
        .unwrap()
        .remove(0)
        .expect("libtorch_cuda_linalg.so in the wheel");
    let dir = scratch("t4");
    let path = dir.join("libtorch_cuda_linalg.so");
    std::fs::write(&path, lib).unwrap();

    let out = verify(&["--gpu", "T4", "--json"], &[&path]);
    assert_eq!(out.status, Some(1), "{}{}", out.stdout, out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["devices"][0]["coverage"], "partly", "{v}");
    let runs_on = &v["files"][0]["runs_on"][0];
    let (containers, running) = (
        runs_on["containers"].as_u64().unwrap(),
        runs_on["containers_running"].as_u64().unwrap(),
    );
    assert_eq!((containers, running), (33, 1), "{runs_on}");
    assert_eq!(runs_on["at_risk"][0]["origin"], "MAGMA", "{runs_on}");
    assert_eq!(runs_on["at_risk"][0]["containers"], 32, "{runs_on}");
    let table = verify(&["--gpu", "T4"], &[&path]);
    assert!(
        table.stdout.contains("runs on Tesla T4 (CC 7.5): PARTLY"),
        "{}",
        table.stdout
    );

    // doctor, from the knowledge base: the same library, numbers and origin.
    let doctor = Cmd::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["doctor", "--gpu", "T4", "--json"])
        .output()
        .unwrap();
    let d: serde_json::Value = serde_json::from_str(&doctor.stdout).unwrap();
    let option = d["plan_for"]["torch"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["torch"] == "2.15.0" && o["variant"] == "cu132")
        .expect("torch 2.15.0 cu132 in doctor's options");
    let partly = option["partly"][0].as_str().unwrap_or_default();
    assert!(
        partly.contains(&format!(
            "libtorch_cuda_linalg.so carries sm_75 in {running} of {containers} containers"
        )) && partly.contains("MAGMA"),
        "{option}"
    );
    assert_eq!(d["plan_for"]["runs_with"][0]["partly"], true);
    // The advice installs the newest release not known to be partial.
    let advice = Cmd::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["doctor", "--gpu", "T4"])
        .output()
        .unwrap();
    assert!(
        advice.stdout.contains("2.15.0 cu132 (partly)"),
        "{}",
        advice.stdout
    );
    assert!(
        advice.stdout.contains("install: pip install torch==2.14.1"),
        "{}",
        advice.stdout
    );
}

/// Issue 60: Jetson Thor is sm_101 to CUDA 12.9 and sm_110 from 13.0 (one knowledge-base fact,
/// doctor's too): a binary built by either toolkit runs there, each by its own name of the device
/// (sm_100 SASS from a CUDA 12.8 build as CC 10.1, as doctor's cu128 rows say); sm_90 does not.
#[test]
fn jetson_thor_runs_images_of_either_name() {
    let dir = scratch("thor");
    for (name, major, minor) in [
        ("sm101.so", 10u32, 1u32),
        ("sm110.so", 11, 0),
        ("sm100.so", 10, 0),
        ("sm90.so", 9, 0),
    ] {
        let c = synth::container(&[synth::entry(
            2,
            major * 10 + minor,
            0,
            &synth::fake_cubin(1),
            Store::Raw,
        )]);
        std::fs::write(dir.join(name), synth::elf64(&[(EXEC_SECTION, c)])).unwrap();
    }
    for (name, runs) in [
        ("sm101.so", true),
        ("sm110.so", true),
        ("sm100.so", true),
        ("sm90.so", false),
    ] {
        let out = verify(&["--gpu", "Jetson Thor", "--json"], &[&dir.join(name)]);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let d = &v["files"][0]["runs_on"][0];
        assert_eq!(d["runs"], runs, "{name}: {d}");
    }
}

/// Issue 60: a little-endian ELF marked big-endian reported "at byte offset 36271789088702464":
/// the offset its header claimed, read in the wrong byte order. The error is at the header field
/// that claims it, inside the file.
#[test]
fn a_wrong_byte_order_is_reported_at_the_header_field() {
    let dir = scratch("byte-order");
    let mut data = synth::elf64(&[(".text", vec![0xc3; 16])]);
    data[5] = 2; // ELFDATA2MSB
    let path = dir.join("flipped.so");
    std::fs::write(&path, &data).unwrap();
    let out = verify(&["--json"], &[&path]);
    assert_eq!(out.status, Some(2), "{}{}", out.stdout, out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let offset = v["files"][0]["error"]["offset"].as_u64().unwrap();
    assert!(
        offset < data.len() as u64,
        "offset {offset}: {}",
        out.stdout
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 64: `--expect-arch` is read where it is typed, as every other arch flag: a typo is a
/// usage error (exit 2) naming the family names, before any file is read or any release of a
/// `--target` range is looked up (before, a plain string surfaced the typo after the range
/// check's downloads). `verify env` reads it the same way.
#[test]
fn a_mistyped_expect_arch_is_refused_before_any_work() {
    let missing = Path::new("/nonexistent/dist/ext.whl");
    let out = verify(
        &[
            "--expect-arch",
            "8.9,Hoper",
            "--target",
            "torch>=2.11,<2.16",
            "--offline",
        ],
        &[missing],
    );
    let err = &out.stderr;
    assert_eq!(out.status, Some(2), "{err}");
    assert!(
        err.contains("invalid value '8.9,Hoper' for '--expect-arch <SPEC>'")
            && err.contains("`Hoper` is not an arch")
            && err.contains("Hopper"),
        "{err}"
    );
    assert!(
        !err.contains("nonexistent") && !err.contains("2.11"),
        "{err}"
    );
    let out = Cmd::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "verify",
            "env",
            "--expect-arch",
            "9.O",
            "--python",
            "/nonexistent",
        ])
        .output()
        .unwrap();
    let err = &out.stderr;
    assert_eq!(out.status, Some(2), "{err}");
    assert!(err.contains("`9.O` is not an arch"), "{err}");
}
