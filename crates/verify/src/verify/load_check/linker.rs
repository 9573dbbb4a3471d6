//! A model of what glibc's dynamic linker does when Python `dlopen`s an extension with
//! `RTLD_NOW | RTLD_LOCAL`: find each `DT_NEEDED` library (already loaded by soname, else
//! RPATH, `LD_LIBRARY_PATH`, RUNPATH, the system's library directories), check each needed symbol
//! version is defined by its library, and bind every non-weak undefined symbol of each newly
//! loaded object in the global scope followed by the object's own dependency list, breadth first.
//!
//! Objects are read once per run ([`Objects`]) with [`crate::binary::dynamic`]; only what a lookup
//! needs is kept (owned names, no mapping held open).

use crate::binary::dynamic::{self, DynamicInfo, SymbolKind};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One defined symbol's version: its name (None when unversioned) and whether it is hidden.
type Defined = (Option<Box<str>>, bool);

/// A needed symbol of an object.
#[derive(Debug, Clone)]
pub struct Needed {
    pub name: Box<str>,
    pub version: Option<Box<str>>,
    pub weak: bool,
}

/// What the load check keeps of one ELF shared object or executable.
#[derive(Debug)]
pub struct Object {
    pub path: PathBuf,
    pub soname: Option<String>,
    pub machine: u16,
    pub is_64: bool,
    pub needed: Vec<String>,
    pub rpath: Vec<String>,
    pub runpath: Vec<String>,
    pub undefined: Vec<Needed>,
    defined: HashMap<Box<str>, Vec<Defined>>,
    pub version_needs: Vec<(String, Vec<(String, bool)>)>,
    pub version_defs: HashSet<String>,
    /// Whether the file has a `.gnu.version` table: without one, any definition binds.
    versioned: bool,
    pub python_init: Option<String>,
    /// The C++ string ABI of what it needs and what it offers.
    pub abi_needed: dynamic::CxxAbi,
    pub abi_offered: dynamic::CxxAbi,
}

impl Object {
    fn from_info(path: PathBuf, info: &DynamicInfo<'_>) -> Object {
        let mut defined: HashMap<Box<str>, Vec<Defined>> = HashMap::new();
        let mut undefined = Vec::new();
        for s in &info.symbols {
            if s.defined {
                if s.kind != SymbolKind::Other || s.version.is_some() {
                    defined
                        .entry(s.name.into())
                        .or_default()
                        .push((s.version.map(Into::into), s.hidden));
                }
            } else {
                undefined.push(Needed {
                    name: s.name.into(),
                    version: s.version.map(Into::into),
                    weak: s.weak,
                });
            }
        }
        Object {
            path,
            soname: info.soname.map(str::to_string),
            machine: info.machine,
            is_64: info.is_64,
            needed: info.needed.iter().map(|s| s.to_string()).collect(),
            rpath: info.rpath.iter().map(|s| s.to_string()).collect(),
            runpath: info.runpath.iter().map(|s| s.to_string()).collect(),
            undefined,
            defined,
            version_needs: info
                .version_needs
                .iter()
                .map(|n| {
                    let v = n.versions.iter().map(|(v, w)| (v.to_string(), *w));
                    (n.file.to_string(), v.collect())
                })
                .collect(),
            version_defs: info.version_defs.iter().map(|s| s.to_string()).collect(),
            versioned: info.symbols.iter().any(|s| s.version.is_some()),
            python_init: info.python_init().map(str::to_string),
            abi_needed: info.cxx_abi(dynamic::Which::Undefined),
            abi_offered: info.cxx_abi(dynamic::Which::Defined),
        }
    }

    /// The name the loader knows it by: its soname, else its file name.
    pub fn name(&self) -> &str {
        match &self.soname {
            Some(s) => s,
            None => file_name(&self.path),
        }
    }

    /// Whether this object's definitions bind a reference, as glibc's `check_match` decides.
    pub fn defines(&self, want: &Needed) -> bool {
        let Some(defs) = self.defined.get(&want.name) else {
            return false;
        };
        if !self.versioned {
            return true;
        }
        defs.iter()
            .any(|(version, hidden)| match (&want.version, version) {
                (Some(w), Some(v)) => w == v,
                // An unversioned definition binds a versioned reference; a hidden one never does.
                (Some(_), None) => !hidden,
                (None, _) => !hidden,
            })
    }

    /// Whether it defines (exports) `name`, whatever the version.
    pub fn exports(&self, name: &str) -> bool {
        self.defined.contains_key(name)
    }
}

pub fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// Why a file could not be read as an object.
#[derive(Debug, Clone)]
pub enum ReadFailure {
    Io(String),
    Elf(dynamic::DynamicError),
}

impl std::fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFailure::Io(e) => f.write_str(e),
            ReadFailure::Elf(e) => write!(f, "{e}"),
        }
    }
}

/// Every object read in one run, by path: a library shared by many extensions is read once.
#[derive(Default)]
pub struct Objects {
    read: HashMap<PathBuf, Result<Arc<Object>, ReadFailure>>,
}

impl Objects {
    pub fn get(&mut self, path: &Path) -> Result<Arc<Object>, ReadFailure> {
        if let Some(o) = self.read.get(path) {
            return o.clone();
        }
        let read = read_object(path);
        self.read.insert(path.to_path_buf(), read.clone());
        read
    }
}

fn read_object(path: &Path) -> Result<Arc<Object>, ReadFailure> {
    let map = crate::binary::input::map(path)
        .map_err(|e| ReadFailure::Io(format!("{}: {e}", path.display())))?;
    let info = dynamic::read(&map).map_err(ReadFailure::Elf)?;
    Ok(Arc::new(Object::from_info(path.to_path_buf(), &info)))
}

/// Where the system looks for libraries after RPATH, `LD_LIBRARY_PATH` and RUNPATH: the
/// directories of `/etc/ld.so.conf` (and its includes), then the default ones.
pub fn system_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    read_ld_so_conf(Path::new("/etc/ld.so.conf"), &mut dirs, 0);
    for d in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ] {
        let d = PathBuf::from(d);
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

fn read_ld_so_conf(path: &Path, dirs: &mut Vec<PathBuf>, depth: u32) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(pattern) = line.strip_prefix("include") {
            if depth < 4 {
                for file in glob_conf(pattern.trim(), path.parent().unwrap_or(Path::new("/"))) {
                    read_ld_so_conf(&file, dirs, depth + 1);
                }
            }
        } else if line.starts_with('/') {
            let d = PathBuf::from(line);
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
}

/// `include /etc/ld.so.conf.d/*.conf`: the one glob form ld.so.conf files use, files sorted.
fn glob_conf(pattern: &str, base: &Path) -> Vec<PathBuf> {
    let pattern = if pattern.starts_with('/') {
        PathBuf::from(pattern)
    } else {
        base.join(pattern)
    };
    let (Some(dir), Some(name)) = (
        pattern.parent(),
        pattern.file_name().and_then(|n| n.to_str()),
    ) else {
        return Vec::new();
    };
    let (prefix, suffix) = name.split_once('*').unwrap_or((name, ""));
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = file_name(p);
            if name.contains('*') {
                n.starts_with(prefix) && n.ends_with(suffix)
            } else {
                n == name
            }
        })
        .collect();
    files.sort();
    files
}

/// The process an extension is loaded into: objects already loaded (by name), the global scope
/// symbols are looked up in first, and the search path pieces that come from the environment.
#[derive(Debug, Default, Clone)]
pub struct Process {
    /// Already in the process, by the name the loader matches (`DT_SONAME`, else file name).
    pub loaded: HashMap<String, Arc<Object>>,
    /// The same objects by real path: `dlopen` of a file already loaded returns it as it is.
    pub loaded_files: HashSet<PathBuf>,
    /// The executable and the libraries loaded with `RTLD_GLOBAL`, in lookup order.
    pub global: Vec<Arc<Object>>,
    pub ld_library_path: Vec<PathBuf>,
    pub system_dirs: Vec<PathBuf>,
    /// The machine (`e_machine`) and class of the interpreter: other objects are skipped in a search.
    pub machine: u16,
    pub is_64: bool,
}

/// Why a load failed, in the order the loader finds out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkFailure {
    /// `libX.so: cannot open shared object file`.
    MissingLibrary { soname: String, needed_by: String },
    /// `version `V' not found (required by …)`.
    MissingVersion {
        version: String,
        file: String,
        required_by: String,
    },
    /// `undefined symbol: …`: every non-weak name nothing in scope defines, first found first.
    UndefinedSymbols {
        required_by: String,
        symbols: Vec<String>,
    },
    /// The file itself is not a loadable object for this interpreter.
    WrongMachine { machine: u16, want: u16 },
}

/// What loading one object would do.
#[derive(Debug, Clone)]
pub struct Link {
    /// Each `DT_NEEDED` name reached and where it was found (the file, and whether it was already loaded).
    pub libraries: Vec<(String, PathBuf, bool)>,
    /// Libraries of the object's own package that no search path reaches, found by name in the
    /// package: its Python loads them first (`torch.ops.load_library`), so they count as loaded.
    pub from_package: Vec<PathBuf>,
    pub failure: Option<LinkFailure>,
}

impl Process {
    /// Loads `object` as `dlopen(RTLD_NOW | RTLD_LOCAL)` would, reporting the first failure.
    pub fn link(
        &self,
        objects: &mut Objects,
        object: Arc<Object>,
        package: &HashMap<String, PathBuf>,
    ) -> Link {
        let mut link = Link {
            libraries: Vec::new(),
            from_package: Vec::new(),
            failure: None,
        };
        if std::fs::canonicalize(&object.path).is_ok_and(|p| self.loaded_files.contains(&p)) {
            // Already loaded by `import torch` (libtorch_nvshmem, as libtorch_cuda's dependency):
            // its symbols were bound then, in the scope of what loaded it.
            return link;
        }
        if object.machine != self.machine || object.is_64 != self.is_64 {
            link.failure = Some(LinkFailure::WrongMachine {
                machine: object.machine,
                want: self.machine,
            });
            return link;
        }
        let group = match self.load_group(objects, object, package, &mut link) {
            Ok(group) => group,
            Err(failure) => {
                link.failure = Some(failure);
                return link;
            }
        };
        let new: Vec<&Arc<Object>> = group
            .iter()
            .filter(|(_, pre)| !pre)
            .map(|(o, _)| o)
            .collect();
        link.failure = new
            .iter()
            .find_map(|o| missing_version(o, &group))
            .or_else(|| self.unbound_symbols(&group, &new));
        link
    }

    /// The object and its dependencies, breadth first, as the loader builds its local scope;
    /// each with whether it was already loaded.
    fn load_group(
        &self,
        objects: &mut Objects,
        object: Arc<Object>,
        package: &HashMap<String, PathBuf>,
        link: &mut Link,
    ) -> Result<Vec<(Arc<Object>, bool)>, LinkFailure> {
        let mut group: Vec<(Arc<Object>, bool)> = vec![(object.clone(), false)];
        let mut names: HashSet<String> = HashSet::from([object.name().to_string()]);
        // Each object with the chain of objects that loaded it, nearest first: glibc searches
        // their DT_RPATHs too (numpy's libopenblas finds libgfortran through the RPATH of the
        // module that loaded it).
        let mut queue: VecDeque<(Arc<Object>, Vec<Arc<Object>>)> =
            VecDeque::from([(object, Vec::new())]);
        while let Some((o, loaders)) = queue.pop_front() {
            for soname in &o.needed {
                if names.contains(soname.as_str()) {
                    continue;
                }
                let missing = || LinkFailure::MissingLibrary {
                    soname: soname.clone(),
                    needed_by: file_name(&o.path).to_string(),
                };
                let (found, preloaded) = match self.loaded.get(soname) {
                    Some(l) => (l.clone(), true),
                    None => match self.search(objects, soname, &o, &loaders) {
                        Some(l) => (l, false),
                        None => {
                            let path = package.get(soname).ok_or_else(missing)?;
                            let l = objects.get(path).map_err(|_| missing())?;
                            link.from_package.push(path.clone());
                            (l, false)
                        }
                    },
                };
                names.insert(soname.clone());
                names.insert(found.name().to_string());
                link.libraries
                    .push((soname.clone(), found.path.clone(), preloaded));
                // A loaded library's own dependencies join the local scope too.
                let chain = if preloaded {
                    Vec::new()
                } else {
                    std::iter::once(o.clone())
                        .chain(loaders.iter().cloned())
                        .collect()
                };
                queue.push_back((found.clone(), chain));
                group.push((found, preloaded));
            }
        }
        Ok(group)
    }

    /// The first newly loaded object with non-weak undefined symbols that nothing in the global
    /// scope, then the group, defines.
    fn unbound_symbols(
        &self,
        group: &[(Arc<Object>, bool)],
        new: &[&Arc<Object>],
    ) -> Option<LinkFailure> {
        let scope: Vec<&Object> = self
            .global
            .iter()
            .map(|o| &**o)
            .chain(group.iter().map(|(o, _)| &**o))
            .collect();
        new.iter().find_map(|o| {
            let symbols: Vec<String> = o
                .undefined
                .iter()
                .filter(|s| !s.weak && !scope.iter().any(|d| d.defines(s)))
                .map(|s| match &s.version {
                    Some(v) => format!("{}@{v}", s.name),
                    None => s.name.to_string(),
                })
                .collect();
            (!symbols.is_empty()).then(|| LinkFailure::UndefinedSymbols {
                required_by: file_name(&o.path).to_string(),
                symbols,
            })
        })
    }

    /// Finds `soname` for `from`: a path as is; else, when `from` has no RUNPATH, the DT_RPATH of
    /// `from` and of each of its `loaders` up the chain (each with its own `$ORIGIN`), then
    /// `LD_LIBRARY_PATH`, DT_RUNPATH, the system directories (glibc's `_dl_map_object`).
    fn search(
        &self,
        objects: &mut Objects,
        soname: &str,
        from: &Object,
        loaders: &[Arc<Object>],
    ) -> Option<Arc<Object>> {
        let expand = |o: &Object, entries: &[String]| -> Vec<PathBuf> {
            let origin = o.path.parent().unwrap_or(Path::new("/"));
            entries
                .iter()
                .map(|e| expand_search_entry(e, origin))
                .collect()
        };
        if soname.contains('/') {
            return objects.get(Path::new(soname)).ok();
        }
        let mut dirs = Vec::new();
        if from.runpath.is_empty() {
            for o in std::iter::once(from).chain(loaders.iter().map(|l| &**l)) {
                dirs.extend(expand(o, &o.rpath));
            }
        }
        dirs.extend(self.ld_library_path.iter().cloned());
        dirs.extend(expand(from, &from.runpath));
        dirs.extend(self.system_dirs.iter().cloned());
        for dir in dirs {
            let candidate = dir.join(soname);
            if !candidate.is_file() {
                continue;
            }
            if let Ok(o) = objects.get(&candidate) {
                if o.machine == self.machine && o.is_64 == self.is_64 {
                    return Some(o);
                }
            }
        }
        None
    }

    /// Reads the objects `roots` load, breadth first, into `loaded` (for `global`, also in order).
    pub fn preload(
        &mut self,
        objects: &mut Objects,
        root: &Path,
        global: bool,
    ) -> Result<(), String> {
        let root = objects.get(root).map_err(|e| e.to_string())?;
        let mut queue = VecDeque::from([(root.clone(), Vec::new())]);
        self.add_loaded(&root, global);
        while let Some((o, loaders)) = queue.pop_front() {
            for soname in &o.needed {
                if self.loaded.contains_key(soname) {
                    continue;
                }
                match self.search(objects, soname, &o, &loaders) {
                    Some(found) => {
                        self.loaded.insert(soname.clone(), found.clone());
                        self.add_loaded(&found, global);
                        let chain: Vec<Arc<Object>> = std::iter::once(o.clone())
                            .chain(loaders.iter().cloned())
                            .collect();
                        queue.push_back((found, chain));
                    }
                    None => return Err(format!("{soname} (needed by {})", o.path.display())),
                }
            }
        }
        Ok(())
    }

    fn add_loaded(&mut self, o: &Arc<Object>, global: bool) {
        self.loaded.insert(o.name().to_string(), o.clone());
        if let Ok(real) = std::fs::canonicalize(&o.path) {
            self.loaded_files.insert(real);
        }
        if global && !self.global.iter().any(|g| Arc::ptr_eq(g, o)) {
            self.global.push(o.clone());
        }
    }
}

/// One RPATH/RUNPATH entry with the loader's dynamic string tokens replaced: `$ORIGIN` (the
/// directory of the file that names it), `$LIB`, `$PLATFORM`.
pub fn expand_search_entry(entry: &str, origin: &Path) -> PathBuf {
    let origin = origin.to_string_lossy();
    PathBuf::from(
        entry
            .replace("${ORIGIN}", &origin)
            .replace("$ORIGIN", &origin)
            .replace("$LIB", "lib64")
            .replace("$PLATFORM", "x86_64"),
    )
}

/// The first `vn_file`/version pair of `o`'s `.gnu.version_r` that the library it names lacks.
fn missing_version(o: &Object, group: &[(Arc<Object>, bool)]) -> Option<LinkFailure> {
    for (file, versions) in &o.version_needs {
        let Some((lib, _)) = group
            .iter()
            .find(|(l, _)| l.name() == file || file_name(&l.path) == file)
        else {
            continue;
        };
        if let Some((version, _)) = versions
            .iter()
            .find(|(v, weak)| !weak && !lib.version_defs.contains(v))
        {
            return Some(LinkFailure::MissingVersion {
                version: version.clone(),
                file: file.clone(),
                required_by: file_name(&o.path).to_string(),
            });
        }
    }
    None
}
