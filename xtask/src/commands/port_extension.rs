//! `cargo xtask port-extension NAME|--src DIR [--recipe NAME] [--package PATH] --arch SPEC
//! [--dry-run|--check]`: thin CLI over [`crate::port_extension`] (trees: `tree_of_packages`).
//!
//! Exit status: 0 ported, built and verified (or the --dry-run diff printed); 1 when the build,
//! audit, import or smoke test fails, a review item is unexplained, or --check would change
//! something; 2 on other errors (a bad recipe, a patch that does not apply, no source).

use crate::build_output::progress;
use crate::output::{documents, emit, print_json, Exit};
use crate::port_extension::tree_of_packages::{port_tree, Member, TreePort, TreeReport};
use crate::port_extension::{self, recipe::Recipe, Outcome, Request, RunMode};
use anyhow::{bail, Result};
use clap::Args;
use std::path::{Path, PathBuf};

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
    /// With a --src DIR that holds several extension builds (a setup.py per op, a make.sh): port
    /// only the package in PATH (relative to DIR), not each in turn.
    #[arg(long, value_name = "PATH", requires = "src")]
    pub package: Option<String>,
    /// After a recipe-less port that passed, write `patches/NAME/recipe.toml` pinning its source.
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
    /// Port a source whose git submodules are empty (a clone without --recursive) anyway; by
    /// default the port stops first, naming them and the command that fills them.
    #[arg(long)]
    pub skip_missing_submodules: bool,
    /// Do not run the package's own tests (test_*.py, *_test.py) against the built wheel.
    #[arg(long)]
    pub no_tests: bool,
    /// Concurrent compile jobs (MAX_JOBS); for a tree, the job slots its packages share, built
    /// at once (default from cores and available memory).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
    /// Port onto torch's stable ABI (crates/codemod/rules/torch-stable.toml after the legacy rules;
    /// the recipe's stable/*.patch): one abi3 wheel that loads on every torch from the version
    /// the rewritten code needs (`verify binary --target` says which).
    #[arg(long)]
    pub stable_abi: bool,
    /// With --stable-abi: the operators' namespace, torch.ops.NAME.* (default: the package of
    /// the recipe's module, else the source's directory name).
    #[arg(long, value_name = "NAME", requires = "stable_abi")]
    pub stable_namespace: Option<String>,
    /// The torch the code was written for, e.g. 1.4 (default: the lowest its requirement files
    /// or setup.py allow): where the history of its ATen calls starts.
    #[arg(long, value_name = "VERSION")]
    pub from_torch: Option<crate::version::Version>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

fn mode_of(args: &PortExtensionArgs) -> RunMode {
    match (args.dry_run, args.check) {
        (true, _) => RunMode::DryRun,
        (_, true) => RunMode::Check,
        _ => RunMode::Full,
    }
}

pub fn run(args: &PortExtensionArgs) -> Result<Exit> {
    if let (None, None, Some(src)) = (&args.recipe, &args.name, &args.src) {
        if let Some(members) = port_extension::tree_of_packages::as_tree(Path::new(src))? {
            return run_tree(args, Path::new(src), &members);
        }
    }
    if let (Some(_), Some(src)) = (&args.package, &args.src) {
        bail!("--package PATH picks a package of a tree; {src} is not one (it has its own build script, or a recipe names it): drop --package");
    }
    let recipe = port_extension::recipe::chosen(
        args.recipe.as_deref(),
        args.name.as_deref(),
        args.src.as_deref(),
        args.write_recipe.is_some(),
    )?;
    port_one(args, recipe)
}

/// A tree of packages: the one `--package` names, ported as any package; else all, at once.
fn run_tree(args: &PortExtensionArgs, root: &Path, members: &[Member]) -> Result<Exit> {
    let recipe_of = |dir: &Path| port_extension::recipe_less(&dir.display().to_string());
    let one_only = args.write_recipe.as_ref().map(|_| "--write-recipe");
    let port = |dir: &Path, pool| {
        let req = request(args, recipe_of(dir)?);
        port_extension::run(&Request { pool, ..req })
    };
    let building = (mode_of(args) == RunMode::Full).then_some(args.jobs);
    let pick = (args.package.as_deref(), one_only);
    match port_tree(root, members, pick, building, &port)? {
        TreePort::One(dir) => port_one(args, recipe_of(&dir)?),
        TreePort::All(report) => {
            let doc = documents::PORT_EXTENSION_TREE;
            emit(args.output.json, doc, &report, TreeReport::table)?;
            Ok(Exit::passed(report.ok()))
        }
    }
}

/// The port of one package with the command's flags.
fn request(args: &PortExtensionArgs, recipe: Recipe) -> Request {
    let stable_abi = args.stable_abi.then(|| {
        port_extension::stable_namespace(
            args.stable_namespace.as_deref(),
            args.src.as_deref(),
            &recipe,
        )
    });
    Request {
        src: if recipe.recipe_less {
            None
        } else {
            args.src.as_ref().map(PathBuf::from)
        },
        recipe,
        arch: args.arch.clone(),
        target: args.target.clone(),
        mode: mode_of(args),
        progress: progress::Mode::Auto,
        with_deps: args.with_deps,
        own_arch_flags: args.own_arch_flags,
        skip_missing_submodules: args.skip_missing_submodules,
        run_tests: !args.no_tests,
        stable_abi,
        from_torch: args.from_torch.clone(),
        jobs: args.jobs,
        pool: None,
    }
}

/// Ports one package (a recipe's, or a recipe-less source) and prints its report.
fn port_one(args: &PortExtensionArgs, recipe: Recipe) -> Result<Exit> {
    let name = recipe.name.clone();
    args.write_recipe
        .as_deref()
        .map_or(Ok(()), port_extension::recipe::check_new_name)?;
    let mode = mode_of(args);
    let req = request(args, recipe);
    let out = match port_extension::run(&req)? {
        Ok(o) => o,
        Err(f) => {
            if args.output.json {
                print_json(
                    documents::PORT_EXTENSION,
                    &serde_json::json!({ "ok": false, "failure": f }),
                )?;
            }
            crate::errln!("error: {}", f.message(&name));
            return Ok(Exit::Failed);
        }
    };
    emit(
        args.output.json,
        documents::PORT_EXTENSION,
        &out,
        Outcome::rendered,
    )?;
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
