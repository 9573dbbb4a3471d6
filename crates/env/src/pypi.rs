//! PyPI read without downloading distributions, for checks that need a few facts from many
//! releases (`kb check --torch`): a project's file list from the JSON Simple API (PEP 691), a
//! wheel's core metadata (PEP 658, or the wheel's own `METADATA` when the index serves none), and
//! single members of a wheel read through HTTP range requests on its zip directory, so reading
//! `torch/version.py` from a 760 MB torch wheel moves about 1.5 MB.
//!
//! What a file holds never changes once uploaded, so metadata and members are kept under
//! [`paths::downloads_dir`]`/pypi-files/FILE/` and a second check reads them from disk. The file
//! list is asked for every time: it is what changes.
//!
//! A file list can also come from a recording kept in the repository ([`Pypi::recorded`],
//! `xtask/data/pypi-recordings/`): the index page as it was read, with its URL, date and sha256,
//! so a check's verdict does not turn with an upload to PyPI; `kb check --record` refreshes the
//! recordings and `kb check --live` says what moved since ([`moved`]). `ARCHSMITH_PYPI_RECORDINGS`
//! set to such a directory makes every file list come from it.
//!
//! The index is [`crate::offline::package_index`] (PyPI unless uv's or pip's index variables name
//! a mirror). Sdists are downloaded whole here ([`Pypi::download`], sha256 checked); wheels to
//! install go through uv or pip ([`crate::downloads`]), which read the same variables.

use crate::paths;
use anyhow::{anyhow, bail, Context, Result};
use fs_err as fs;
use serde::Deserialize;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

/// The Simple API answers PEP 691 JSON when asked for it.
const SIMPLE_JSON: &str = "application/vnd.pypi.simple.v1+json";
/// The largest response read whole (torch's file list is ~3 MB).
const MAX_BODY: u64 = 256 << 20;
/// Bytes fetched per range request; a torch wheel's zip directory (~1.3 MB) takes a few.
const BLOCK: u64 = 512 << 10;

/// One file of a project as the index lists it.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
pub struct IndexFile {
    pub filename: String,
    pub url: String,
    pub size: u64,
    #[serde(rename = "upload-time", default)]
    pub upload_time: Option<String>,
    #[serde(default)]
    pub yanked: serde_json::Value,
    /// PEP 658/714: whether `url + ".metadata"` serves the core metadata.
    #[serde(rename = "core-metadata", default)]
    pub core_metadata: serde_json::Value,
    /// `sha256` → hex digest, as the index states it.
    #[serde(default)]
    pub hashes: HashMap<String, String>,
}

impl IndexFile {
    pub fn is_yanked(&self) -> bool {
        !matches!(
            self.yanked,
            serde_json::Value::Bool(false) | serde_json::Value::Null
        )
    }

    /// `2.6.0` of `torch-2.6.0-cp312-cp312-manylinux1_x86_64.whl`; None for an sdist or odd name.
    pub fn wheel_version(&self) -> Option<&str> {
        let stem = self.filename.strip_suffix(".whl")?;
        stem.split('-').nth(1)
    }

    /// The wheel's tags: (python, abi, platform) of `NAME-VER(-BUILD)?-PY-ABI-PLAT.whl`.
    pub fn wheel_tags(&self) -> Option<(&str, &str, &str)> {
        let stem = self.filename.strip_suffix(".whl")?;
        let parts: Vec<&str> = stem.split('-').collect();
        let n = parts.len();
        (n >= 5).then(|| (parts[n - 3], parts[n - 2], parts[n - 1]))
    }
}

#[derive(Deserialize)]
struct ProjectPage {
    files: Vec<IndexFile>,
}

/// An HTTP client for the index and its file host.
pub struct Pypi {
    agent: ureq::Agent,
    cache: PathBuf,
    /// File lists come from these recordings, not the index.
    recordings: Option<PathBuf>,
}

/// The variable that points every file list at a directory of recordings.
pub const RECORDINGS_VAR: &str = "ARCHSMITH_PYPI_RECORDINGS";

/// The recordings kept in this repository (`xtask/data/pypi-recordings`).
pub fn repository_recordings() -> PathBuf {
    paths::repo_root().join("xtask/data/pypi-recordings")
}

impl Pypi {
    /// File lists from the index, or from the recordings [`RECORDINGS_VAR`] names.
    pub fn new() -> Pypi {
        Pypi {
            agent: crate::http::agent(Duration::from_secs(300)),
            cache: paths::downloads_dir().join("pypi-files"),
            recordings: std::env::var_os(RECORDINGS_VAR)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        }
    }

    /// File lists always from the index, whatever [`RECORDINGS_VAR`] says (`kb check --live`).
    pub fn live() -> Pypi {
        Pypi {
            recordings: None,
            ..Pypi::new()
        }
    }

    /// File lists from the recordings in `dir` (a project without one is an error); what the
    /// files hold is read as [`Pypi::new`] reads it (kept on disk once read, it never changes).
    pub fn recorded(dir: PathBuf) -> Pypi {
        Pypi {
            recordings: Some(dir),
            ..Pypi::new()
        }
    }

    /// The index page of `project`.
    pub fn page_url(project: &str) -> String {
        format!(
            "{}/{}/",
            crate::offline::package_index(),
            normalized_name(project)
        )
    }

    /// Every file of `project` the index lists, in its order (or as recorded).
    pub fn files(&self, project: &str) -> Result<Vec<IndexFile>> {
        if let Some(dir) = &self.recordings {
            return Ok(read_recording(dir, project)?.files);
        }
        self.live_files(project)
    }

    /// Every file of `project` the index lists today.
    pub fn live_files(&self, project: &str) -> Result<Vec<IndexFile>> {
        let url = Pypi::page_url(project);
        let body = self.get(&url, None, Some(SIMPLE_JSON))?;
        let page: ProjectPage = serde_json::from_slice(&body)
            .with_context(|| format!("{url} did not answer the JSON Simple API (PEP 691)"))?;
        Ok(page.files)
    }

    /// Downloads `file` whole into `dir` (written through a temporary name), its sha256 checked
    /// against the index's; the path.
    pub fn download(&self, file: &IndexFile, dir: &std::path::Path) -> Result<PathBuf> {
        use sha2::Digest;
        let bytes = self.get(&file.url, None, None)?;
        if let Some(want) = file.hashes.get("sha256") {
            let got = crate::stamp::hex(&sha2::Sha256::digest(&bytes));
            if !got.eq_ignore_ascii_case(want) {
                bail!(
                    "sha256 mismatch for {}: the index says {want}, the download is {got}",
                    file.filename
                );
            }
        }
        let path = dir.join(&file.filename);
        crate::cache::store(&path, &bytes)?;
        Ok(path)
    }

    /// The wheel's core metadata (`METADATA`): the index's PEP 658 copy, or the member itself.
    pub fn metadata(&self, file: &IndexFile) -> Result<String> {
        let cached = self.cache.join(&file.filename).join("METADATA");
        if let Ok(text) = fs::read_to_string(&cached) {
            return Ok(text);
        }
        let served = !matches!(
            file.core_metadata,
            serde_json::Value::Null | serde_json::Value::Bool(false)
        );
        let bytes = match served {
            true => self.get(&format!("{}.metadata", file.url), None, None)?,
            false => {
                let mut wheel = self.open_wheel(file)?;
                let name = wheel
                    .names()
                    .find(|n| n.ends_with(".dist-info/METADATA") && n.matches('/').count() == 1)
                    .map(str::to_string)
                    .ok_or_else(|| anyhow!("{} has no .dist-info/METADATA", file.filename))?;
                wheel.read(&name)?
            }
        };
        let text = String::from_utf8(bytes)
            .with_context(|| format!("the METADATA of {} is not UTF-8", file.filename))?;
        crate::cache::store(&cached, text.as_bytes())?;
        Ok(text)
    }

    /// The named members of a wheel, `None` for one it does not hold. Reads the zip directory and
    /// each member by range; only members not kept from an earlier read are fetched.
    pub fn members(&self, file: &IndexFile, names: &[&str]) -> Result<Vec<Option<Vec<u8>>>> {
        let dir = self.cache.join(&file.filename);
        let kept = |name: &str| dir.join("members").join(name);
        let absent = |name: &str| dir.join("absent").join(name);
        let mut out: Vec<Option<Option<Vec<u8>>>> = names
            .iter()
            .map(|n| {
                if absent(n).exists() {
                    Some(None)
                } else {
                    fs::read(kept(n)).ok().map(Some)
                }
            })
            .collect();
        if out.iter().any(Option::is_none) {
            let mut wheel = self.open_wheel(file)?;
            for (slot, name) in out.iter_mut().zip(names) {
                if slot.is_some() {
                    continue;
                }
                if wheel.names().any(|n| n == *name) {
                    let bytes = wheel.read(name)?;
                    crate::cache::store(&kept(name), &bytes)?;
                    *slot = Some(Some(bytes));
                } else {
                    crate::cache::store(&absent(name), b"")?;
                    *slot = Some(None);
                }
            }
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// One member of a wheel read by range and not kept (large libraries a check reads once).
    pub fn member_uncached(&self, file: &IndexFile, name: &str) -> Result<Option<Vec<u8>>> {
        let mut wheel = self.open_wheel(file)?;
        if !wheel.names().any(|n| n == name) {
            return Ok(None);
        }
        wheel.read(name).map(Some)
    }

    /// The names of the members `wanted` accepts, from the wheel's zip directory read by range.
    pub fn member_names(
        &self,
        file: &IndexFile,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<String>> {
        let wheel = self.open_wheel(file)?;
        Ok(wheel
            .names()
            .filter(|n| wanted(n))
            .map(str::to_string)
            .collect())
    }

    /// Where each member `wanted` accepts lies in a wheel: its zip directory read by range once.
    pub fn member_spans(
        &self,
        file: &IndexFile,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<(String, crate::wheel::MemberSpan)>> {
        let mut wheel = self.open_wheel(file)?;
        let names: Vec<String> = wheel
            .names()
            .filter(|n| wanted(n))
            .map(str::to_string)
            .collect();
        let mut out = Vec::new();
        for name in names {
            if let Some(span) = wheel.span(&name)? {
                out.push((name, span));
            }
        }
        Ok(out)
    }

    /// One member of a wheel (`name` at `span`, from [`Pypi::member_spans`]) inflated into `dest`
    /// from a single ranged download, never held in memory (torch's libraries are hundreds of
    /// MB), its size and CRC-32 checked against the zip directory and written through a
    /// temporary name.
    pub fn span_to_file(
        &self,
        file: &IndexFile,
        name: &str,
        span: crate::wheel::MemberSpan,
        dest: &std::path::Path,
    ) -> Result<()> {
        let dir = dest
            .parent()
            .ok_or_else(|| anyhow!("{} has no parent directory", dest.display()))?;
        fs::create_dir_all(dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir)
            .with_context(|| format!("creating a file in {}", dir.display()))?;
        let mut written = Checked::default();
        if span.compressed_size > 0 {
            let range = (span.data_start, span.data_start + span.compressed_size - 1);
            let body = self
                .call(&file.url, Some(range), None)?
                .into_body()
                .into_reader();
            let mut inflated: Box<dyn Read> = match span.deflated {
                true => Box::new(flate2::read::DeflateDecoder::new(body)),
                false => Box::new(body),
            };
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = inflated
                    .read(&mut buf)
                    .with_context(|| format!("inflating {name} from {}", file.url))?;
                if n == 0 {
                    break;
                }
                written.update(&buf[..n]);
                std::io::Write::write_all(&mut tmp, &buf[..n])
                    .with_context(|| format!("writing {}", tmp.path().display()))?;
            }
        }
        if written.size != span.size || written.crc.clone().finalize() != span.crc32 {
            bail!(
                "{name} from {} inflated to {} bytes with CRC-32 {:08x}; its zip directory says {} bytes, {:08x}",
                file.url,
                written.size,
                written.crc.finalize(),
                span.size,
                span.crc32
            );
        }
        tmp.persist(dest)
            .with_context(|| format!("writing {}", dest.display()))?;
        Ok(())
    }

    fn open_wheel(&self, file: &IndexFile) -> Result<crate::wheel::Wheel<RangeReader<'_>>> {
        let reader = RangeReader {
            pypi: self,
            url: file.url.clone(),
            size: file.size,
            pos: 0,
            blocks: HashMap::new(),
        };
        crate::wheel::Wheel::from_reader(reader, &file.url)
    }

    /// GET `url` (the bytes of `range` when given), whole body; a status other than 200/206 is an
    /// error naming the URL.
    fn get(&self, url: &str, range: Option<(u64, u64)>, accept: Option<&str>) -> Result<Vec<u8>> {
        let mut resp = self.call(url, range, accept)?;
        resp.body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .with_context(|| format!("reading the answer of {url}"))
    }

    /// The response to GET `url` (of `range` when given), its body unread.
    fn call(
        &self,
        url: &str,
        range: Option<(u64, u64)>,
        accept: Option<&str>,
    ) -> Result<ureq::http::Response<ureq::Body>> {
        crate::offline::require(
            url,
            "Give a local file or directory instead of a PyPI release",
        )?;
        let mut req = self.agent.get(url);
        if let Some(a) = accept {
            req = req.header("Accept", a);
        }
        if let Some((start, end)) = range {
            req = req.header("Range", format!("bytes={start}-{end}"));
        }
        let resp = req.call().map_err(|e| {
            anyhow!("could not reach {url}: {e}; archsmith reads PyPI directly here (check the network, HTTPS_PROXY and the system's certificate store)")
        })?;
        let status = resp.status().as_u16();
        let wanted = if range.is_some() { 206 } else { 200 };
        if status != wanted {
            bail!("{url} answered HTTP {status} (expected {wanted})");
        }
        Ok(resp)
    }
}

/// A project's file list as it was read from the index: where, when, and a sha256 over the
/// lines that follow the header, so a recording edited by hand (and not re-recorded) is refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Recording {
    pub url: String,
    /// RFC 3339, UTC.
    pub read_at: String,
    pub files: Vec<IndexFile>,
}

#[derive(Debug, serde::Serialize, Deserialize)]
struct RecordingHeader {
    url: String,
    read_at: String,
    sha256: String,
    files: usize,
}

/// Where `project`'s recording is in `dir`.
pub fn recording_path(dir: &std::path::Path, project: &str) -> PathBuf {
    dir.join(format!("{}.jsonl", normalized_name(project)))
}

/// The recording's text: a header line, then one file a line (a diff shows each file that came
/// or went, or changed).
pub fn recording_text(r: &Recording) -> Result<String> {
    use sha2::Digest;
    let mut body = String::new();
    for f in &r.files {
        body.push_str(&serde_json::to_string(f)?);
        body.push('\n');
    }
    let header = RecordingHeader {
        url: r.url.clone(),
        read_at: r.read_at.clone(),
        sha256: crate::stamp::hex(&sha2::Sha256::digest(body.as_bytes())),
        files: r.files.len(),
    };
    Ok(format!("{}\n{body}", serde_json::to_string(&header)?))
}

/// Writes `r` as `project`'s recording in `dir`.
pub fn write_recording(dir: &std::path::Path, project: &str, r: &Recording) -> Result<PathBuf> {
    let path = recording_path(dir, project);
    crate::cache::store(&path, recording_text(r)?.as_bytes())?;
    Ok(path)
}

/// `project`'s recording in `dir`, its sha256 checked.
pub fn read_recording(dir: &std::path::Path, project: &str) -> Result<Recording> {
    use sha2::Digest;
    let path = recording_path(dir, project);
    let text = crate::input_file::read_text(&path, "PyPI recording").with_context(|| {
        format!(
            "no recording of {project}'s index page: record it with `{} kb check --torch --record`",
            crate::output::program()
        )
    })?;
    let (head, body) = text.split_once('\n').unwrap_or((&text, ""));
    let header: RecordingHeader = serde_json::from_str(head)
        .with_context(|| format!("{}:1: not a recording's header", path.display()))?;
    let sha = crate::stamp::hex(&sha2::Sha256::digest(body.as_bytes()));
    if sha != header.sha256 {
        bail!(
            "{}: its files do not match the sha256 of its header ({} here, {} recorded): it was edited by hand; record it again with `{} kb check --torch --record`",
            path.display(),
            sha,
            header.sha256,
            crate::output::program()
        );
    }
    let files = body
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("{}:{}", path.display(), i + 2))
        })
        .collect::<Result<Vec<IndexFile>>>()?;
    if files.len() != header.files {
        bail!(
            "{}: {} files, its header says {}",
            path.display(),
            files.len(),
            header.files
        );
    }
    Ok(Recording {
        url: header.url,
        read_at: header.read_at,
        files,
    })
}

/// What changed on the index since a recording: files uploaded, gone, yanked or unyanked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Moved {
    /// `new`, `gone`, `yanked`, `unyanked`, `changed`.
    pub what: &'static str,
    pub filename: String,
}

/// The files of `live` that are not as `recorded` has them.
pub fn moved(recorded: &[IndexFile], live: &[IndexFile]) -> Vec<Moved> {
    let before: HashMap<&str, &IndexFile> =
        recorded.iter().map(|f| (f.filename.as_str(), f)).collect();
    let now: HashMap<&str, &IndexFile> = live.iter().map(|f| (f.filename.as_str(), f)).collect();
    let mut out = Vec::new();
    for f in live {
        let what = match before.get(f.filename.as_str()) {
            None => "new",
            Some(b) if b.is_yanked() != f.is_yanked() => {
                if f.is_yanked() {
                    "yanked"
                } else {
                    "unyanked"
                }
            }
            Some(b) if b.hashes != f.hashes || b.size != f.size => "changed",
            Some(_) => continue,
        };
        out.push(Moved {
            what,
            filename: f.filename.clone(),
        });
    }
    out.extend(
        recorded
            .iter()
            .filter(|f| !now.contains_key(f.filename.as_str()))
            .map(|f| Moved {
                what: "gone",
                filename: f.filename.clone(),
            }),
    );
    out
}

impl Default for Pypi {
    fn default() -> Self {
        Pypi::new()
    }
}

/// The Linux x86_64 wheel of torch `version` for the newest CPython it publishes: any would do
/// for what is read from it (headers, Python sources, the libraries' facts), each holds the same.
pub fn linux_wheel<'f>(
    files: &'f [IndexFile],
    version: &crate::version::Version,
) -> Option<&'f IndexFile> {
    let version = version.to_string();
    let linux: Vec<&IndexFile> = files
        .iter()
        .filter(|f| f.wheel_version() == Some(version.as_str()) && is_linux_x86_64(f))
        .collect();
    let (_, py_max) = python_range(&linux)?;
    linux
        .into_iter()
        .find(|f| cpython_minor(f).is_some_and(|m| m == py_max))
}

/// A wheel for Linux on x86_64 (`manylinux1_x86_64`, `manylinux_2_28_x86_64`, …).
pub fn is_linux_x86_64(f: &IndexFile) -> bool {
    f.wheel_tags().is_some_and(|(_, _, plat)| {
        plat.split('.')
            .any(|p| p.contains("linux") && p.ends_with("x86_64"))
    })
}

/// `3.12` for a `cp312-cp312` wheel; None for free-threaded (`cp313t`) and non-CPython tags.
pub fn cpython_minor(f: &IndexFile) -> Option<crate::version::Version> {
    let (py, abi, _) = f.wheel_tags()?;
    let digits = py.strip_prefix("cp")?;
    if abi.ends_with('t') || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() < 2 {
        return None;
    }
    format!("{}.{}", &digits[..1], &digits[1..]).parse().ok()
}

/// The lowest and highest CPython minor among `files`.
pub fn python_range(
    files: &[&IndexFile],
) -> Option<(crate::version::Version, crate::version::Version)> {
    let minors: Vec<crate::version::Version> =
        files.iter().filter_map(|f| cpython_minor(f)).collect();
    Some((minors.iter().min()?.clone(), minors.iter().max()?.clone()))
}

/// The size and CRC-32 of the bytes written so far.
#[derive(Default)]
struct Checked {
    size: u64,
    crc: crc32fast::Hasher,
}

impl Checked {
    fn update(&mut self, bytes: &[u8]) {
        self.size += bytes.len() as u64;
        self.crc.update(bytes);
    }
}

/// PEP 503's normal form of a project name: lower case, runs of `-_.` as one `-`.
pub fn normalized_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// A remote file as `Read + Seek`, fetched in aligned blocks of [`BLOCK`] bytes and kept in memory
/// for the reader's life (the zip directory is read once and members after it).
pub struct RangeReader<'a> {
    pypi: &'a Pypi,
    url: String,
    size: u64,
    pos: u64,
    blocks: HashMap<u64, Vec<u8>>,
}

impl Read for RangeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let index = self.pos / BLOCK;
        if !self.blocks.contains_key(&index) {
            let start = index * BLOCK;
            let end = (start + BLOCK).min(self.size) - 1;
            let bytes = self
                .pypi
                .get(&self.url, Some((start, end)), None)
                .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
            if bytes.len() as u64 != end - start + 1 {
                return Err(std::io::Error::other(format!(
                    "{} answered {} bytes for a range of {}",
                    self.url,
                    bytes.len(),
                    end - start + 1
                )));
            }
            self.blocks.insert(index, bytes);
        }
        let block = &self.blocks[&index];
        let offset = usize::try_from(self.pos - index * BLOCK).unwrap_or(usize::MAX);
        let n = buf.len().min(block.len().saturating_sub(offset));
        buf[..n].copy_from_slice(&block[offset..offset + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for RangeReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = target.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before the start")
        })?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, sha: &str) -> IndexFile {
        IndexFile {
            filename: name.into(),
            url: format!("https://files.example/{name}"),
            size: 10,
            upload_time: Some("2026-10-28T00:00:00Z".into()),
            yanked: serde_json::Value::Bool(false),
            core_metadata: serde_json::Value::Bool(true),
            hashes: [("sha256".to_string(), sha.to_string())].into(),
        }
    }

    /// A recording read back is the page it recorded; against a live answer equal to it nothing
    /// moved; a release uploaded since, a yank, a file gone are each said; a recording edited by
    /// hand without its hash is refused, naming how to record it again.
    #[test]
    fn recordings_round_trip_say_what_moved_and_refuse_hand_edits() {
        let dir = tempfile::tempdir().unwrap();
        let files = vec![
            file(
                "torchaudio-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl",
                "aa",
            ),
            file(
                "torchaudio-2.10.0-cp312-cp312-manylinux_2_28_x86_64.whl",
                "bb",
            ),
        ];
        let rec = Recording {
            url: "https://pypi.org/simple/torchaudio/".into(),
            read_at: "2026-11-28T15:00:00Z".into(),
            files: files.clone(),
        };
        let path = write_recording(dir.path(), "torchaudio", &rec).unwrap();
        let back = read_recording(dir.path(), "torchaudio").unwrap();
        assert_eq!(back, rec);
        assert!(moved(&back.files, &files).is_empty());
        // A new release (the upload that failed a landing), a yank, a file gone.
        let mut live = files.clone();
        live.push(file(
            "torchaudio-2.11.1-cp312-cp312-manylinux_2_28_x86_64.whl",
            "cc",
        ));
        live[1].yanked = serde_json::Value::String("broken".into());
        let m = moved(&back.files, &live);
        let said: Vec<(&str, &str)> = m.iter().map(|m| (m.what, m.filename.as_str())).collect();
        assert_eq!(
            said,
            [
                (
                    "yanked",
                    "torchaudio-2.10.0-cp312-cp312-manylinux_2_28_x86_64.whl"
                ),
                (
                    "new",
                    "torchaudio-2.11.1-cp312-cp312-manylinux_2_28_x86_64.whl"
                )
            ]
        );
        let m = moved(&back.files, &live[..1]);
        assert_eq!(m[0].what, "gone");
        // Edited by hand: a file's hash changed, the header's sha256 not.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"aa\"", "\"ab\"")).unwrap();
        let e = format!(
            "{:#}",
            read_recording(dir.path(), "torchaudio").unwrap_err()
        );
        assert!(
            e.contains("edited by hand") && e.contains("--record"),
            "{e}"
        );
        // A Pypi over recordings answers from them, and names a project it has none of.
        let pypi = Pypi::recorded(dir.path().to_path_buf());
        std::fs::write(&path, text).unwrap();
        assert_eq!(pypi.files("torchaudio").unwrap(), files);
        let e = format!("{:#}", pypi.files("torch").unwrap_err());
        assert!(e.contains("no recording of torch's index page"), "{e}");
    }

    #[test]
    fn cpython_tags() {
        let f = |name: &str| IndexFile {
            filename: name.into(),
            url: String::new(),
            size: 0,
            upload_time: None,
            yanked: serde_json::Value::Bool(false),
            core_metadata: serde_json::Value::Null,
            hashes: Default::default(),
        };
        assert_eq!(
            cpython_minor(&f("torch-2.6.0-cp312-cp312-manylinux1_x86_64.whl"))
                .unwrap()
                .to_string(),
            "3.12"
        );
        assert_eq!(
            cpython_minor(&f("torch-2.6.0-cp313-cp313t-manylinux1_x86_64.whl")),
            None
        );
        assert!(is_linux_x86_64(&f(
            "torch-2.9.0-cp310-cp310-manylinux_2_28_x86_64.whl"
        )));
        assert!(!is_linux_x86_64(&f(
            "torch-2.9.0-cp310-cp310-manylinux_2_28_aarch64.whl"
        )));
        assert!(!is_linux_x86_64(&f(
            "torch-2.9.0-cp310-none-macosx_11_0_arm64.whl"
        )));
    }

    #[test]
    fn project_names_take_pep_503_s_normal_form() {
        assert_eq!(normalized_name("Torch_Scatter"), "torch-scatter");
        assert_eq!(normalized_name("zope.interface"), "zope-interface");
        assert_eq!(normalized_name("a-_.b"), "a-b");
        assert_eq!(normalized_name("torchsort"), "torchsort");
    }

    #[test]
    fn an_index_file_keeps_its_stated_sha256() {
        let f: IndexFile = serde_json::from_str(
            r#"{"filename": "x-1.0.tar.gz", "url": "https://h/x-1.0.tar.gz", "size": 3,
                "hashes": {"sha256": "ab12"}, "yanked": false}"#,
        )
        .unwrap();
        assert_eq!(f.hashes.get("sha256").map(String::as_str), Some("ab12"));
        assert!(!f.is_yanked());
    }
}
