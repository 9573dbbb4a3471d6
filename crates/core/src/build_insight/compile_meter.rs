//! A compile measured by a launcher: what CMake runs for each C, C++ and CUDA object when a build
//! archsmith drives (build-torch) sets `CMAKE_<LANG>_COMPILER_LAUNCHER` to archsmith's
//! `compile-meter` (ahead of a compiler cache's launcher, when there is one). It waits in the
//! build's memory pool for the compile's kept peak, or the first-build figure of its kind, runs it
//! watched for its process tree's peak, and appends a [`CompileRecord`] to the build's log — the
//! records the arch guard writes for build-ext, so one trace, summary and peak store serve both.

use super::compile_record::{self, CompileRecord};
use super::memory_gate::Gate;
use super::peaks::{self, Peaks};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The file the records go to; without it the meter only runs the command.
pub const LOG_VAR: &str = "ARCHSMITH_COMPILE_LOG";
/// Set when the command is a compiler cache's launcher: a hit compiles nothing and sccache's
/// server runs a miss outside the tree the meter watches, so no peak is taken or kept.
pub const THROUGH_CACHE_VAR: &str = "ARCHSMITH_COMPILE_THROUGH_CACHE";

const SOURCE_SUFFIXES: &[&str] = &[".cu", ".c", ".cc", ".cpp", ".cxx", ".C"];

fn is_source(arg: &str) -> bool {
    !arg.starts_with('-') && SOURCE_SUFFIXES.iter().any(|s| arg.ends_with(s))
}

/// The file a compile command compiles: the argument of `-c` (CMake's form), else its first
/// source-like argument. None for a command that compiles nothing (a version query) and for
/// CMake's own probes while it configures: `try_compile` builds `cmTC_*` targets in a scratch
/// directory (`CMakeFiles/CMakeScratch/TryCompile-*`, `CMakeFiles/CMakeTmp` before 3.24), the
/// directory they run in (`cwd`).
pub fn compiled_source<'a>(args: &'a [String], cwd: &Path) -> Option<&'a str> {
    let dir = cwd.to_string_lossy();
    let probe = dir.contains("/CMakeFiles/CMakeScratch/")
        || dir.contains("/CMakeFiles/CMakeTmp")
        || args
            .iter()
            .any(|a| a.contains("/cmTC_") || a.starts_with("cmTC_"));
    if probe {
        return None;
    }
    let after_c = args
        .windows(2)
        .find(|w| w[0] == "-c" && is_source(&w[1]))
        .map(|w| w[1].as_str());
    after_c.or_else(|| args.iter().map(String::as_str).find(|a| is_source(a)))
}

/// The arguments that change how big a compile is: the device archs it builds, the machine
/// options, optimization level and macros (torch compiles one source once per CPU capability,
/// `X.cpp.AVX2.cpp` and `X.cpp.AVX512.cpp` of the same content, told apart by `-mavx512f` and
/// `-DCPU_CAPABILITY=AVX512`).
fn sizing_flags(args: &[String]) -> Vec<String> {
    args.iter()
        .filter(|a| {
            a.contains("sm_")
                || a.contains("compute_")
                || a.starts_with("-m")
                || a.starts_with("-O")
                || a.starts_with("-D")
        })
        .cloned()
        .collect()
}

/// What a compile of `tool` reserves before anything was measured for it.
pub fn first_estimate(tool: &str) -> (u64, &'static str) {
    let (gib, from) = match tool {
        "nvcc" => (
            peaks::FIRST_NVCC_GIB_PER_THREAD,
            "the first-build estimate for nvcc",
        ),
        _ => (
            peaks::FIRST_CXX_GIB,
            "the first-build estimate for a C++ compile",
        ),
    };
    ((gib * 1024.0 * 1024.0 * 1024.0) as u64, from)
}

/// Runs `args` (a program and its arguments: CMake's launcher form), measured when the build
/// gave a log ([`LOG_VAR`]); returns the command's exit status.
pub fn run(args: &[OsString]) -> Result<i32> {
    run_logged(
        args,
        std::env::var_os(LOG_VAR).map(PathBuf::from),
        std::env::var_os(THROUGH_CACHE_VAR).is_none(),
    )
}

/// [`run`] with its log and whether it runs the compiler itself (`direct`) given.
fn run_logged(args: &[OsString], log: Option<PathBuf>, direct: bool) -> Result<i32> {
    let Some((program, rest)) = args.split_first() else {
        bail!(
            "compile-meter runs a compile: give it the command, as CMake gives a compiler launcher"
        );
    };
    let words: Vec<String> = rest
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest);
    let cwd = std::env::current_dir().unwrap_or_default();
    let (Some(source), Some(log)) = (compiled_source(&words, &cwd), log) else {
        return cmd
            .status()
            .map(|s| s.code().unwrap_or(1))
            .with_context(|| format!("running {}", Path::new(program).display()));
    };
    let tool = if source.ends_with(".cu") {
        "nvcc"
    } else {
        "c++"
    };
    let key = crate::stamp::hash_file(Path::new(source))
        .map(|h| peaks::key(tool, &h, &sizing_flags(&words)))
        .unwrap_or_default();
    let kept = Peaks::load(&peaks::default_path_for_env());
    let (reserved_bytes, reserved_from) = kept.reservation(&key, first_estimate(tool));
    let name = source.rsplit('/').next().unwrap_or(source);
    let ran = run_in_pool(&mut cmd, name, reserved_bytes)?;
    let record = ran.record(
        tool,
        vec![source.to_string()],
        (reserved_bytes, reserved_from),
        key,
        direct,
        Vec::new(),
    );
    compile_record::append(&log, &serde_json::to_string(&record)?)?;
    Ok(ran.exit)
}

/// A compile's run: its exit status, when it ran, how long it waited for memory, its peak.
pub struct Ran {
    pub exit: i32,
    pub start_ms: u64,
    pub end_ms: u64,
    pub waited_ms: u64,
    /// The highest sample of its process tree's resident memory, never below its largest
    /// process's `ru_maxrss`.
    pub peak_rss_bytes: u64,
}

/// Waits in the build's memory pool (when this process has one) until `reserved` bytes fit,
/// saying why it waits for `name`, then runs `cmd` measured; the pool's slot is freed as the
/// compile ends.
pub fn run_in_pool(cmd: &mut std::process::Command, name: &str, reserved: u64) -> Result<Ran> {
    let admission = Gate::from_env()
        .map(|g| {
            g.admit(reserved, &mut |why| {
                crate::errln!("archsmith: {name} waits for memory: {why}")
            })
        })
        .transpose()?;
    if admission.is_some() {
        // A guard inside this compile (the launcher's nvcc is the guard's wrapper) is this one.
        cmd.env(super::memory_gate::ADMITTED_VAR, "1");
    }
    let start_ms = compile_record::now_ms();
    let (exit, sampled) = run_sampled(cmd)?;
    let largest = crate::process::rusage(true).map_or(0, |(_, p)| p);
    Ok(Ran {
        exit,
        start_ms,
        end_ms: compile_record::now_ms(),
        waited_ms: admission.as_ref().map_or(0, |a| a.waited_ms),
        peak_rss_bytes: sampled.max(largest),
    })
}

impl Ran {
    /// Its record. `direct`: the compiler ran in the measured tree; through a compiler cache
    /// (`direct` false) the peak is not the compile's, so none is recorded or kept (`key` empty).
    pub fn record(
        &self,
        tool: &str,
        sources: Vec<String>,
        (reserved_bytes, reserved_from): (u64, &str),
        key: String,
        direct: bool,
        phases: Vec<super::nvcc_time::Phase>,
    ) -> CompileRecord {
        CompileRecord {
            tool: tool.into(),
            sources,
            start_ms: self.start_ms,
            end_ms: self.end_ms,
            waited_ms: self.waited_ms,
            peak_rss_bytes: if direct { self.peak_rss_bytes } else { 0 },
            reserved_bytes,
            reserved_from: reserved_from.into(),
            key: if direct { key } else { String::new() },
            exit: self.exit,
            phases,
        }
    }
}

/// Runs `cmd`, sampling its process tree's resident memory every 50 ms: its exit status and the
/// highest sum seen.
pub fn run_sampled(cmd: &mut std::process::Command) -> Result<(i32, u64)> {
    let mut child = cmd
        .spawn()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    let pid = child.id();
    let (status, peak) = crate::process::with_peak(
        std::time::Duration::from_millis(50),
        || compile_record::tree_rss_bytes(pid),
        || child.wait(),
    );
    Ok((
        status
            .with_context(|| format!("waiting for {:?}", cmd.get_program()))?
            .code()
            .unwrap_or(1),
        peak,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_compiled_file_is_found_in_cmakes_commands() {
        // torch's CUDA and C++ objects as CMake's ninja generator writes them.
        let cu = s(&[
            "-forward-unknown-to-host-compiler",
            "-gencode",
            "arch=compute_75,code=sm_75",
            "-x",
            "cu",
            "-c",
            "/src/aten/src/ATen/native/cuda/Abs.cu",
            "-o",
            "Abs.cu.o",
        ]);
        let build = Path::new("/src/build");
        assert_eq!(
            compiled_source(&cu, build),
            Some("/src/aten/src/ATen/native/cuda/Abs.cu")
        );
        assert_eq!(sizing_flags(&cu), ["arch=compute_75,code=sm_75"]);
        let cxx = s(&[
            "-O3",
            "-I/src/include",
            "-o",
            "caffe2/CMakeFiles/torch_cpu.dir/__/x.cpp.o",
            "-c",
            "/src/x.cpp",
        ]);
        assert_eq!(compiled_source(&cxx, build), Some("/src/x.cpp"));
        assert_eq!(sizing_flags(&cxx), ["-O3"]);
        // One source per CPU capability: the same content, sized apart by its flags.
        let avx512 = s(&[
            "-mavx512f",
            "-DCPU_CAPABILITY=AVX512",
            "-c",
            "/b/k.cpp.AVX512.cpp",
        ]);
        assert_eq!(
            sizing_flags(&avx512),
            ["-mavx512f", "-DCPU_CAPABILITY=AVX512"]
        );
        // No source, or CMake's own probes while configuring: nothing to measure.
        assert_eq!(compiled_source(&s(&["--version"]), build), None);
        let abi = s(&[
            "-o",
            "CMakeFiles/cmTC_1.dir/CMakeCXXCompilerABI.cpp.o",
            "-c",
            "/usr/share/cmake/Modules/CMakeCXXCompilerABI.cpp",
        ]);
        assert_eq!(compiled_source(&abi, build), None);
        let scratch = Path::new("/src/build/CMakeFiles/CMakeScratch/TryCompile-x");
        assert_eq!(compiled_source(&cxx, scratch), None);
    }

    #[test]
    fn a_metered_compile_is_recorded_with_its_peak_and_waits_in_the_pool() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("unit.c");
        std::fs::write(&src, "int f(void) { return 1; }\n").unwrap();
        let log = d.path().join("compiles.jsonl");
        // `true` compiles nothing, but its command names a source as a compiler's would.
        let args: Vec<OsString> = vec!["true".into(), "-c".into(), src.clone().into()];
        let code = run_logged(&args, Some(log.clone()), true).unwrap();
        assert_eq!(code, 0);
        let records = compile_record::parse(&std::fs::read_to_string(&log).unwrap());
        assert_eq!(records.len(), 1, "{records:?}");
        let r = &records[0];
        assert_eq!((r.tool.as_str(), r.exit), ("c++", 0));
        assert!(r.sources[0].ends_with("unit.c"));
        assert!(r.peak_rss_bytes > 0 && !r.key.is_empty(), "{r:?}");
        assert_eq!(
            r.reserved_from,
            "the first-build estimate for a C++ compile"
        );
        // Through a compiler cache: recorded, but no peak taken or kept.
        run_logged(&args, Some(log.clone()), false).unwrap();
        let records = compile_record::parse(&std::fs::read_to_string(&log).unwrap());
        assert_eq!(
            (records[1].peak_rss_bytes, records[1].key.as_str()),
            (0, "")
        );
        // A failed compile keeps its exit status.
        let failing: Vec<OsString> = vec!["false".into(), "-c".into(), src.into()];
        assert_eq!(run_logged(&failing, Some(log), true).unwrap(), 1);
    }
}
