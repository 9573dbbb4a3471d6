//! SOURCE → a directory to build and a content hash for the stamp.
//!
//! * a directory: hashed file by file (build outputs, VCS and caches skipped) and copied into the
//!   scratch dir, so the build never writes into the user's tree;
//! * a local sdist (`.tar.gz`, `.zip`): hashed as a file and unpacked into the scratch dir;
//! * `pypi:NAME==VER`: the sdist is fetched once into `downloads_dir()` through PyPI's JSON simple
//!   API (PEP 691), its sha256 checked against the index, then handled as a local sdist. This does
//!   not use `pip download --no-binary`, which runs the sdist's `setup.py` to read its metadata and
//!   so fails for every extension that imports torch in `setup.py`.

use crate::paths;
use crate::process::Cmd;
use crate::stamp::{hash_file, hex};
use anyhow::{bail, Context, Result};
use fs_err as fs;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    Dir(PathBuf),
    Sdist(PathBuf),
    Pypi { name: String, version: String },
}

impl SourceSpec {
    pub fn parse(s: &str) -> Result<SourceSpec> {
        if let Some(rest) = s.strip_prefix("pypi:") {
            let Some((name, version)) = rest.split_once("==") else {
                bail!(
                    "`{s}`: write a PyPI source as pypi:NAME==VERSION, e.g. pypi:torchsort==0.1.10"
                );
            };
            let ok = |t: &str| {
                !t.is_empty()
                    && t.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-+!".contains(c))
            };
            if !ok(name) || !ok(version) {
                bail!("`{s}`: NAME and VERSION may hold only letters, digits and . _ - + !");
            }
            return Ok(SourceSpec::Pypi {
                name: name.to_string(),
                version: version.to_string(),
            });
        }
        let p = PathBuf::from(s);
        if p.is_dir() {
            // Whether it holds a build script or JIT calls is the build's to find
            // (`build_ext::build`): parsing reads no file.
            return Ok(SourceSpec::Dir(p));
        }
        if p.is_file() {
            if is_sdist_name(s) {
                return Ok(SourceSpec::Sdist(p));
            }
            bail!("{s}: a file SOURCE must be an sdist (.tar.gz, .tgz or .zip)");
        }
        bail!("{s}: no such directory or file (for a PyPI package write pypi:NAME==VERSION)")
    }

    /// A short name for logs and messages.
    pub fn label(&self) -> String {
        match self {
            SourceSpec::Dir(p) => p
                .canonicalize()
                .unwrap_or_else(|_| p.clone())
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| "source".into()),
            SourceSpec::Sdist(p) => sdist_stem(p),
            SourceSpec::Pypi { name, version } => format!("{name}-{version}"),
        }
    }
}

/// The directory has a `setup.py` or `pyproject.toml`.
pub fn has_build_script(dir: &Path) -> bool {
    dir.join("setup.py").exists() || dir.join("pyproject.toml").exists()
}

fn is_sdist_name(s: &str) -> bool {
    s.ends_with(".tar.gz") || s.ends_with(".tgz") || s.ends_with(".zip")
}

fn sdist_stem(p: &Path) -> String {
    let f = p
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    for ext in [".tar.gz", ".tgz", ".zip"] {
        if let Some(s) = f.strip_suffix(ext) {
            return s.to_string();
        }
    }
    f
}

/// A source ready for hashing: a directory, or an sdist file on disk.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub spec: SourceSpec,
    /// The directory or the sdist file.
    pub path: PathBuf,
    /// sha256 of the tree (directory) or of the archive (sdist).
    pub hash: String,
}

/// A path in archsmith's private copy of the source (`copy`) as the user knows it: in their
/// directory, or relative to the sdist's root. Other paths (torch's headers) are left alone.
pub fn user_path(file: &mut String, copy: &Path, spec: &SourceSpec) {
    let copy = copy.display().to_string();
    if let Some(rel) = file.strip_prefix(&copy) {
        let rel = rel.trim_start_matches('/');
        *file = match spec {
            SourceSpec::Dir(d) => d.join(rel).display().to_string(),
            _ => rel.to_string(),
        };
    }
}

/// Before anything is prepared: a directory whose git submodules are empty (a clone without
/// `--recursive`, a snapshot) stops here with what is missing and the command that fills it, not
/// minutes into the compile at a missing header. With `go_on` (`--skip-missing-submodules`) they
/// are returned instead, for the build to report. Sdists carry no submodules.
pub fn unfilled_submodules(
    spec: &SourceSpec,
    go_on: bool,
) -> Result<Option<crate::git_submodules::Unfilled>> {
    let SourceSpec::Dir(dir) = spec else {
        return Ok(None);
    };
    let Some(unfilled) = crate::git_submodules::unfilled_under(dir)
        .with_context(|| format!("reading {}'s git submodules", dir.display()))?
    else {
        return Ok(None);
    };
    if go_on {
        crate::errln!(
            "archsmith: note: {}: the git submodules {} are empty: what includes them will not compile ({})",
            dir.display(),
            unfilled.paths().join(" "),
            crate::git_submodules::GO_ON_FLAG
        );
        return Ok(Some(unfilled));
    }
    bail!(
        "{}",
        unfilled.advice(dir, crate::offline::reason().is_some())
    )
}

/// Downloads (pypi), then hashes. Fast for everything already on disk.
pub fn resolve(spec: &SourceSpec) -> Result<Resolved> {
    let path = match spec {
        SourceSpec::Dir(p) | SourceSpec::Sdist(p) => p.clone(),
        SourceSpec::Pypi { name, version } => download_sdist(name, version)?,
    };
    let hash = match spec {
        SourceSpec::Dir(p) => hash_tree(p)?,
        _ => hash_file(&path)?,
    };
    Ok(Resolved {
        spec: spec.clone(),
        path,
        hash,
    })
}

/// Names a source walk skips: build outputs, VCS data, caches. What is left is what a build reads.
fn skipped(name: &str) -> bool {
    matches!(
        name,
        ".git" | ".hg" | ".svn" | "build" | "dist" | "__pycache__" | ".eggs" | ".tox" | ".venv"
    ) || name.ends_with(".egg-info")
        || name.ends_with(".pyc")
        || name.ends_with(".so")
        || name.ends_with(".o")
}

/// Relative paths of the files a directory build reads, sorted. A symbolic link to a file is
/// one of them (read through the link); a link to a directory is not walked (see [`copy_tree`]).
pub fn tree_files(root: &Path) -> Result<Vec<PathBuf>> {
    Ok(tree_entries(root)?.0)
}

/// The files of [`tree_files`] and the symbolic links to directories, each sorted.
fn tree_entries(root: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let (mut out, mut dir_links) = (Vec::new(), Vec::new());
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        for entry in fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let entry = entry?;
            let name = entry.file_name();
            let name_s = name.to_string_lossy();
            if skipped(&name_s) {
                continue;
            }
            let ft = entry.file_type()?;
            let child = rel.join(&name);
            if ft.is_dir() {
                stack.push(child);
            } else if ft.is_file() {
                out.push(child);
            } else if ft.is_symlink() {
                // A dangling link is no source: left out, as before.
                match std::fs::metadata(entry.path()) {
                    Ok(m) if m.is_file() => out.push(child),
                    Ok(m) if m.is_dir() => dir_links.push(child),
                    _ => {}
                }
            }
        }
    }
    out.sort();
    dir_links.sort();
    Ok((out, dir_links))
}

/// Where the symbolic link `rel` under `root` leads, relative to `root`; an error naming it when
/// it leads out of the tree (a copy would lose it, or reach files the user did not give).
fn link_inside(root: &Path, rel: &Path) -> Result<PathBuf> {
    let canonical_root = root
        .canonicalize()
        .with_context(|| format!("resolving {}", root.display()))?;
    let target = root
        .join(rel)
        .canonicalize()
        .with_context(|| format!("resolving the link {}", root.join(rel).display()))?;
    match target.strip_prefix(&canonical_root) {
        Ok(inside) => Ok(inside.to_path_buf()),
        Err(_) => bail!(
            "{} is a symbolic link to {}, outside the source tree {}: give the directory that holds both as the source (the repository's root), or copy the target into the tree",
            root.join(rel).display(),
            target.display(),
            root.display()
        ),
    }
}

/// Copies the files a build reads (as [`tree_files`] lists them) from `root` to `dest`. A
/// symbolic link to a file inside the tree is copied with its target's bytes; a link to a
/// directory inside the tree stays a link, to the same place in the copy; a link that leaves the
/// tree is refused, naming it.
pub fn copy_tree(root: &Path, dest: &Path) -> Result<()> {
    let (files, dir_links) = tree_entries(root)?;
    for rel in &files {
        if fs::symlink_metadata(root.join(rel))?
            .file_type()
            .is_symlink()
        {
            link_inside(root, rel)?;
        }
        let to = dest.join(rel);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::copy(root.join(rel), &to)
            .with_context(|| format!("copying {} to {}", rel.display(), to.display()))?;
    }
    for rel in &dir_links {
        let inside = link_inside(root, rel)?;
        let to = dest.join(rel);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        std::os::unix::fs::symlink(dest.join(&inside), &to)
            .with_context(|| format!("linking {} to {}", to.display(), inside.display()))?;
    }
    Ok(())
}

/// Whether a source tree declares CUDA code: a `.cu`/`.cuh` file, or a build file naming a CUDA
/// extension or language (`CUDAExtension`, CMake's `LANGUAGES CUDA`). A tree that declares none (a
/// package of `CppExtension`s) has no device code for `--arch` to plan; one that declares some and
/// built none was probably built without CUDA switched on.
pub fn declares_cuda(root: &Path) -> Result<bool> {
    static BUILD_WORDS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"CUDAExtension|(?i:LANGUAGES[^)]*\bCUDA\b|enable_language\s*\(\s*CUDA|cuda_add_library)",
        )
        .expect("CUDA build words")
    });
    for rel in tree_files(root)? {
        let name = rel.to_string_lossy().to_ascii_lowercase();
        if name.ends_with(".cu") || name.ends_with(".cuh") {
            return Ok(true);
        }
        let build_file = name.ends_with(".py")
            || name.ends_with("cmakelists.txt")
            || name.ends_with(".cmake")
            || name.ends_with(".toml");
        if build_file {
            let text = fs::read(root.join(&rel)).unwrap_or_default();
            if BUILD_WORDS.is_match(&String::from_utf8_lossy(&text)) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// sha256 over (path, length, contents) of every file [`tree_files`] lists.
pub fn hash_tree(root: &Path) -> Result<String> {
    let mut h = Sha256::new();
    for rel in tree_files(root)? {
        let data = fs::read(root.join(&rel))
            .with_context(|| format!("reading {}", root.join(&rel).display()))?;
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0]);
        h.update((data.len() as u64).to_le_bytes());
        h.update(&data);
    }
    Ok(hex(&h.finalize()))
}

/// Puts the source into `dest` (a fresh directory) and returns the directory holding its
/// `setup.py`/`pyproject.toml`.
pub fn materialize(src: &Resolved, dest: &Path, python: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dest)?;
    match &src.spec {
        SourceSpec::Dir(p) => {
            copy_tree(p, dest)?;
            Ok(dest.to_path_buf())
        }
        _ => {
            // Python's tarfile with the `data` filter refuses absolute paths, `..`, links out of
            // the tree and device files.
            Cmd::new(python)
                .args(["-c", UNPACK_PY])
                .arg(&src.path)
                .arg(dest)
                .read()
                .with_context(|| format!("unpacking {}", src.path.display()))?;
            let mut roots: Vec<PathBuf> = fs::read_dir(dest)?
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect();
            if dest.join("setup.py").exists() || dest.join("pyproject.toml").exists() {
                return Ok(dest.to_path_buf());
            }
            if roots.len() == 1 {
                return Ok(roots.pop().unwrap_or_default());
            }
            bail!(
                "{} does not unpack to one top-level directory with setup.py or pyproject.toml",
                src.path.display()
            )
        }
    }
}

const UNPACK_PY: &str = r#"
import sys, tarfile, zipfile
src, dest = sys.argv[1], sys.argv[2]
if src.endswith(".zip"):
    with zipfile.ZipFile(src) as z:
        for n in z.namelist():
            if n.startswith("/") or ".." in n.split("/"):
                sys.exit(f"unsafe member {n!r}")
        z.extractall(dest)
else:
    with tarfile.open(src) as t:
        t.extractall(dest, filter="data")
"#;

/// The sdist of `name==version` from the package index ([`crate::pypi`]), downloaded once into
/// the cache, its sha256 checked against the index's.
pub fn download_sdist(name: &str, version: &str) -> Result<PathBuf> {
    let dir = paths::downloads_dir();
    if let Some(hit) = cached_sdist(&dir, name, version) {
        return Ok(hit);
    }
    crate::offline::require(
        &format!("the sdist of {name}=={version}"),
        "Give the unpacked sdist as a directory instead (--src DIR)",
    )?;
    let pypi = crate::pypi::Pypi::new();
    let files = pypi
        .files(name)
        .with_context(|| format!("could not download the sdist of {name}=={version}"))?;
    let is_ours = |f: &&crate::pypi::IndexFile| {
        is_sdist_name(&f.filename)
            && !f.is_yanked()
            && sdist_stem(Path::new(&f.filename))
                .rsplit_once('-')
                .is_some_and(|(n, v)| normalize(n) == normalize(name) && v == version)
    };
    let Some(file) = files.iter().find(is_ours) else {
        let mut have: Vec<&str> = files
            .iter()
            .map(|f| f.filename.as_str())
            .filter(|f| is_sdist_name(f))
            .collect();
        have.sort_unstable();
        let latest = have[have.len().saturating_sub(5)..].join(", ");
        bail!(
            "{} has no sdist for {name}=={version} (latest sdists: {})",
            crate::offline::package_index(),
            if latest.is_empty() { "none" } else { &latest }
        );
    };
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    crate::errln!(
        "archsmith: downloading the sdist of {name}=={version} from {} into {}",
        crate::offline::package_index(),
        dir.display()
    );
    pypi.download(file, &dir)
        .with_context(|| format!("could not download the sdist of {name}=={version}"))
}

fn normalize(name: &str) -> String {
    name.to_ascii_lowercase().replace(['-', '.'], "_")
}

fn cached_sdist(dir: &Path, name: &str, version: &str) -> Option<PathBuf> {
    let want = normalize(name);
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let f = p.file_name().and_then(|f| f.to_str()).unwrap_or("");
            let stem = sdist_stem(p);
            let Some((n, v)) = stem.rsplit_once('-') else {
                return false;
            };
            !f.starts_with('.') && is_sdist_name(f) && normalize(n) == want && v == version
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 62: a JIT extension whose `.cu` files are links to `../../src/…` inside the
    /// repository. Before, the walk skipped links (neither file nor directory), so the copy a port
    /// or a prebuild builds from lost them and `load()` failed with FileNotFoundError. Links inside
    /// the tree are copied with their targets (a directory link stays a link, into the copy); a
    /// link that leaves the tree is refused, naming it.
    #[test]
    fn symbolic_links_inside_the_tree_are_copied_and_one_leaving_it_is_refused() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        let pkg = repo.join("pytorch/prroi/src");
        fs::create_dir_all(&pkg).unwrap();
        fs::create_dir_all(repo.join("src/include")).unwrap();
        fs::write(repo.join("src/kernel.cu"), "__global__ void k() {}\n").unwrap();
        fs::write(repo.join("src/include/k.cuh"), "#pragma once\n").unwrap();
        symlink("../../../src/kernel.cu", pkg.join("kernel.cu")).unwrap();
        symlink("../../../src/include", pkg.join("include")).unwrap();
        symlink("../../../src/gone.cu", pkg.join("dangling.cu")).unwrap();

        let files = tree_files(&repo).unwrap();
        assert!(
            files.contains(&PathBuf::from("pytorch/prroi/src/kernel.cu")),
            "{files:?}"
        );
        let copy = dir.path().join("copy");
        copy_tree(&repo, &copy).unwrap();
        let linked = copy.join("pytorch/prroi/src/kernel.cu");
        assert_eq!(
            fs::read_to_string(&linked).unwrap(),
            "__global__ void k() {}\n"
        );
        assert!(!fs::symlink_metadata(&linked)
            .unwrap()
            .file_type()
            .is_symlink());
        let include = copy.join("pytorch/prroi/src/include");
        assert!(fs::symlink_metadata(&include)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            fs::read_link(&include).unwrap(),
            copy.join("src/include"),
            "the directory link leads into the copy, not back to the source"
        );
        assert!(include.join("k.cuh").is_file());

        // The package directory alone: its links lead out of it.
        let e = format!(
            "{:#}",
            copy_tree(&repo.join("pytorch/prroi"), &dir.path().join("pkg-copy")).unwrap_err()
        );
        assert!(
            e.contains("prroi/src/kernel.cu is a symbolic link to")
                && e.contains("repo/src/kernel.cu, outside the source tree"),
            "{e}"
        );
    }

    #[test]
    fn a_tree_declares_cuda_by_its_sources_or_its_build_files() {
        let d = tempfile::tempdir().unwrap();
        let setup = d.path().join("setup.py");
        fs::create_dir_all(d.path().join("csrc")).unwrap();
        fs::write(d.path().join("csrc/a.cpp"), "int f();").unwrap();
        fs::write(&setup, "ext = CppExtension('a', ['csrc/a.cpp'])").unwrap();
        assert!(!declares_cuda(d.path()).unwrap());
        // Gated on an env variable, still declared.
        fs::write(
            &setup,
            "if os.getenv('WITH_CUDA'): ext = CUDAExtension('a', srcs)",
        )
        .unwrap();
        assert!(declares_cuda(d.path()).unwrap());
        fs::write(&setup, "ext = CppExtension('a', ['csrc/a.cpp'])").unwrap();
        fs::write(
            d.path().join("CMakeLists.txt"),
            "project(a LANGUAGES CXX CUDA)",
        )
        .unwrap();
        assert!(declares_cuda(d.path()).unwrap());
        fs::remove_file(d.path().join("CMakeLists.txt")).unwrap();
        fs::write(d.path().join("csrc/k.CU"), "__global__ void k() {}").unwrap();
        assert!(declares_cuda(d.path()).unwrap());
        // What a build leaves behind does not count.
        fs::remove_file(d.path().join("csrc/k.CU")).unwrap();
        fs::create_dir_all(d.path().join("build")).unwrap();
        fs::write(d.path().join("build/k.cu"), "").unwrap();
        assert!(!declares_cuda(d.path()).unwrap());
    }

    #[test]
    fn parses_pypi_specs_and_rejects_bad_ones() {
        assert_eq!(
            SourceSpec::parse("pypi:torchsort==0.1.10").unwrap(),
            SourceSpec::Pypi {
                name: "torchsort".into(),
                version: "0.1.10".into()
            }
        );
        let e = SourceSpec::parse("pypi:torchsort").unwrap_err().to_string();
        assert!(e.contains("pypi:NAME==VERSION"), "{e}");
        let e = SourceSpec::parse("pypi:a==1;rm").unwrap_err().to_string();
        assert!(e.contains("may hold only"), "{e}");
        let e = SourceSpec::parse("/no/such/dir").unwrap_err().to_string();
        assert!(e.contains("no such directory"), "{e}");
    }

    #[test]
    fn tree_hash_ignores_build_outputs_but_not_sources() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("setup.py"), "x").unwrap();
        fs::create_dir(d.path().join("src")).unwrap();
        fs::write(d.path().join("src/a.cu"), "kernel").unwrap();
        let h1 = hash_tree(d.path()).unwrap();
        fs::create_dir(d.path().join("build")).unwrap();
        fs::write(d.path().join("build/a.o"), "obj").unwrap();
        fs::create_dir(d.path().join("pkg.egg-info")).unwrap();
        assert_eq!(hash_tree(d.path()).unwrap(), h1);
        fs::write(d.path().join("src/a.cu"), "kernel2").unwrap();
        assert_ne!(hash_tree(d.path()).unwrap(), h1);
    }

    #[test]
    fn finds_cached_sdists_by_normalized_name() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("torch_scatter-2.1.2.tar.gz"), "").unwrap();
        fs::write(d.path().join(".partial-1-torch_scatter-2.1.3.tar.gz"), "").unwrap();
        assert!(cached_sdist(d.path(), "torch-scatter", "2.1.2").is_some());
        assert!(cached_sdist(d.path(), "torch-scatter", "2.1.3").is_none());
    }
}
