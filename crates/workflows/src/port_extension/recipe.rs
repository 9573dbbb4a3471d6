//! `patches/<name>/recipe.toml`: where an extension's source comes from, which rule catalogues
//! to run over which paths, the build settings and the smoke test. Patch files are the
//! `*.patch` files next to the recipe, applied in name order. Format: `patches/README.md`.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::fs;
use std::path::{Path, PathBuf};

/// Where `patches/` and `verify/` are: this repository, or the copy an installed binary
/// carries.
pub(crate) fn data_root() -> PathBuf {
    crate::data::data_root().unwrap_or_else(|_| crate::paths::repo_root())
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// Set from the folder name, not read from the file.
    #[serde(skip)]
    pub name: String,
    /// The recipe folder (`patches/<name>`).
    #[serde(skip)]
    pub dir: PathBuf,
    #[serde(default)]
    pub description: String,
    pub source: Source,
    pub rules: Rules,
    pub build: Build,
    pub smoke: Smoke,
    /// Review items left after rules and patches that are fine as they are, each with the reason.
    #[serde(default)]
    pub accepted: Vec<Accepted>,
    /// Made on the spot for a source nobody wrote a recipe for ([`Recipe::generic`]): review items
    /// are listed, not required to be explained, and the smoke test is the generic one.
    #[serde(skip)]
    pub recipe_less: bool,
}

/// The catalogues and smoke test of a recipe-less port.
pub const GENERIC_CATALOGUES: [&str; 2] = ["rules/torch-legacy.toml", "rules/torch-python.toml"];
pub const GENERIC_SMOKE: &str = "verify/smoke/generic_ops.py";

/// Exactly one of `path`, `git` + `commit`, `pypi` + `sha256`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// A directory in this repository, relative to the recipe folder (embedded sources).
    pub path: Option<PathBuf>,
    pub git: Option<String>,
    /// The full 40-hex commit the recipe's patches were written against.
    pub commit: Option<String>,
    /// `NAME==VERSION` of an sdist on PyPI.
    pub pypi: Option<String>,
    /// sha256 of that sdist.
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    /// Rule catalogues, relative to `patches/`, run in order.
    pub catalogues: Vec<PathBuf>,
    /// Files or directories of the source the rules run over (relative to the source root).
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Build {
    /// The directory holding setup.py, relative to the source root.
    #[serde(default = "dot")]
    pub dir: PathBuf,
    /// The extension module the build must produce, e.g. `maskrcnn_benchmark._C`.
    pub module: String,
}

fn dot() -> PathBuf {
    PathBuf::from(".")
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Smoke {
    /// A Python script, relative to the repository root.
    pub script: PathBuf,
    #[serde(default)]
    pub args: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Accepted {
    /// Source-relative path of the file.
    pub file: String,
    pub rule: String,
    /// Only items whose code line contains this text (all items of the rule in the file if absent).
    pub code: Option<String>,
    pub reason: String,
}

/// Where the source comes from, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    Path(PathBuf),
    Git { url: String, commit: String },
    Pypi { spec: String, sha256: String },
}

impl Recipe {
    /// `patches/<name>/recipe.toml` of this repository.
    pub fn find(name: &str) -> Result<Recipe> {
        let dir = recipe_dir(name, "")?;
        if !dir.join("recipe.toml").is_file() {
            bail!(
                "no recipe `{name}` ({} does not exist); recipes: {}",
                dir.join("recipe.toml").display(),
                list().join(", ")
            );
        }
        Recipe::load(&dir)
    }

    /// The recipe of a source nobody wrote one for: every rule catalogue over the whole source,
    /// the build of whatever extension modules its build script makes, the generic smoke test.
    pub fn generic(name: &str, source: Source) -> Recipe {
        let patches = data_root().join("patches");
        Recipe {
            name: name.to_string(),
            // No folder of its own: catalogue paths resolve against `patches/`, and there are no
            // patch files to find.
            dir: patches.join(".recipe-less"),
            description: "recipe-less port".into(),
            source,
            rules: Rules {
                catalogues: GENERIC_CATALOGUES.iter().map(PathBuf::from).collect(),
                paths: vec![dot()],
            },
            build: Build {
                dir: dot(),
                module: String::new(),
            },
            smoke: Smoke {
                script: PathBuf::from(GENERIC_SMOKE),
                args: Vec::new(),
            },
            accepted: Vec::new(),
            recipe_less: true,
        }
    }

    pub fn load(dir: &Path) -> Result<Recipe> {
        let file = dir.join("recipe.toml");
        let text =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let mut r: Recipe = toml::from_str(&text)
            .with_context(|| format!("{}: not a valid recipe", file.display()))?;
        r.name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        r.dir = dir.to_path_buf();
        r.source_kind()
            .with_context(|| format!("{}: [source]", file.display()))?;
        if r.rules.catalogues.is_empty() || r.rules.paths.is_empty() {
            bail!(
                "{}: [rules] needs at least one catalogue and one path",
                file.display()
            );
        }
        for p in r.rules.paths.iter().chain([&r.build.dir]) {
            if p.is_absolute() || p.components().any(|c| c.as_os_str() == "..") {
                bail!(
                    "{}: `{}` must be relative to the source root, without ..",
                    file.display(),
                    p.display()
                );
            }
        }
        Ok(r)
    }

    pub fn source_kind(&self) -> Result<SourceKind> {
        let s = &self.source;
        match (&s.path, &s.git, &s.commit, &s.pypi, &s.sha256) {
            (Some(p), None, None, None, None) => Ok(SourceKind::Path(self.dir.join(p))),
            // `git+URL@REV` of a recipe-less port: a tag or branch as well as a commit.
            (None, Some(url), Some(rev), None, None) if self.recipe_less => Ok(SourceKind::Git {
                url: url.clone(),
                commit: rev.clone(),
            }),
            (None, Some(url), Some(commit), None, None) => {
                if commit.len() != 40 || !commit.chars().all(|c| c.is_ascii_hexdigit()) {
                    bail!("commit `{commit}` is not a full 40-hex commit id; pin the exact commit");
                }
                Ok(SourceKind::Git {
                    url: url.clone(),
                    commit: commit.to_ascii_lowercase(),
                })
            }
            // A recipe-less port takes the sdist as PyPI serves it (its hash is recorded).
            (None, None, None, Some(spec), None) if self.recipe_less => Ok(SourceKind::Pypi {
                spec: spec.clone(),
                sha256: String::new(),
            }),
            (None, None, None, Some(spec), Some(sha)) => {
                if !spec.contains("==") {
                    bail!("pypi = `{spec}`: write NAME==VERSION");
                }
                if sha.len() != 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
                    bail!("sha256 `{sha}` is not 64 hex digits");
                }
                Ok(SourceKind::Pypi {
                    spec: spec.clone(),
                    sha256: sha.to_ascii_lowercase(),
                })
            }
            _ => bail!(
                "give exactly one of: path = \"DIR\"; git = \"URL\" with commit = \"SHA\"; pypi = \"NAME==VER\" with sha256 = \"HEX\""
            ),
        }
    }

    /// The recipe's patch files, in name order.
    pub fn patches(&self, stable_abi: bool) -> Result<Vec<PathBuf>> {
        if self.recipe_less {
            return Ok(Vec::new());
        }
        // The stable-ABI port's rules write other code than the ordinary port's: its own patches.
        let dir = if stable_abi {
            self.dir.join("stable")
        } else {
            self.dir.clone()
        };
        if stable_abi && !dir.is_dir() {
            return Ok(Vec::new());
        }
        let mut out: Vec<PathBuf> = fs::read_dir(&dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "patch") && p.is_file())
            .collect();
        out.sort();
        Ok(out)
    }

    /// The catalogue files: a bare file name (`torch-legacy.toml`) is one of archsmith's own,
    /// beside the codemod engine; `rules/NAME`, their place before they moved there, reads the
    /// same; any other path is resolved against `patches/`.
    pub fn catalogue_paths(&self) -> Vec<PathBuf> {
        let base = self.dir.parent().map(Path::to_path_buf).unwrap_or_default();
        let builtin = data_root().join(crate::data::RULES_DIR);
        self.rules
            .catalogues
            .iter()
            .map(|c| {
                let own = c.strip_prefix("rules").unwrap_or(c);
                match own.components().count() == 1 && builtin.join(own).is_file() {
                    true => builtin.join(own),
                    false => base.join(c),
                }
            })
            .collect()
    }

    /// The smoke script under the data root. Recipes written while the scripts' folder was
    /// named `env_scripts/` (between two layouts) name `env_scripts/smoke/…`; that prefix is
    /// read as `verify/smoke/…`, where the scripts are again.
    pub fn smoke_script(&self) -> PathBuf {
        let script = match self.smoke.script.strip_prefix("env_scripts/smoke") {
            Ok(rest) => Path::new("verify/smoke").join(rest),
            Err(_) => self.smoke.script.clone(),
        };
        data_root().join(script)
    }
}

/// `patches/NAME` for a well-formed recipe name (`what` names the argument in the error).
fn recipe_dir(name: &str, what: &str) -> Result<PathBuf> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!("{what}`{name}`: a recipe name holds only letters, digits, - and _");
    }
    Ok(data_root().join("patches").join(name))
}

/// Refuses a `--write-recipe` name that is malformed or taken, before any work.
pub fn check_new_name(name: &str) -> Result<()> {
    let dir = recipe_dir(name, "--write-recipe ")?;
    if dir.exists() {
        bail!(
            "--write-recipe {name}: {} already exists; choose another name or remove it",
            dir.display()
        );
    }
    Ok(())
}

/// Writes `patches/NAME/recipe.toml` from a recipe-less port that passed: its source pinned (the
/// sdist's sha256, the commit), the same catalogues, the extension module the build made, the
/// generic smoke test, and each review item it listed as `[[accepted]]` with a reason that says
/// nobody has reviewed it yet, so the recipe runs as the port did and the items stay visible.
pub fn write(name: &str, recipe: &Recipe, port: &super::Outcome) -> Result<PathBuf> {
    use toml::{Table, Value};
    check_new_name(name)?;
    let build = port
        .build
        .as_ref()
        .context("--write-recipe: the port built nothing")?;
    let source = pinned_source(recipe, port)?;
    let strings = |v: Vec<String>| Value::Array(v.into_iter().map(Value::String).collect());
    let mut rules = Table::new();
    rules.insert(
        "catalogues".into(),
        strings(
            recipe
                .rules
                .catalogues
                .iter()
                .map(|c| c.display().to_string())
                .collect(),
        ),
    );
    rules.insert("paths".into(), strings(vec![".".into()]));
    let mut b = Table::new();
    b.insert(
        "module".into(),
        Value::String(
            build
                .built
                .record
                .imported
                .first()
                .cloned()
                .unwrap_or_default(),
        ),
    );
    let mut smoke = Table::new();
    smoke.insert("script".into(), Value::String(GENERIC_SMOKE.into()));
    smoke.insert(
        "args".into(),
        strings(
            build
                .built
                .record
                .imported
                .iter()
                .flat_map(|m| ["--module".to_string(), m.clone()])
                .collect(),
        ),
    );
    let mut doc = Table::new();
    doc.insert(
        "description".into(),
        Value::String(format!("{} (written by --write-recipe)", port.source)),
    );
    doc.insert("source".into(), Value::Table(source));
    doc.insert("rules".into(), Value::Table(rules));
    doc.insert("build".into(), Value::Table(b));
    doc.insert("smoke".into(), Value::Table(smoke));
    let accepted = unreviewed(port);
    if !accepted.is_empty() {
        doc.insert("accepted".into(), Value::Array(accepted));
    }
    let text = format!(
        "# Written by `port-extension --src … --write-recipe {name}` from a port that built for {}, was
# audited and imported. Add patch files (NNNN-*.patch) here and a numeric smoke test; replace
# each NOT REVIEWED YET reason once the item is checked.
{}",
        build.built.record.torch_cuda_arch_list,
        toml::to_string(&doc).context("writing the recipe as TOML")?
    );
    let dir = data_root().join("patches").join(name);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join("recipe.toml");
    let tmp = dir.join(".recipe.toml.tmp");
    fs::write(&tmp, &text).with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, &file).with_context(|| format!("writing {}", file.display()))?;
    // What was written must load as a recipe.
    Recipe::load(&dir).with_context(|| format!("the recipe written to {}", file.display()))?;
    Ok(dir)
}

/// The `[source]` of a written recipe: the port's source pinned (a git source by the commit it
/// was at, an sdist by its sha256).
fn pinned_source(recipe: &Recipe, port: &super::Outcome) -> Result<toml::Table> {
    use toml::{Table, Value};
    let mut source = Table::new();
    let s = &recipe.source;
    match (&s.path, &s.git, &s.pypi) {
        (Some(p), _, _) => {
            source.insert("path".into(), Value::String(p.display().to_string()));
        }
        (_, Some(url), _) => {
            source.insert("git".into(), Value::String(url.clone()));
            let commit = port
                .source_pin
                .clone()
                .or_else(|| s.commit.clone())
                .unwrap_or_default();
            source.insert("commit".into(), Value::String(commit));
        }
        (_, _, Some(spec)) => {
            source.insert("pypi".into(), Value::String(spec.clone()));
            let sha = port.source_pin.clone().unwrap_or_default();
            source.insert("sha256".into(), Value::String(sha));
        }
        _ => bail!("--write-recipe: the port's source is unknown"),
    }
    Ok(source)
}

/// The port's review items as `[[accepted]]` entries whose reason says nobody reviewed them yet.
fn unreviewed(port: &super::Outcome) -> Vec<toml::Value> {
    use toml::{Table, Value};
    port.review
        .iter()
        .filter(|r| !r.explained)
        .map(|r| {
            let mut t = Table::new();
            t.insert("file".into(), Value::String(r.file.clone()));
            t.insert("rule".into(), Value::String(r.rule.clone()));
            t.insert("code".into(), Value::String(r.code.clone()));
            t.insert(
                "reason".into(),
                Value::String(format!(
                    "NOT REVIEWED YET (listed by the recipe-less port): {}",
                    r.suggestion
                )),
            );
            Value::Table(t)
        })
        .collect()
}

/// The names of the recipes in this repository.
pub fn list() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(data_root().join("patches"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().join("recipe.toml").is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The recipe a command line names: `NAME` or `--recipe` (one of them, or both the same), else a
/// recipe-less port of `src`; `writing_recipe` (`--write-recipe`) needs the recipe-less one.
pub fn chosen(
    recipe: Option<&str>,
    name: Option<&str>,
    src: Option<&str>,
    writing_recipe: bool,
) -> Result<Recipe> {
    match (recipe, name, src) {
        (Some(r), Some(n), _) if r != n => {
            bail!("NAME `{n}` and --recipe `{r}` differ: give one of them")
        }
        (Some(r), _, _) | (None, Some(r), _) => {
            if writing_recipe {
                bail!("--write-recipe writes a recipe from a recipe-less port: drop NAME/--recipe");
            }
            Recipe::find(r)
        }
        (None, None, Some(src)) => super::recipe_less(src),
        (None, None, None) => bail!(
            "which extension? give --src DIR|pypi:NAME==VER|git+URL@REV for any extension, or a recipe NAME ({})",
            list().join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Recipe> {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("demo");
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("recipe.toml"), text).unwrap();
        Recipe::load(&d)
    }

    const REST: &str = "[rules]\ncatalogues = [\"rules/torch-legacy.toml\"]\npaths = [\"csrc\"]\n[build]\nmodule = \"demo._C\"\n[smoke]\nscript = \"verify/x.py\"\n";

    #[test]
    fn every_recipe_in_the_repo_loads() {
        let names = list();
        assert!(names.contains(&"legacy-demo".to_string()), "{names:?}");
        for n in names {
            let r = Recipe::find(&n).unwrap();
            for c in r.catalogue_paths() {
                assert!(c.is_file(), "{n}: {}", c.display());
            }
            assert!(r.smoke_script().is_file(), "{n}");
        }
    }

    /// archsmith's catalogues by file name or by their old `rules/` place; a smoke script by its
    /// `env_scripts/` name; anything else as written.
    #[test]
    fn catalogues_and_smoke_scripts_resolve_under_their_old_names_too() {
        let text = "[source]\npath = \"src\"\n[rules]\ncatalogues = [\"torch-legacy.toml\", \"rules/torch-python.toml\", \"mine/extra.toml\"]\npaths = [\"csrc\"]\n[build]\nmodule = \"demo._C\"\n[smoke]\nscript = \"env_scripts/smoke/generic_ops.py\"\n";
        let r = parse(text).unwrap();
        let rules = data_root().join(crate::data::RULES_DIR);
        let paths = r.catalogue_paths();
        assert_eq!(paths[0], rules.join("torch-legacy.toml"));
        assert_eq!(paths[1], rules.join("torch-python.toml"));
        assert!(paths[2].ends_with("mine/extra.toml") && !paths[2].starts_with(&rules));
        assert_eq!(r.smoke_script(), data_root().join(GENERIC_SMOKE));
        assert!(r.smoke_script().is_file());
    }

    #[test]
    fn source_must_be_exactly_one_kind() {
        let git = format!(
            "[source]\ngit = \"https://example.org/x\"\ncommit = \"{}\"\n{REST}",
            "a".repeat(40)
        );
        assert!(matches!(
            parse(&git).unwrap().source_kind().unwrap(),
            SourceKind::Git { .. }
        ));
        let short =
            format!("[source]\ngit = \"https://example.org/x\"\ncommit = \"abc123\"\n{REST}");
        let e = format!("{:#}", parse(&short).unwrap_err());
        assert!(e.contains("40-hex"), "{e}");
        let both = format!(
            "[source]\npath = \"src\"\npypi = \"x==1\"\nsha256 = \"{}\"\n{REST}",
            "0".repeat(64)
        );
        let e = format!("{:#}", parse(&both).unwrap_err());
        assert!(e.contains("exactly one"), "{e}");
        let e = format!(
            "{:#}",
            parse(&format!("[source]\npath = \"src\"\nbogus = 1\n{REST}")).unwrap_err()
        );
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn rule_paths_stay_inside_the_source() {
        let text = format!(
            "[source]\npath = \"src\"\n{}",
            REST.replace("\"csrc\"", "\"../x\"")
        );
        let e = format!("{:#}", parse(&text).unwrap_err());
        assert!(e.contains("without .."), "{e}");
    }
}
