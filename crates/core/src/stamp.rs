//! The build stamp: a hash of everything that decides what a build produces, and the record next
//! to each delivered wheel that lets an unchanged request return it without building. `build-ext`
//! and `build-torch` both deliver through here; each decides what its inputs are.
//!
//! The record `OUT/<wheel>.archsmith.json` holds the stamp, the inputs, the wheel's sha256 and the
//! build's outcome; a record counts only while the wheel beside it still has that sha256. Wheels
//! arrive by a same-directory rename of a complete copy, so an interrupted run leaves at most a
//! `.NAME.partial-PID` file, which the next run removes.

use anyhow::{Context, Result};
use fs_err as fs;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// sha256 of a file, streamed.
pub fn hash_file(p: &Path) -> Result<String> {
    let mut f = fs::File::open(p).with_context(|| format!("reading {}", p.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// The stamp of a set of inputs: sha256 of their canonical JSON (fields in declaration order;
/// maps must be ordered, e.g. `BTreeMap`).
pub fn key<I: Serialize>(inputs: &I) -> String {
    let json = serde_json::to_vec(inputs).unwrap_or_default();
    hex(&Sha256::digest(&json))
}

#[derive(Serialize, Deserialize)]
struct Record<I, O> {
    stamp: String,
    inputs: I,
    wheel_sha256: String,
    outcome: O,
}

fn record_path(out: &Path, wheel_name: &str) -> PathBuf {
    out.join(format!("{wheel_name}.archsmith.json"))
}

/// The wheel and outcome recorded for `key` in `out`, if the wheel is still there unchanged.
/// A record counts only when its outcome reads back as exactly what was written: one of another
/// shape (another command's, or written before a field was added or renamed) is skipped, so the
/// wheel is built again rather than reported with a field made up by a default.
pub fn lookup<O: Serialize + DeserializeOwned>(out: &Path, key: &str) -> Option<(PathBuf, O)> {
    for entry in fs::read_dir(out).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(wheel_name) = name.strip_suffix(".archsmith.json") else {
            continue;
        };
        let Ok(text) = fs::read(entry.path()) else {
            continue;
        };
        let Ok(rec) = serde_json::from_slice::<Record<serde_json::Value, serde_json::Value>>(&text)
        else {
            continue;
        };
        if rec.stamp != key {
            continue;
        }
        let Some(outcome) = read_exactly::<O>(&rec.outcome) else {
            continue;
        };
        let wheel = out.join(wheel_name);
        if hash_file(&wheel).ok().as_deref() == Some(rec.wheel_sha256.as_str()) {
            return Some((wheel, outcome));
        }
    }
    None
}

/// `value` as an `O`, when writing that `O` gives `value` back: nothing missing, nothing unknown.
fn read_exactly<O: Serialize + DeserializeOwned>(value: &serde_json::Value) -> Option<O> {
    let o = O::deserialize(value).ok()?;
    (serde_json::to_value(&o).ok()? == *value).then_some(o)
}

/// Removes `.NAME.partial-PID` files that a killed run (Ctrl-C during the final copy) left in `out`.
pub fn remove_stale_partials(out: &Path) {
    let Ok(rd) = fs::read_dir(out) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            continue;
        }
        let Some((_, pid)) = name.rsplit_once(".partial-") else {
            continue;
        };
        if pid
            .parse::<u32>()
            .is_ok_and(|p| !Path::new(&format!("/proc/{p}")).exists())
        {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Moves the built wheel into `out` atomically (a same-directory rename of a complete copy).
pub fn deliver(built: &Path, out: &Path) -> Result<PathBuf> {
    let name = built
        .file_name()
        .context("wheel without a file name")?
        .to_string_lossy()
        .into_owned();
    let dest = out.join(&name);
    let partial = out.join(format!(".{name}.partial-{}", std::process::id()));
    fs::copy(built, &partial)
        .with_context(|| format!("copying the wheel to {}", partial.display()))?;
    // An older record for this file name describes the wheel being replaced.
    let _ = fs::remove_file(record_path(out, &name));
    fs::rename(&partial, &dest)
        .with_context(|| format!("moving the wheel to {}", dest.display()))?;
    Ok(dest)
}

/// Writes the record for the delivered `wheel` (atomically).
pub fn record<I: Serialize, O: Serialize>(
    out: &Path,
    inputs: &I,
    wheel: &Path,
    outcome: &O,
) -> Result<()> {
    let name = wheel
        .file_name()
        .context("wheel without a file name")?
        .to_string_lossy()
        .into_owned();
    let rec = Record {
        stamp: key(inputs),
        inputs,
        wheel_sha256: hash_file(wheel)?,
        outcome,
    };
    let path = record_path(out, &name);
    let tmp = out.join(format!(
        ".{name}.archsmith.json.partial-{}",
        std::process::id()
    ));
    fs::write(&tmp, serde_json::to_vec_pretty(&rec)?)?;
    fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Inputs {
        arch: &'static str,
    }

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Outcome {
        seconds: u32,
    }

    /// A wheel named `name` delivered into a new output dir.
    fn delivered(name: &str, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let scratch = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let built = scratch.path().join(name);
        fs::write(&built, bytes).unwrap();
        let wheel = deliver(&built, out.path()).unwrap();
        (out, wheel)
    }

    #[test]
    fn a_record_counts_only_for_its_stamp_and_its_unchanged_wheel() {
        let (out, wheel) = delivered("x-1.0-cp311-cp311-linux_x86_64.whl", b"wheel bytes");
        let i = Inputs { arch: "7.5" };
        record(out.path(), &i, &wheel, &Outcome { seconds: 3 }).unwrap();
        let (found, o) = lookup::<Outcome>(out.path(), &key(&i)).unwrap();
        assert_eq!((found, o), (wheel.clone(), Outcome { seconds: 3 }));
        let other = Inputs { arch: "7.5;8.9" };
        assert_ne!(key(&other), key(&i));
        assert!(lookup::<Outcome>(out.path(), &key(&other)).is_none());
        // Only the wheel, its record and nothing half-written.
        let mut names: Vec<String> = fs::read_dir(out.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "x-1.0-cp311-cp311-linux_x86_64.whl",
                "x-1.0-cp311-cp311-linux_x86_64.whl.archsmith.json"
            ]
        );
        fs::write(&wheel, b"replaced by someone else").unwrap();
        assert!(lookup::<Outcome>(out.path(), &key(&i)).is_none());
    }

    #[test]
    fn a_record_of_another_shape_is_not_a_hit() {
        let (out, wheel) = delivered("y-1.0-py3-none-any.whl", b"w");
        let i = Inputs { arch: "9.0" };
        record(out.path(), &i, &wheel, &"a string outcome").unwrap();
        assert!(lookup::<Outcome>(out.path(), &key(&i)).is_none());
    }

    #[test]
    fn a_record_written_before_a_field_was_added_or_after_one_went_is_stale() {
        #[derive(Serialize, Deserialize)]
        struct Grown {
            seconds: u32,
            #[serde(default)]
            jobs: u32,
            note: Option<String>,
        }
        let (out, wheel) = delivered("z-1.0-py3-none-any.whl", b"w");
        let i = Inputs { arch: "8.9" };
        record(out.path(), &i, &wheel, &Outcome { seconds: 3 }).unwrap();
        // Serde would read it with jobs 0 and note None; the record no longer describes a Grown.
        assert!(lookup::<Grown>(out.path(), &key(&i)).is_none());
        let grown = Grown {
            seconds: 3,
            jobs: 2,
            note: None,
        };
        record(out.path(), &i, &wheel, &grown).unwrap();
        assert!(lookup::<Grown>(out.path(), &key(&i)).is_some());
        // A field the reader no longer has (serde ignores unknown fields): stale too.
        assert!(lookup::<Outcome>(out.path(), &key(&i)).is_none());
    }
}
