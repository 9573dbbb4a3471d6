//! `cargo xtask port-extension NAME|--src DIR [--recipe NAME] --arch SPEC [--dry-run|--check]`:
//! thin CLI over [`crate::port_extension`].
//!
//! Exit status: 0 ported, built and verified (or, with --dry-run, the diff printed); 1 when
//! the build, the audit, the import or the smoke test fails or a review item is unexplained (and
//! with --check when the rules or patches would change something); 2 on other errors (a bad
//! recipe, a patch that does not apply, no source).

use crate::build_output::progress;
use crate::output::{documents, emit, print_json, Exit};
use crate::port_extension::{self, recipe::Recipe, PortFailure, Request, RunMode};
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct PortExtensionArgs {
    /// The recipe (`patches/NAME/recipe.toml`), e.g. legacy-demo or maskrcnn.
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// The source to port: a directory (copied, never modified), `pypi:NAME==VER` (its sdist) or
    /// `git+URL@REV`. With a recipe, a directory that replaces the recipe's source; without one,
    /// a recipe-less port: every rule, the build for --arch, audit, import and a generic smoke test.
    #[arg(long, value_name = "DIR|pypi:NAME==VER|git+URL@REV")]
    pub src: Option<String>,
    /// After a recipe-less port that passed, write `patches/NAME/recipe.toml` pinning its source
    /// (add patches and a numeric smoke test there).
    #[arg(long, value_name = "NAME", requires = "src")]
    pub write_recipe: Option<String>,
    /// The recipe to use with --src (default: NAME).
    #[arg(long, value_name = "NAME")]
    pub recipe: Option<String>,
    /// Archs to build and verify, e.g. `7.5,8.9,9.0` (the `archs --arch` grammar).
    #[arg(long, value_name = "SPEC", required_unless_present_any = ["dry_run", "check"])]
    pub arch: Option<crate::arch::spec::ArchSpec>,
    #[command(flatten)]
    pub target: crate::python::TargetEnv,
    /// Print the diff of rules + patches and the review items; build nothing.
    #[arg(long, conflicts_with = "check")]
    pub dry_run: bool,
    /// Build nothing; exit 1 if the rules or patches would change a file or a review item is unexplained.
    #[arg(long)]
    pub check: bool,
    /// Install the source's requirements.txt beside the torch env for the import sweep.
    #[arg(long)]
    pub with_deps: bool,
    /// Let the extension's own nvcc arch flags through instead of --arch (the audit still checks --arch).
    #[arg(long)]
    pub own_arch_flags: bool,
    /// Port and build a source whose git submodules are empty (a clone without --recursive)
    /// anyway: what includes them fails and is reported. By default the port stops before
    /// copying anything, naming them and the command that fills them.
    #[arg(long)]
    pub skip_missing_submodules: bool,
    /// Do not run the package's own tests (test_*.py, *_test.py) against the built wheel.
    #[arg(long)]
    pub no_tests: bool,
    /// Port onto torch's stable ABI (patches/rules/torch-stable.toml after the legacy rules;
    /// the recipe's stable/*.patch): one abi3 wheel that loads on every torch from the version
    /// the rewritten code needs (`verify binary --target` says which).
    #[arg(long)]
    pub stable_abi: bool,
    /// With --stable-abi: the operators' namespace, torch.ops.NAME.* (default: the package of
    /// the recipe's module, else the source's directory name).
    #[arg(long, value_name = "NAME", requires = "stable_abi")]
    pub stable_namespace: Option<String>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

fn mode_of(args: &PortExtensionArgs) -> RunMode {
    if args.dry_run {
        RunMode::DryRun
    } else if args.check {
        RunMode::Check
    } else {
        RunMode::Full
    }
}

/// `--stable-namespace`, else the package of the recipe's module (`legacy_demo._C` →
/// `legacy_demo`), else the source directory's name.
fn stable_namespace(args: &PortExtensionArgs, recipe: &Recipe) -> String {
    if let Some(ns) = &args.stable_namespace {
        return ns.clone();
    }
    let src = args.src.as_ref().map(PathBuf::from);
    match recipe
        .build
        .module
        .split('.')
        .next()
        .filter(|p| !p.is_empty())
    {
        Some(package) => package.to_string(),
        None => crate::codemod::stable_bindings::namespace_of(src.as_ref()),
    }
}

pub fn run(args: &PortExtensionArgs) -> Result<Exit> {
    let recipe = match (&args.recipe, &args.name, &args.src) {
        (Some(r), Some(n), _) if r != n => {
            bail!("NAME `{n}` and --recipe `{r}` differ: give one of them")
        }
        (Some(r), _, _) | (None, Some(r), _) => {
            if args.write_recipe.is_some() {
                bail!("--write-recipe writes a recipe from a recipe-less port: drop NAME/--recipe");
            }
            Recipe::find(r)?
        }
        (None, None, Some(src)) => port_extension::recipe_less(src)?,
        (None, None, None) => bail!(
            "which extension? give --src DIR|pypi:NAME==VER|git+URL@REV for any extension, or a recipe NAME ({})",
            port_extension::recipe::list().join(", ")
        ),
    };
    let name = recipe.name.clone();
    args.write_recipe
        .as_deref()
        .map_or(Ok(()), port_extension::recipe::check_new_name)?;
    let mode = mode_of(args);
    let stable_abi = args.stable_abi.then(|| stable_namespace(args, &recipe));
    let req = Request {
        src: if recipe.recipe_less {
            None
        } else {
            args.src.as_ref().map(PathBuf::from)
        },
        recipe,
        arch: args.arch.clone(),
        target: args.target.clone(),
        mode,
        progress: progress::Mode::Auto,
        with_deps: args.with_deps,
        own_arch_flags: args.own_arch_flags,
        skip_missing_submodules: args.skip_missing_submodules,
        run_tests: !args.no_tests,
        stable_abi,
    };
    let out = match port_extension::run(&req)? {
        Ok(o) => o,
        Err(f) => {
            if args.output.json {
                print_json(
                    documents::PORT_EXTENSION,
                    &serde_json::json!({ "ok": false, "failure": f }),
                )?;
            }
            match f {
                PortFailure::Build(b) => {
                    crate::errln!("error: the ported {name} does not build: {b}")
                }
                PortFailure::Verify(v) => crate::errln!("error: {v}"),
            }
            return Ok(Exit::Failed);
        }
    };
    emit(args.output.json, documents::PORT_EXTENSION, &out, |o| {
        let mut s = o.diff.clone().unwrap_or_default();
        s.push_str(&o.summary());
        s
    })?;
    if mode == RunMode::Check && (!out.files_changed.is_empty() || out.unexplained > 0) {
        return Ok(Exit::Failed);
    }
    if let (Some(w), RunMode::Full) = (&args.write_recipe, mode) {
        let dir = port_extension::recipe::write(w, &req.recipe, &out)?;
        crate::errln!(
            "archsmith: wrote {} (run it as `port-extension {w}`)",
            dir.join("recipe.toml").display()
        );
    }
    Ok(Exit::Success)
}
