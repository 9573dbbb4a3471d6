//! Which names a torch tree's build reads: the cross-check that every variable a build plan sets
//! is one the tree (or the CMake it runs) really reads, so a typo or a switch the release does not
//! have is caught before a multi-hour build ignores it.
//!
//! The tree's build files are its front end (`setup.py`, `tools/setup_helpers/`,
//! `tools/generate_torch_version.py`; or `pyproject.toml`, `tools/metadata/`) and every
//! `CMakeLists.txt` and `*.cmake` outside `third_party/`. A name counts as read where it occurs as a
//! whole word (`USE_CUDNN` in `option(USE_CUDNN …)`, `$ENV{TORCH_NVCC_FLAGS}`, `"MAX_JOBS"`).
//! A few variables are read by CMake itself from the environment rather than by the tree
//! ([`CMAKE_ENVIRONMENT`]).

use super::tree::{FrontEnd, TorchTree};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Environment variables CMake itself reads (cmake-env-variables(7)), with the CMake release that
/// added each. They reach CMake whatever the front end does with them.
pub const CMAKE_ENVIRONMENT: &[(&str, &str)] = &[
    ("CC", "3.0"),
    ("CXX", "3.0"),
    ("CUDACXX", "3.8"),
    ("CUDAHOSTCXX", "3.8"),
    ("CMAKE_BUILD_PARALLEL_LEVEL", "3.12"),
    ("CMAKE_GENERATOR", "3.15"),
    ("CMAKE_C_COMPILER_LAUNCHER", "3.17"),
    ("CMAKE_CXX_COMPILER_LAUNCHER", "3.17"),
    ("CMAKE_CUDA_COMPILER_LAUNCHER", "3.17"),
    ("CMAKE_BUILD_TYPE", "3.22"),
    // find_package(CUDAToolkit) honours <PackageName>_ROOT from the environment (CMP0074, 3.12).
    ("CUDAToolkit_ROOT", "3.17"),
];

/// Where a name is read.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "by", rename_all = "lowercase")]
pub enum Reader {
    /// The tree's own build files: the first place it occurs.
    Tree { file: String, line: usize },
    /// CMake reads it from the environment.
    Cmake { since: String },
}

impl Reader {
    pub fn describe(&self) -> String {
        match self {
            Reader::Tree { file, line } => format!("{file}:{line}"),
            Reader::Cmake { since } => format!("CMake ≥ {since} (environment)"),
        }
    }
}

/// The tree's build files, read once.
pub struct BuildFiles {
    files: Vec<(String, String)>,
}

impl BuildFiles {
    pub fn read(tree: &TorchTree) -> BuildFiles {
        let mut paths: Vec<PathBuf> = Vec::new();
        let front: &[&str] = match tree.front_end {
            FrontEnd::SetupPy => &[
                "setup.py",
                "tools/setup_helpers",
                "tools/generate_torch_version.py",
            ],
            FrontEnd::ScikitBuildCore => &["pyproject.toml", "tools/metadata"],
        };
        for rel in front {
            let p = tree.root.join(rel);
            if p.is_dir() {
                walk(&p, &mut paths, &|n| n.ends_with(".py"));
            } else if p.is_file() {
                paths.push(p);
            }
        }
        walk(&tree.root, &mut paths, &|n| {
            n == "CMakeLists.txt" || n.ends_with(".cmake")
        });
        let files = paths
            .into_iter()
            .filter_map(|p| {
                let text = std::fs::read_to_string(&p).ok()?;
                let rel = p
                    .strip_prefix(&tree.root)
                    .unwrap_or(&p)
                    .display()
                    .to_string();
                Some((rel, text))
            })
            .collect();
        BuildFiles { files }
    }

    /// Where `name` is read, or None when neither the tree nor CMake reads it.
    pub fn reader(&self, name: &str) -> Option<Reader> {
        for (file, text) in &self.files {
            if let Some(line) = word_line(text, name) {
                return Some(Reader::Tree {
                    file: file.clone(),
                    line,
                });
            }
        }
        CMAKE_ENVIRONMENT
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, since)| Reader::Cmake {
                since: since.to_string(),
            })
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// Directories no build file of torch's own lives in (vendored code, outputs, tests, mobile).
fn skipped_dir(name: &str) -> bool {
    // Hidden directories too: `.git`, and quilt's `.pc/` copies of patched files.
    name.starts_with('.')
        || matches!(
            name,
            "third_party"
                | "build"
                | "dist"
                | "test"
                | "docs"
                | "android"
                | "ios"
                | "benchmarks"
                | "debian"
        )
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>, want: &dyn Fn(&str) -> bool) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            if !skipped_dir(&name) {
                walk(&e.path(), out, want);
            }
        } else if ft.is_file() && want(&name) {
            out.push(e.path());
        }
    }
}

/// The 1-based line where `word` first occurs as a whole word (neither neighbour is
/// `[A-Za-z0-9_]`) outside a comment line (`#` first: Python and CMake), so that a name only
/// documented, as in setup.py's header, does not count as read.
fn word_line(text: &str, word: &str) -> Option<usize> {
    let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        let bytes = line.as_bytes();
        let mut from = 0;
        while let Some(i) = line[from..].find(word) {
            let at = from + i;
            let end = at + word.len();
            let before_ok = at == 0 || !is_word(bytes[at - 1]);
            let after_ok = end >= bytes.len() || !is_word(bytes[end]);
            if before_ok && after_ok {
                return Some(n + 1);
            }
            from = at + word.len().max(1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_words_only() {
        let t = "option(USE_CUDNN \"x\" ON)\nif(USE_CUDNN_FRONTEND)\n$ENV{TORCH_NVCC_FLAGS}\n";
        assert_eq!(word_line(t, "USE_CUDNN"), Some(1));
        assert_eq!(word_line(t, "USE_CUDNN_FRONTEND"), Some(2));
        assert_eq!(word_line(t, "USE_CUDN"), None);
        assert_eq!(word_line(t, "TORCH_NVCC_FLAGS"), Some(3));
        assert_eq!(word_line(t, "NVCC_FLAGS"), None);
        // Documentation is not reading.
        assert_eq!(word_line("#   USE_CUDA=0\nx = 1\n", "USE_CUDA"), None);
        assert_eq!(
            word_line("  # USE_CUDA\nif(USE_CUDA)\n", "USE_CUDA"),
            Some(2)
        );
    }
}
