//! From paths to audited files: ELF files, directories (walked), and wheels (every shared object
//! read from the zip in memory, members inflated in parallel, nothing extracted to disk; or, where
//! the same command's load check unpacked the wheel already, read from those files).

use super::error::Error;
use super::extract::{extract_elf, safe_component};
use super::{audit_elf, elf, ElfAudit};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// How to read.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Write decompressed images under this directory (one subdirectory per file).
    pub extract: Option<PathBuf>,
    /// Worker threads for wheel members; 0 means the number of CPUs.
    pub threads: usize,
    /// Compute capabilities to name kernels for: a file that runs on one of them in some
    /// containers but not all gets the kernel names of the others ([`ElfAudit::kernels`]), one
    /// decompressed cubin per such container.
    pub kernels_for: Vec<crate::cuda_arch::Cc>,
    /// Wheels already unpacked whole by this command (a load check's copy), each as (the wheel's
    /// path as given, the directory): their members are read from the unpacked files instead of
    /// inflated a second time. A member missing there, or of another size, is read from the zip.
    pub unpacked: Vec<(PathBuf, PathBuf)>,
}

/// One file and what reading it gave.
#[derive(Debug)]
pub struct FileAudit {
    /// The path as given or walked; wheel members are `WHEEL!member/path`.
    pub path: String,
    pub outcome: Outcome,
}

#[derive(Debug)]
pub enum Outcome {
    /// An ELF file (with or without device code).
    Audited(ElfAudit),
    /// Unreadable or malformed.
    Failed(FileError),
}

/// Why a file could not be audited.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{0}")]
    Malformed(#[from] Error),
    #[error("cannot read: {0}")]
    Io(String),
    #[error("expected an ELF file (7f 45 4c 46), a directory or a .whl wheel")]
    Unsupported,
    #[error("not a readable wheel (zip): {0}")]
    Zip(String),
    #[error("extracting: {0}")]
    Extract(String),
}

/// A zip crate error in the user's words: an archive that cannot be opened is truncated or not a
/// wheel at all.
fn zip_words(e: &zip::result::ZipError) -> String {
    match e {
        zip::result::ZipError::InvalidArchive(_) => {
            "truncated, or not a wheel at all (no zip directory at its end); download it again"
                .into()
        }
        other => other.to_string(),
    }
}

impl FileError {
    /// The byte offset where reading failed, when the failure is in the file's contents.
    pub fn offset(&self) -> Option<u64> {
        match self {
            FileError::Malformed(e) => Some(e.offset),
            _ => None,
        }
    }
}

fn threads(opts: &Options) -> usize {
    if opts.threads > 0 {
        opts.threads
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    }
}

/// Audits every path: files, directories (recursively, ELF files and wheels only, symlinks not
/// followed) and wheels. Results come in path order, then walk order, then wheel member order.
pub fn audit_paths(paths: &[PathBuf], opts: &Options) -> Vec<FileAudit> {
    let mut out = Vec::new();
    for p in paths {
        match std::fs::metadata(p) {
            Err(e) => out.push(failed(
                p.display().to_string(),
                FileError::Io(e.to_string()),
            )),
            Ok(m) if m.is_dir() => {
                let mut files = Vec::new();
                walk(p, &mut files, &mut out);
                for f in files {
                    audit_file(&f, opts, &mut out, false);
                }
            }
            // A FIFO, socket or device would block or never end: only regular files are read.
            Ok(m) if !m.is_file() => out.push(failed(
                p.display().to_string(),
                FileError::Io(
                    "not a regular file (a FIFO, socket or device?): nothing to read".into(),
                ),
            )),
            Ok(_) => audit_file(p, opts, &mut out, true),
        }
    }
    out
}

fn failed(path: String, e: FileError) -> FileAudit {
    FileAudit {
        path,
        outcome: Outcome::Failed(e),
    }
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>, out: &mut Vec<FileAudit>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => {
            let mut ok = Vec::new();
            for e in rd {
                match e {
                    Ok(e) => ok.push(e),
                    // Counted and named, never skipped in silence.
                    Err(e) => out.push(failed(
                        dir.display().to_string(),
                        FileError::Io(format!("an entry could not be listed: {e}")),
                    )),
                }
            }
            ok
        }
        Err(e) => {
            out.push(failed(
                dir.display().to_string(),
                FileError::Io(e.to_string()),
            ));
            return;
        }
    };
    let mut entries: Vec<_> = entries.into_iter().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let m = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) => {
                out.push(failed(
                    p.display().to_string(),
                    FileError::Io(e.to_string()),
                ));
                continue;
            }
        };
        if m.is_dir() {
            walk(&p, files, out);
        } else if m.is_file() {
            match has_elf_magic(&p) {
                Ok(elf) if elf || is_wheel_name(&p) => files.push(p),
                Ok(_) => {}
                Err(e) => out.push(failed(
                    p.display().to_string(),
                    FileError::Io(e.to_string()),
                )),
            }
        }
    }
}

fn is_wheel_name(p: &Path) -> bool {
    p.extension().is_some_and(|e| e.eq_ignore_ascii_case("whl"))
}

/// Whether `p` starts with the ELF magic; a file too short for it is not ELF, a file that cannot
/// be opened or read is an error to report.
fn has_elf_magic(p: &Path) -> std::io::Result<bool> {
    let mut magic = [0u8; 4];
    let mut f = File::open(p)?;
    match f.read_exact(&mut magic) {
        Ok(()) => Ok(elf::is_elf(&magic)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// Maps a file read-only: the one place archsmith memory-maps a file it reads. The map is only
/// read; a file truncated underneath us while mapped faults (SIGBUS) on the first page past its
/// new end, which is the risk every mmap-based reader (and the CUDA loader) takes:
/// [`report_truncation_on_sigbus`] turns that into a message.
pub fn map(p: &Path) -> Result<memmap2::Mmap, FileError> {
    report_truncation_on_sigbus();
    let f = File::open(p).map_err(|e| FileError::Io(e.to_string()))?;
    // SAFETY: read-only private mapping of a regular file we opened; we never write through it.
    unsafe { memmap2::Mmap::map(&f) }.map_err(|e| FileError::Io(e.to_string()))
}

/// Installs (once) a SIGBUS handler that says what happened and exits 2, instead of the shell's
/// bare "Bus error": a mapped file was truncated or replaced while it was read. The handler only
/// calls `write` and `_exit`, which are async-signal-safe; nothing has been written by then (the
/// audit writes only after reading), so exiting is safe.
fn report_truncation_on_sigbus() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn on_sigbus(_: libc::c_int) {
        const MSG: &[u8] = b"error: a file was truncated or replaced while archsmith read it (SIGBUS on its memory map); nothing was written. Run again once the file is complete.\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe; MSG is static.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(2);
        }
    }
    ONCE.call_once(|| {
        // SAFETY: installs a handler for SIGBUS only; the handler is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
        }
    });
}

fn audit_file(p: &Path, opts: &Options, out: &mut Vec<FileAudit>, explicit: bool) {
    let display = p.display().to_string();
    if is_wheel_name(p) {
        audit_wheel(p, &display, opts, out);
        return;
    }
    let data = match std::fs::metadata(p) {
        Ok(m) if m.len() == 0 => None,
        _ => match map(p) {
            Ok(m) => Some(m),
            Err(e) => return out.push(failed(display, e)),
        },
    };
    let bytes: &[u8] = data.as_deref().unwrap_or(&[]);
    if !elf::is_elf(bytes) && explicit {
        return out.push(failed(display, FileError::Unsupported));
    }
    let stem = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    out.push(FileAudit {
        outcome: audit_bytes(bytes, opts, &stem, &stem),
        path: display,
    });
}

/// Audits one ELF image in memory and extracts it when asked. `subdir` names its extract folder.
fn audit_bytes(bytes: &[u8], opts: &Options, file_name: &str, subdir: &str) -> Outcome {
    let mut audit = match audit_elf(bytes) {
        Ok(a) => a,
        Err(e) => return Outcome::Failed(e.into()),
    };
    audit.links = super::dynamic::read_links(bytes)
        .ok()
        .map(|info| super::dynamic::Links::from(&info));
    if let Some(section) = audit.counted() {
        let total = section.container_images().len();
        let missing: std::collections::BTreeSet<usize> = opts
            .kernels_for
            .iter()
            .flat_map(|cc| section.containers_without(*cc))
            .collect();
        // Only a partly covered file has kernels worth naming; one with none runs nowhere there.
        if !missing.is_empty() && missing.len() < total {
            // Names are a help for the reader of the report; a cubin that does not parse leaves
            // them out rather than failing the audit the headers already gave.
            audit.kernels =
                super::kernel_names::container_kernels(bytes, &missing).unwrap_or_default();
        }
    }
    if let Some(dir) = &opts.extract {
        if audit.has_device_code() {
            let stem = file_name.split('.').next().unwrap_or(file_name);
            if let Err(e) = extract_elf(
                bytes,
                &dir.join(safe_component(subdir)),
                &safe_component(stem),
            ) {
                return Outcome::Failed(FileError::Extract(e.to_string()));
            }
        }
    }
    Outcome::Audited(audit)
}

/// Wheel members that are shared objects: `*.so` and versioned `*.so.N…`.
pub fn is_shared_object_name(name: &str) -> bool {
    let base = name.rsplit('/').next().unwrap_or(name);
    base.ends_with(".so") || base.contains(".so.")
}

fn audit_wheel(p: &Path, display: &str, opts: &Options, out: &mut Vec<FileAudit>) {
    let map = match map(p) {
        Ok(m) => m,
        Err(e) => return out.push(failed(display.to_string(), e)),
    };
    let mut archive = match zip::ZipArchive::new(std::io::Cursor::new(&map[..])) {
        Ok(a) => a,
        Err(e) => return out.push(failed(display.to_string(), FileError::Zip(zip_words(&e)))),
    };
    // Members to read, largest first so the long inflates start early and threads finish together.
    let mut jobs: Vec<(usize, String, u64, u64)> = Vec::new();
    for i in 0..archive.len() {
        let Some(name) = archive.name_for_index(i).map(str::to_string) else {
            continue;
        };
        if name.ends_with('/') || !is_shared_object_name(&name) {
            continue;
        }
        let (csize, size) = archive
            .by_index_raw(i)
            .map(|f| (f.compressed_size(), f.size()))
            .unwrap_or((0, 0));
        jobs.push((i, name, csize, size));
    }
    jobs.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    let budget = Budget::new(INFLATE_BUDGET);
    let wheel_name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let unpacked = opts
        .unpacked
        .iter()
        .find(|(wheel, _)| wheel == p)
        .map(|(_, dir)| dir.as_path());
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, FileAudit)>> = Mutex::new(Vec::with_capacity(jobs.len()));
    let workers = threads(opts).min(jobs.len()).max(1);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                let mut archive = archive.clone();
                let wheel: &[u8] = &map;
                loop {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    let Some((index, name, _, size)) = jobs.get(j) else {
                        break;
                    };
                    let path = format!("{display}!{name}");
                    let _held = budget.acquire(*size);
                    let member = match unpacked.and_then(|d| unpacked_member(d, name, *size)) {
                        Some(m) => Ok(m),
                        None => read_member(&mut archive, wheel, *index),
                    };
                    let outcome = match member {
                        Err(e) => Outcome::Failed(e),
                        Ok(bytes) if !elf::is_elf(&bytes) => Outcome::Audited(ElfAudit::default()),
                        Ok(bytes) => {
                            let file_name = name.rsplit('/').next().unwrap_or(name);
                            audit_bytes(&bytes, opts, file_name, &format!("{wheel_name}!{name}"))
                        }
                    };
                    let mut r = results.lock().unwrap_or_else(|e| e.into_inner());
                    r.push((*index, FileAudit { path, outcome }));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(i, _)| *i);
    out.extend(results.into_iter().map(|(_, f)| f));
}

/// A wheel member's bytes: borrowed from the wheel's map when stored, else inflated into an
/// anonymous map of the declared size. (Huge pages were measured: fewer faults but more system
/// time for compaction, so plain pages it is.)
enum Member<'a> {
    Empty,
    Stored(&'a [u8]),
    Inflated(memmap2::MmapMut),
    /// Read from the file a load check unpacked ([`Options::unpacked`]).
    Unpacked(memmap2::Mmap),
}

impl std::ops::Deref for Member<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Member::Empty => &[],
            Member::Stored(s) => s,
            Member::Inflated(m) => m,
            Member::Unpacked(m) => m,
        }
    }
}

/// A wheel member as unpacked under `dir`: a regular file at the member's own path (plain
/// components only) with the size the zip declares, mapped; None otherwise.
fn unpacked_member(dir: &Path, name: &str, size: u64) -> Option<Member<'static>> {
    let rel = Path::new(name);
    if !rel
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)))
    {
        return None;
    }
    let path = dir.join(rel);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.is_file() || meta.len() != size {
        return None;
    }
    if size == 0 {
        return Some(Member::Empty);
    }
    map(&path).ok().map(Member::Unpacked)
}

/// Bytes of inflated members in memory at once, over all threads: a wheel's declared sizes are
/// untrusted, so threads × the largest member is not a bound. A member larger than this runs alone.
const INFLATE_BUDGET: u64 = 2 << 30;

/// Declared bytes in flight, and the threads waiting for room.
struct Budget {
    in_flight: Mutex<u64>,
    room: std::sync::Condvar,
    cap: u64,
}

/// Room taken in a [`Budget`], given back when dropped.
struct Held<'b> {
    budget: &'b Budget,
    bytes: u64,
}

impl Budget {
    fn new(cap: u64) -> Budget {
        Budget {
            in_flight: Mutex::new(0),
            room: std::sync::Condvar::new(),
            cap,
        }
    }

    /// Waits until `bytes` fit beside what is in flight (or nothing is).
    fn acquire(&self, bytes: u64) -> Held<'_> {
        let mut n = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        while *n > 0 && n.saturating_add(bytes) > self.cap {
            n = self.room.wait(n).unwrap_or_else(|e| e.into_inner());
        }
        *n += bytes;
        Held {
            budget: self,
            bytes,
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut n = self
            .budget
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *n -= self.bytes;
        self.budget.room.notify_all();
    }
}

/// Largest member inflated (the zip's declared size is untrusted; the map is only reserved).
const MAX_MEMBER: u64 = 16 << 30;

/// Reads member `index` straight from the wheel's bytes: one inflate call into a buffer of the
/// declared size (no intermediate copies), then the CRC-32 the zip records is checked.
fn read_member<'w>(
    archive: &mut zip::ZipArchive<std::io::Cursor<&'w [u8]>>,
    wheel: &'w [u8],
    index: usize,
) -> Result<Member<'w>, FileError> {
    let zerr = |e: zip::result::ZipError| FileError::Zip(e.to_string());
    let f = archive.by_index_raw(index).map_err(zerr)?;
    let (method, csize, size, crc) = (f.compression(), f.compressed_size(), f.size(), f.crc32());
    if f.encrypted() {
        return Err(FileError::Zip("member is encrypted".into()));
    }
    let start = f
        .data_start()
        .ok_or_else(|| FileError::Zip("member has no data offset".into()))?;
    let raw = elf::range(wheel, start, csize, "zip member data", start)
        .map_err(|e| FileError::Zip(e.to_string()))?;
    let (member, found) = match method {
        zip::CompressionMethod::Stored if csize == size => {
            (Member::Stored(raw), crc32fast::hash(raw))
        }
        zip::CompressionMethod::Stored => {
            return Err(FileError::Zip(format!(
                "stored member: compressed size {csize} != size {size}"
            )))
        }
        // Only ELF files are audited: a member whose first bytes are not ELF's magic (a zip bomb
        // of zeros named `.so`) is never inflated, whatever size it declares.
        zip::CompressionMethod::Deflated if !inflates_to_elf(raw) => return Ok(Member::Empty),
        zip::CompressionMethod::Deflated => inflate(raw, size)?,
        other => {
            return Err(FileError::Zip(format!(
                "unsupported compression method {other}"
            )))
        }
    };
    if found != crc {
        return Err(FileError::Zip(format!(
            "CRC-32 is {found:08x}, the zip records {crc:08x}"
        )));
    }
    Ok(member)
}

/// Whether the deflate stream `raw` starts with ELF's magic (inflates 4 bytes).
fn inflates_to_elf(raw: &[u8]) -> bool {
    let mut head = [0u8; 4];
    let mut d = flate2::Decompress::new(false);
    let mut got = 0;
    // A stream may yield its first bytes over several calls (stored blocks, tiny first blocks).
    for _ in 0..8 {
        let before = (d.total_in(), d.total_out());
        let i = d.total_in() as usize;
        if d.decompress(
            &raw[i.min(raw.len())..],
            &mut head[got..],
            flate2::FlushDecompress::None,
        )
        .is_err()
        {
            return false;
        }
        got = d.total_out() as usize;
        if got == head.len() || (d.total_in(), d.total_out()) == before {
            break;
        }
    }
    got == head.len() && elf::is_elf(&head)
}

/// Inflates `raw` into a buffer of the declared `size`; returns it with its CRC-32, computed per
/// chunk right after the chunk is written (while it is still in cache, not in a second pass).
fn inflate(raw: &[u8], size: u64) -> Result<(Member<'static>, u32), FileError> {
    if size == 0 {
        return Ok((Member::Empty, crc32fast::hash(&[])));
    }
    if size > MAX_MEMBER {
        return Err(FileError::Zip(format!(
            "member declares {size} bytes (limit {MAX_MEMBER})"
        )));
    }
    // Deflate expands at most 1032:1, so a larger declared size is a lie; checking it bounds the
    // memory a hostile wheel can make us commit to what its bytes could really produce.
    let limit = (raw.len() as u64)
        .saturating_mul(1032)
        .saturating_add(1 << 16);
    if size > limit {
        return Err(FileError::Zip(format!(
            "member declares {size} bytes, more than deflate can produce from {} bytes",
            raw.len()
        )));
    }
    // Pre-faulting the output in one call saves a page fault per 4 KiB page written (a
    // quarter-million on torch's wheel).
    let mut out = memmap2::MmapOptions::new()
        .len(size as usize)
        .populate()
        .map_anon()
        .map_err(|e| FileError::Io(e.to_string()))?;
    const CHUNK: usize = 1 << 20;
    let mut d = flate2::Decompress::new(false);
    let mut crc = crc32fast::Hasher::new();
    loop {
        let (i, o) = (d.total_in() as usize, d.total_out() as usize);
        let end = (o + CHUNK).min(out.len());
        let status = d
            .decompress(&raw[i..], &mut out[o..end], flate2::FlushDecompress::None)
            .map_err(|e| FileError::Zip(format!("inflating: {e}")))?;
        let written = d.total_out() as usize;
        crc.update(&out[o..written]);
        let progressed = d.total_in() as usize != i || written != o;
        match status {
            flate2::Status::StreamEnd => break,
            _ if progressed => continue,
            _ => break,
        }
    }
    if d.total_out() != size {
        return Err(FileError::Zip(format!(
            "inflated to {} bytes, the zip declares {size}",
            d.total_out()
        )));
    }
    Ok((Member::Inflated(out), crc.finalize()))
}
