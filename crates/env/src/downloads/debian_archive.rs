//! Debian's archive read the way apt reads it, without apt and without root: a suite's `InRelease`
//! checked with `gpgv` against Debian's archive keyring, each component's `Packages.xz` checked
//! against the SHA256 list that signature covers, and packages picked by name with the versions
//! their parents' `Depends` require. A package's `.deb` is then streamed through
//! [`super::deb_file::extract`], its size and SHA256 checked against the signed index.
//!
//! The verified `InRelease` and `Packages.xz` are kept under `cache_dir()/debian-archive/SUITE/`,
//! so an offline call reads them (checked again) instead of the network.

use crate::paths;
use anyhow::{anyhow, bail, Context, Result};
use fs_err as fs;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Debian's archive keyring as Debian and Ubuntu install it (`debian-archive-keyring`).
pub const DEFAULT_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// Names another keyring file (a host whose keyring lives elsewhere).
pub const KEYRING_ENV: &str = "ARCHSMITH_DEBIAN_KEYRING";
/// Names another mirror (`http://mirror.example/debian`); else the machine's apt sources' Debian
/// mirror, else deb.debian.org.
pub const MIRROR_ENV: &str = "ARCHSMITH_DEBIAN_MIRROR";

/// Debian's name for this machine's CPU (`amd64`, `arm64`) and its multiarch library directory.
pub fn debian_arch() -> Result<(&'static str, &'static str)> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(("amd64", "x86_64-linux-gnu")),
        "aarch64" => Ok(("arm64", "aarch64-linux-gnu")),
        other => bail!("Debian's CUDA packages are built for amd64 and arm64, not {other}"),
    }
}

/// A suite's `Release` text as its signature covers it.
#[derive(Debug, Clone)]
pub struct Release {
    /// `Date:` (when the archive signed this index).
    pub date: String,
    /// path (`non-free/binary-amd64/Packages.xz`) → (sha256, size).
    files: BTreeMap<String, (String, u64)>,
}

impl Release {
    /// Reads the `SHA256:` list of a Release file's text.
    pub fn parse(text: &str) -> Result<Release> {
        let mut files = BTreeMap::new();
        let mut date = String::new();
        let mut in_sha256 = false;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix(' ') {
                if in_sha256 {
                    let mut parts = rest.split_whitespace();
                    let (Some(hash), Some(size), Some(path), None) =
                        (parts.next(), parts.next(), parts.next(), parts.next())
                    else {
                        bail!("a SHA256 line of the Release file is not `HASH SIZE PATH`: {rest}");
                    };
                    let size = size
                        .parse()
                        .with_context(|| format!("the size in the Release line `{rest}`"))?;
                    files.insert(path.to_string(), (hash.to_ascii_lowercase(), size));
                }
                continue;
            }
            in_sha256 = line.trim_end() == "SHA256:";
            if let Some(d) = line.strip_prefix("Date:") {
                date = d.trim().to_string();
            }
        }
        if files.is_empty() {
            bail!("the Release file lists no SHA256 sums");
        }
        Ok(Release { date, files })
    }

    /// Refuses `bytes` unless they are the file `path` the signed index lists, byte for byte.
    pub fn check(&self, path: &str, bytes: &[u8]) -> Result<()> {
        let (want, size) = self
            .files
            .get(path)
            .ok_or_else(|| anyhow!("the signed Release file does not list {path}"))?;
        let got = crate::stamp::hex(&Sha256::digest(bytes));
        if bytes.len() as u64 != *size || got != *want {
            bail!(
                "{path} is not the file the signed Release lists ({size} bytes, sha256 {want}): got {} bytes, sha256 {got}; refusing it",
                bytes.len()
            );
        }
        Ok(())
    }
}

/// What `gpgv` said of a signed file: the text it covers and the key that signed it.
#[derive(Debug, Clone)]
pub struct Verified {
    pub text: String,
    /// The signing key's fingerprint (`VALIDSIG`).
    pub fingerprint: String,
}

/// Checks `signed` (an `InRelease`) with `gpgv` against `keyring`; the text the signature covers
/// (gpgv's own output, so nothing outside the signature is ever read).
pub fn verify_signature(signed: &Path, keyring: &Path, scratch: &Path) -> Result<Verified> {
    if !keyring.is_file() {
        bail!(
            "Debian's archive keyring {} is not here: archsmith checks the archive's signature as apt does. Install debian-archive-keyring (or point {KEYRING_ENV} at a copy of it)",
            keyring.display()
        );
    }
    let out = scratch.join("Release.verified");
    let status = crate::process::Cmd::new("gpgv")
        .arg("--status-fd")
        .arg("1")
        .arg("--keyring")
        .arg(keyring)
        .arg("--output")
        .arg(&out)
        .arg(signed)
        .read()
        .map_err(|e| {
            anyhow!(
                "gpgv refused the signature of {} against {}: {e:#}\n(gpgv is Debian's `gpgv` package; without a good signature archsmith uses nothing from the archive)",
                signed.display(),
                keyring.display()
            )
        })?;
    let fingerprint = status
        .lines()
        .find_map(|l| l.strip_prefix("[GNUPG:] VALIDSIG "))
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| anyhow!("gpgv printed no VALIDSIG line for {}", signed.display()))?
        .to_string();
    let text = fs::read_to_string(&out)?;
    Ok(Verified { text, fingerprint })
}

/// One package of a `Packages` index.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub name: String,
    pub version: String,
    /// `non-free`, `main`.
    pub component: String,
    /// Its path under the mirror (`pool/non-free/n/…deb`).
    pub filename: String,
    pub size: u64,
    pub sha256: String,
    #[serde(skip)]
    pub depends: String,
}

impl Record {
    fn debian_version(&self) -> Result<debversion::Version> {
        self.version.parse().map_err(|e| {
            anyhow!(
                "{} has no Debian version `{}`: {e:?}",
                self.name,
                self.version
            )
        })
    }
}

/// The records of one `Packages` text.
pub fn parse_packages(text: &str, component: &str) -> Result<Vec<Record>> {
    let doc: deb822_fast::Deb822 = text
        .parse()
        .map_err(|e| anyhow!("the {component} Packages index does not parse: {e}"))?;
    let mut out = Vec::new();
    for p in doc.iter() {
        let field = |k: &str| p.get(k).map(str::trim);
        let (Some(name), Some(version), Some(filename), Some(size), Some(sha256)) = (
            field("Package"),
            field("Version"),
            field("Filename"),
            field("Size"),
            field("SHA256"),
        ) else {
            continue;
        };
        out.push(Record {
            name: name.to_string(),
            version: version.to_string(),
            component: component.to_string(),
            filename: filename.to_string(),
            size: size
                .parse()
                .with_context(|| format!("{name}'s Size `{size}`"))?,
            sha256: sha256.to_ascii_lowercase(),
            depends: field("Depends").unwrap_or_default().to_string(),
        });
    }
    Ok(out)
}

/// One alternative of a `Depends` entry: `libcudart12 (= 12.4.127~12.4.1-2)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    pub name: String,
    /// (`=`, `>=`, `<<`, …, version).
    pub constraint: Option<(String, String)>,
}

impl Relation {
    fn satisfied_by(&self, version: &debversion::Version) -> Result<bool> {
        let Some((op, want)) = &self.constraint else {
            return Ok(true);
        };
        let want: debversion::Version = want
            .parse()
            .map_err(|e| anyhow!("`{want}` in a relation on {}: {e:?}", self.name))?;
        Ok(match op.as_str() {
            "=" => *version == want,
            ">=" => *version >= want,
            "<=" => *version <= want,
            ">>" => *version > want,
            "<<" => *version < want,
            other => bail!("unknown relation operator `{other}` on {}", self.name),
        })
    }
}

impl std::fmt::Display for Relation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.constraint {
            Some((op, v)) => write!(f, "{} ({op} {v})", self.name),
            None => write!(f, "{}", self.name),
        }
    }
}

/// A `Depends` field: entries separated by `,`, alternatives by `|`; architecture qualifiers
/// (`:any`) and restriction lists are dropped.
pub fn parse_depends(field: &str) -> Result<Vec<Vec<Relation>>> {
    let mut out = Vec::new();
    for entry in field.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let mut alts = Vec::new();
        for alt in entry.split('|').map(str::trim) {
            let (head, constraint) = match alt.split_once('(') {
                Some((head, rest)) => {
                    let inner = rest
                        .split_once(')')
                        .map(|(i, _)| i.trim())
                        .ok_or_else(|| anyhow!("unclosed `(` in the relation `{alt}`"))?;
                    let split = inner
                        .find(|c: char| !matches!(c, '<' | '>' | '='))
                        .unwrap_or(inner.len());
                    let (op, version) = inner.split_at(split);
                    if op.is_empty() || version.trim().is_empty() {
                        bail!("the relation `{alt}` has no `OP VERSION`");
                    }
                    (head, Some((op.to_string(), version.trim().to_string())))
                }
                None => (alt, None),
            };
            let name = head.split([':', '[', '<']).next().unwrap_or("").trim();
            if name.is_empty() {
                bail!("a relation with no package name in `{entry}`");
            }
            alts.push(Relation {
                name: name.to_string(),
                constraint,
            });
        }
        out.push(alts);
    }
    Ok(out)
}

/// A package picked for a closure, and the relation that fixed its version.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Picked {
    #[serde(flatten)]
    pub record: Record,
    /// `nvidia-cuda-dev: libcudart12 (= 12.4.127~12.4.1-2)`; None for the first name.
    pub required_by: Option<String>,
}

/// Picks `names` from `records`: the first is the root, each other must be named by a `Depends`
/// entry of a picked package (an entry whose only alternative among `names` is it), and gets the
/// newest version every such relation accepts. Relations on packages outside `names` are left
/// out on purpose: the closure is the part of a toolkit a build needs, not all that apt installs.
pub fn resolve(records: &[Record], names: &[String]) -> Result<Vec<Picked>> {
    let candidates =
        |name: &str| -> Vec<&Record> { records.iter().filter(|r| r.name == name).collect() };
    let mut chosen: BTreeMap<&str, &Record> = BTreeMap::new();
    for name in names {
        let newest = candidates(name)
            .into_iter()
            .map(|r| r.debian_version().map(|v| (v, r)))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .max_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, r)| r)
            .ok_or_else(|| anyhow!("the archive's index has no package {name}"))?;
        chosen.insert(name, newest);
    }
    // The relations between picked packages, then each package's newest version that meets them
    // all; a change can tighten another package's relations, so repeat to a fixed point.
    let mut required_by: BTreeMap<String, String> = BTreeMap::new();
    for _ in 0..=names.len() {
        let wants = relations_among(chosen.values().copied(), names)?;
        let mut changed = false;
        for name in names.iter().skip(1) {
            let rels = wants.get(name).map(Vec::as_slice).unwrap_or_default();
            // Not (yet) named by a picked package: a parent's version may still change.
            let Some((parent, first)) = rels.first() else {
                required_by.remove(name);
                continue;
            };
            let mut best: Option<(debversion::Version, &Record)> = None;
            for r in candidates(name) {
                let v = r.debian_version()?;
                let mut ok = true;
                for (_, rel) in rels {
                    ok &= rel.satisfied_by(&v)?;
                }
                if ok && best.as_ref().is_none_or(|(b, _)| v > *b) {
                    best = Some((v, r));
                }
            }
            let Some((_, record)) = best else {
                let asked: Vec<String> = rels.iter().map(|(p, r)| format!("{p}: {r}")).collect();
                bail!(
                    "the archive has no {name} that meets {}",
                    asked.join(" and ")
                );
            };
            if chosen.get(name.as_str()).map(|r| &r.version) != Some(&record.version) {
                changed = true;
                chosen.insert(name, record);
            }
            required_by.insert(name.clone(), format!("{parent}: {first}"));
        }
        if !changed {
            if let Some(stray) = names.iter().skip(1).find(|n| !required_by.contains_key(*n)) {
                bail!(
                    "no package of the closure ({}) depends on {stray}: the knowledge base's closure does not match the archive",
                    names.join(", ")
                );
            }
            return Ok(names
                .iter()
                .map(|n| Picked {
                    record: chosen[n.as_str()].clone(),
                    required_by: required_by.get(n).cloned(),
                })
                .collect());
        }
    }
    bail!("the versions of {} do not settle", names.join(", "))
}

/// name → (parent, relation) for each `Depends` entry of `parents` whose only alternative among
/// `names` is that name.
fn relations_among<'a>(
    parents: impl Iterator<Item = &'a Record>,
    names: &[String],
) -> Result<BTreeMap<String, Vec<(String, Relation)>>> {
    let mut wants: BTreeMap<String, Vec<(String, Relation)>> = BTreeMap::new();
    for parent in parents {
        for group in parse_depends(&parent.depends)? {
            let inside: Vec<&Relation> = group.iter().filter(|r| names.contains(&r.name)).collect();
            if let [rel] = inside[..] {
                wants
                    .entry(rel.name.clone())
                    .or_default()
                    .push((parent.name.clone(), rel.clone()));
            }
        }
    }
    Ok(wants)
}

/// A suite of a Debian mirror.
pub struct Suite {
    agent: ureq::Agent,
    pub mirror: String,
    pub name: String,
    pub arch: &'static str,
    cache: PathBuf,
}

/// A suite's index as verified: the Release and every record of the components read.
pub struct Index {
    pub release: Release,
    pub fingerprint: String,
    pub records: Vec<Record>,
}

impl Suite {
    pub fn new(name: &str) -> Result<Suite> {
        let mirror = std::env::var(MIRROR_ENV)
            .ok()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(super::debian_mirror);
        Ok(Suite {
            agent: crate::http::agent(Duration::from_secs(3600)),
            mirror: mirror.trim_end_matches('/').to_string(),
            name: name.to_string(),
            arch: debian_arch()?.0,
            cache: paths::cache_dir().join("debian-archive").join(name),
        })
    }

    /// The keyring the signature is checked against.
    pub fn keyring() -> PathBuf {
        std::env::var_os(KEYRING_ENV)
            .filter(|k| !k.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_KEYRING))
    }

    /// The suite's signed index and the `components`' packages, each checked; from the network,
    /// or offline from the copies a previous call verified.
    pub fn index(&self, components: &[String], progress: &mut dyn FnMut(&str)) -> Result<Index> {
        self.read_index(components, crate::offline::reason().is_some(), progress)
    }

    /// The index as a previous [`Suite::index`] kept it, its signature and hashes checked again:
    /// what an installed toolkit was resolved against, the same answer whatever the archive
    /// holds today (the hermetic tests' index; `index` is the live one).
    pub fn index_kept(&self, components: &[String]) -> Result<Index> {
        self.read_index(components, true, &mut |_| {})
    }

    fn read_index(
        &self,
        components: &[String],
        offline: bool,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Index> {
        fs::create_dir_all(&self.cache)?;
        let scratch = tempfile::Builder::new()
            .prefix(".index-")
            .tempdir_in(&self.cache)?;
        let signed = scratch.path().join("InRelease");
        let cached = self.cache.join("InRelease");
        if offline {
            if !cached.is_file() {
                crate::offline::require(
                    &format!("Debian {}'s index", self.name),
                    "Run it once where Debian's archive is reachable",
                )?;
            }
            fs::copy(&cached, &signed)?;
        } else {
            progress(&format!(
                "reading {}/dists/{}/InRelease",
                self.mirror, self.name
            ));
            fs::write(
                &signed,
                self.get(&format!("dists/{}/InRelease", self.name), None)?,
            )?;
        }
        let verified = verify_signature(&signed, &Self::keyring(), scratch.path())?;
        let release = Release::parse(&verified.text)?;
        let mut records = Vec::new();
        for component in components {
            let path = format!("{component}/binary-{}/Packages.xz", self.arch);
            let keep = self.cache.join(path.replace('/', "_"));
            let bytes = if offline {
                fs::read(&keep)?
            } else {
                self.get(&format!("dists/{}/{path}", self.name), Some(64 << 20))?
            };
            release
                .check(&path, &bytes)
                .with_context(|| format!("Debian {}'s {path}", self.name))?;
            let mut text = String::new();
            liblzma::read::XzDecoder::new(&bytes[..])
                .read_to_string(&mut text)
                .with_context(|| format!("decompressing {path}"))?;
            records.extend(parse_packages(&text, component)?);
            if !offline {
                crate::cache::store(&keep, &bytes)?;
            }
        }
        if !offline {
            crate::cache::store(&cached, &fs::read(&signed)?)?;
        }
        Ok(Index {
            release,
            fingerprint: verified.fingerprint,
            records,
        })
    }

    /// The body of `path` under the mirror, whole (at most `limit` bytes).
    fn get(&self, path: &str, limit: Option<u64>) -> Result<Vec<u8>> {
        let mut body = self.open(path)?;
        let mut out = Vec::new();
        let limit = limit.unwrap_or(16 << 20);
        body.by_ref()
            .take(limit + 1)
            .read_to_end(&mut out)
            .with_context(|| format!("reading {}/{path}", self.mirror))?;
        if out.len() as u64 > limit {
            bail!("{}/{path} is larger than {limit} bytes", self.mirror);
        }
        Ok(out)
    }

    /// The body of `path` under the mirror as a stream.
    pub fn open(&self, path: &str) -> Result<Box<dyn Read + Send>> {
        let url = format!("{}/{path}", self.mirror);
        crate::offline::require(&url, "Run it once where Debian's archive is reachable")?;
        let resp = self.agent.get(&url).call().map_err(|e| {
            anyhow!("could not reach {url}: {e} (check the network, or set {MIRROR_ENV} to a Debian mirror)")
        })?;
        let status = resp.status().as_u16();
        if status != 200 {
            bail!("{url} answered HTTP {status} (expected 200)");
        }
        Ok(Box::new(resp.into_body().into_reader()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, version: &str, depends: &str) -> Record {
        Record {
            name: name.into(),
            version: version.into(),
            component: "non-free".into(),
            filename: format!("pool/{name}_{version}.deb"),
            size: 1,
            sha256: "00".into(),
            depends: depends.into(),
        }
    }

    #[test]
    fn release_lists_are_read_and_files_checked_against_them() {
        let body = b"abc";
        let sum = crate::stamp::hex(&Sha256::digest(body));
        let text = format!(
            "Origin: Debian\nDate: Sat, 21 Nov 2026 09:15:44 UTC\nMD5Sum:\n 900150983cd24fb0d6963f7d28e17f72 3 main/x\nSHA256:\n {sum} 3 main/x\n {sum} 4 main/y\n"
        );
        let r = Release::parse(&text).unwrap();
        assert_eq!(r.date, "Sat, 21 Nov 2026 09:15:44 UTC");
        r.check("main/x", body).unwrap();
        let e = r.check("main/x", b"abd").unwrap_err().to_string();
        assert!(e.contains("refusing"), "{e}");
        assert!(r.check("main/y", body).is_err(), "size differs");
        assert!(r.check("main/z", body).is_err(), "not listed");
        assert!(Release::parse("Origin: Debian\n").is_err());
        assert!(Release::parse("SHA256:\n zz notanumber p\n").is_err());
    }

    /// Release, Packages and Depends text cut and scrambled at every few bytes: errors or
    /// records, never a panic.
    #[test]
    fn hostile_index_text_never_panics() {
        let release = "Date: x\nSHA256:\n 00 12 main/Packages\n";
        let packages = "Package: a\nVersion: 1:2.3~4-5\nFilename: pool/a.deb\nSize: 9\nSHA256: 00\nDepends: b (>= 1) | c, d (<< 2~)\n\nPackage: b\n";
        for text in [release, packages] {
            for cut in 0..text.len() {
                for tail in [
                    "",
                    "(",
                    " (>=",
                    "\n ",
                    "|",
                    ",",
                    "\u{0}",
                    "Size: 99999999999999999999\n",
                ] {
                    let t = format!("{}{tail}", &text[..cut]);
                    let _ = Release::parse(&t);
                    let _ = parse_packages(&t, "main");
                    let _ = parse_depends(&t);
                }
            }
        }
    }

    #[test]
    fn depends_fields_parse_into_alternatives() {
        let d = parse_depends("libc6 (>= 2.34), g++-13 | clang-17 | clang (<< 1:18~), libcudart12 (= 12.4.127~12.4.1-2), foo:any [amd64]").unwrap();
        assert_eq!(d.len(), 4);
        assert_eq!(d[1].len(), 3);
        assert_eq!(d[1][2].constraint, Some(("<<".into(), "1:18~".into())));
        assert_eq!(d[2][0].to_string(), "libcudart12 (= 12.4.127~12.4.1-2)");
        assert_eq!(d[3][0].name, "foo");
        assert!(parse_depends("x (>= 1").is_err());
        assert!(parse_depends("x ()").is_err());
    }

    #[test]
    fn the_closure_takes_the_versions_its_parents_pin() {
        let names: Vec<String> = ["toolkit", "dev", "rt", "cub"].map(String::from).into();
        let records = vec![
            record(
                "toolkit",
                "12.4.131~12.4.1-2",
                "dev (= 12.4.127~12.4.1-2), g++-13 | clang-17",
            ),
            record(
                "dev",
                "12.4.127~12.4.1-2",
                "rt (= 12.4.127~12.4.1-2), cub (>= 2.3.2~), libcublas12",
            ),
            record("dev", "12.6.1-1", "rt (= 12.6.1-1)"),
            record("rt", "12.6.1-1", ""),
            record("rt", "12.4.127~12.4.1-2", ""),
            record("cub", "2.3.2-2", ""),
            record("cub", "2.2.0-1", ""),
        ];
        let picked = resolve(&records, &names).unwrap();
        let got: Vec<(&str, &str)> = picked
            .iter()
            .map(|p| (p.record.name.as_str(), p.record.version.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("toolkit", "12.4.131~12.4.1-2"),
                ("dev", "12.4.127~12.4.1-2"),
                ("rt", "12.4.127~12.4.1-2"),
                ("cub", "2.3.2-2")
            ]
        );
        assert_eq!(
            picked[2].required_by.as_deref(),
            Some("dev: rt (= 12.4.127~12.4.1-2)")
        );
        // A pinned version the archive lacks, and a name nothing depends on, are refused.
        let only_newer_dev = [records[0].clone(), records[2].clone()];
        let e = resolve(&only_newer_dev, &names[..2])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no dev that meets toolkit: dev (= 12.4.127~12.4.1-2)"),
            "{e}"
        );
        let stray: Vec<String> = ["toolkit", "cub"].map(String::from).into();
        assert!(resolve(&records, &stray).is_err());
        assert!(resolve(&records, &["nothing".to_string()]).is_err());
    }
}
