//! Reading a build's output: ninja's `[N/M]` progress and the first real compiler error.

use regex::Regex;
use std::sync::OnceLock;

/// `[3/7]` at the start of a line: ninja finished step 3 of 7 (ninja prints a step when it ends
/// when its output is not a terminal).
pub fn ninja_step(line: &str) -> Option<(u32, u32)> {
    let rest = line.strip_prefix('[')?;
    let (nums, _) = rest.split_once(']')?;
    let (n, m) = nums.split_once('/')?;
    let (n, m) = (n.trim().parse().ok()?, m.trim().parse().ok()?);
    (m > 0 && n <= m).then_some((n, m))
}

/// The file a ninja step compiled (`-c X.cu` / `-c X.cpp` in a verbose line, or CMake's
/// `Building CUDA object …/X.cu.o` / `Linking CXX shared library X`), shortened to its name.
pub fn step_file(line: &str) -> Option<&str> {
    for marker in [
        " object ",
        " shared library ",
        " static library ",
        " executable ",
    ] {
        if let Some((_, rest)) = line.split_once(marker) {
            if let Some(f) = rest.split_whitespace().next() {
                let name = f.rsplit('/').next().unwrap_or(f);
                return Some(name.strip_suffix(".o").unwrap_or(name));
            }
        }
    }
    let mut it = line.split_whitespace();
    while let Some(tok) = it.next() {
        if tok == "-c" {
            if let Some(f) = it.clone().next().filter(|f| !f.starts_with('-')) {
                return Some(f.rsplit('/').next().unwrap_or(f));
            }
        }
    }
    None
}

/// A compiler error found in the log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CompilerError {
    pub file: Option<String>,
    pub line: Option<u32>,
    pub message: String,
    /// The log line number (1-based) it was found on.
    pub log_line: usize,
}

impl std::fmt::Display for CompilerError {
    /// `file:line: message (log line N)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{file}:{line}: ")?,
            (Some(file), None) => write!(f, "{file}: ")?,
            _ => {}
        }
        write!(f, "{} (log line {})", self.message, self.log_line)
    }
}

fn patterns() -> &'static [Regex; 3] {
    static P: OnceLock<[Regex; 3]> = OnceLock::new();
    P.get_or_init(|| {
        [
            // gcc / clang / nvcc host side: file:line[:col]: [fatal ]error: message
            Regex::new(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+)(?::\d+)?:\s+(?:fatal )?error:\s*(?P<msg>.*)$")
                .expect("gcc error regex"),
            // nvcc front end (cudafe/EDG): file(line): [catastrophic ]error: message
            Regex::new(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\):\s+(?:catastrophic )?error\b[^:]*:\s*(?P<msg>.*)$")
                .expect("nvcc error regex"),
            // nvcc driver / ptxas / linker without a location
            Regex::new(r"^(?:nvcc fatal|ptxas fatal|ptxas error|ld: error|/usr/bin/ld: .*error|collect2: error|sccache: error|ccache: error)\s*:?\s*(?P<msg>.*)$")
                .expect("tool error regex"),
        ]
    })
}

/// The lines a log file holds so far (its header, before a build's output is streamed into it):
/// what an error found in the streamed lines adds to its `log_line`.
pub fn lines_in(path: &std::path::Path) -> usize {
    std::fs::read(path).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count())
}

/// The first compiler error in `lines`, if any. Python tracebacks and pip's summary are not
/// compiler errors; see [`last_python_error`] for those.
pub fn first_compiler_error<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<CompilerError> {
    for (i, line) in lines.into_iter().enumerate() {
        // CMake indents the output of the compiles it runs for its checks.
        let line = line.trim();
        for (k, re) in patterns().iter().enumerate() {
            if let Some(c) = re.captures(line) {
                let msg = c.name("msg").map_or("", |m| m.as_str()).trim();
                let msg = if k == 2 { line.trim() } else { msg };
                return Some(CompilerError {
                    file: c.name("file").map(|m| m.as_str().trim().to_string()),
                    line: c.name("line").and_then(|m| m.as_str().parse().ok()),
                    message: msg.to_string(),
                    log_line: i + 1,
                });
            }
        }
    }
    None
}

/// A compiler the kernel killed (SIGKILL) in the middle of a build: what gcc, nvcc and ninja print
/// when the out-of-memory killer ends a compile (`c++: fatal error: Killed signal terminated
/// program cc1plus`, `nvcc error   : 'cicc' died due to signal 9 (Kill signal)`). Such a build
/// shows no compiler error, and said "failed … with no compiler error in the output" (issue 48).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KilledCompile {
    /// `cc1plus`, `cicc`, `ptxas`.
    pub program: String,
    /// The log line number (1-based) it was found on.
    pub log_line: usize,
}

/// The first compile the kernel killed, in `lines`.
pub fn first_killed_compile<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<KilledCompile> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(concat!(
            r"(?:fatal error: Killed signal terminated program (?P<gcc>\S+)",
            r"|'(?P<nvcc>[^']+)' died due to signal 9",
            r"|internal compiler error: Killed \(program (?P<ice>[^)]+)\)",
            // nvcc --threads runs its steps through a shell, which prints only this.
            r"|^\s*(?P<shell>Killed)\s*$)"
        ))
        .expect("killed compile regex")
    });
    lines.into_iter().enumerate().find_map(|(i, line)| {
        let c = re.captures(line)?;
        let program = match c.name("shell") {
            Some(_) => "a compiler process".to_string(),
            None => ["gcc", "nvcc", "ice"]
                .iter()
                .find_map(|n| c.name(n))
                .map(|m| m.as_str().to_string())?,
        };
        Some(KilledCompile {
            program,
            log_line: i + 1,
        })
    })
}

impl KilledCompile {
    /// The sentence for people: what was killed, the memory builds had here (`memory`, e.g.
    /// [`crate::host::Memory::limit_sentence`]'s), and the fix.
    pub fn explain(&self, memory: &str, jobs: Option<u32>) -> String {
        let jobs = jobs.map_or(String::new(), |j| format!(" with {j} job(s) at once"));
        format!(
            "the kernel killed {} (SIGKILL: out of memory){jobs}; {memory}, and one compile of torch headers peaks at 1.5–3.5 GiB. Give the build more memory, or fewer jobs (--jobs 1)",
            self.program
        )
    }
}

/// The first `CMake Error at FILE:LINE (...)` with the message CMake prints under it (its
/// indented lines up to the first blank one), for a configure that failed before any compiler ran.
pub fn first_cmake_error<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<CompilerError> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"^CMake Error(?: at (?P<file>[^:]+):(?P<line>\d+))?[^:]*:?\s*(?P<msg>.*)$")
            .expect("cmake error regex")
    });
    let mut found: Option<CompilerError> = None;
    for (i, line) in lines.into_iter().enumerate() {
        match &mut found {
            None => {
                if let Some(c) = re.captures(line.trim_end()) {
                    found = Some(CompilerError {
                        file: c.name("file").map(|m| m.as_str().to_string()),
                        line: c.name("line").and_then(|m| m.as_str().parse().ok()),
                        message: c.name("msg").map_or("", |m| m.as_str()).trim().to_string(),
                        log_line: i + 1,
                    });
                }
            }
            Some(e) => {
                let t = line.trim();
                if t.is_empty() {
                    if !e.message.is_empty() {
                        break;
                    }
                    continue;
                }
                if !line.starts_with(' ') {
                    break;
                }
                if !e.message.is_empty() {
                    e.message.push(' ');
                }
                e.message.push_str(t);
            }
        }
    }
    found
}

/// The first `ERROR: message` line of a Python build front end (pip, scikit-build-core), for a
/// failure before CMake or any compiler ran.
pub fn first_front_end_error<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<String> {
    lines
        .into_iter()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("ERROR: "))
        .map(|m| m.trim().to_string())
}

/// The last `SomethingError: message` line of a Python traceback (setup.py failing before any
/// compiler ran), if there is one.
pub fn last_python_error<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<String> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception):\s")
            .expect("py error regex")
    });
    lines
        .into_iter()
        .filter(|l| re.is_match(l))
        .last()
        .map(|l| l.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What gcc, nvcc and gcc's ICE path print when the kernel kills a compile (the gcc line is
    /// from a real build in a 400 MiB cgroup), and a line that only mentions a signal.
    #[test]
    fn a_compile_the_kernel_killed_is_named_with_its_program() {
        let lines = [
            "[2/3] c++ -c bind.cpp -o bind.o",
            "FAILED: [code=1] bind.o",
            "c++: fatal error: Killed signal terminated program cc1plus",
            "compilation terminated.",
        ];
        let k = first_killed_compile(lines).unwrap();
        assert_eq!((k.program.as_str(), k.log_line), ("cc1plus", 3));
        let nvcc = ["nvcc error   : 'cicc' died due to signal 9 (Kill signal)"];
        assert_eq!(first_killed_compile(nvcc).unwrap().program, "cicc");
        let ice = ["g++: internal compiler error: Killed (program cc1plus)"];
        assert_eq!(first_killed_compile(ice).unwrap().program, "cc1plus");
        assert_eq!(first_killed_compile(["caught signal 9 in the test"]), None);
        // nvcc --threads 4 under a 4 GiB cgroup (causal-conv1d's plain pip build): the shell's word.
        let threaded = [
            "  Remark: The warnings can be suppressed",
            "  Killed",
            "  ptxas info : x",
        ];
        let k2 = first_killed_compile(threaded).unwrap();
        assert_eq!(
            (k2.program.as_str(), k2.log_line),
            ("a compiler process", 2)
        );
        assert_eq!(
            first_killed_compile(["Killed 3 processes in the test"]),
            None
        );
        let said = k.explain("0.4 GiB was available", Some(1));
        assert!(
            said.contains("killed cc1plus (SIGKILL: out of memory) with 1 job(s)"),
            "{said}"
        );
        assert!(said.contains("; 0.4 GiB was available, and"), "{said}");
    }

    #[test]
    fn front_end_errors() {
        let log = "  Running command Preparing metadata\n  ERROR: experimental must be enabled currently to use plugins not provided by scikit-build-core\n  error: subprocess-exited-with-error";
        assert_eq!(
            first_front_end_error(log.lines()).as_deref(),
            Some("experimental must be enabled currently to use plugins not provided by scikit-build-core")
        );
    }

    #[test]
    fn cmake_errors_with_their_message() {
        let log = "-- Found CUDA\nCMake Error at cmake/public/cuda.cmake:47 (message):\n  PyTorch requires CUDA 11.0 or above.\nCall Stack (most recent call first):\n  cmake/Dependencies.cmake:44 (include)\n\n-- Configuring incomplete";
        let e = first_cmake_error(log.lines()).unwrap();
        assert_eq!(e.file.as_deref(), Some("cmake/public/cuda.cmake"));
        assert_eq!(e.line, Some(47));
        assert_eq!(e.message, "PyTorch requires CUDA 11.0 or above.");
        assert_eq!(e.log_line, 2);
        assert!(first_cmake_error("-- ok\n-- fine".lines()).is_none());
    }

    #[test]
    fn ninja_steps() {
        assert_eq!(
            ninja_step("[2/5] /cuda/bin/nvcc -c a.cu -o a.o"),
            Some((2, 5))
        );
        assert_eq!(ninja_step("[0/5]"), Some((0, 5)));
        assert_eq!(
            step_file("[1/2] Building CUDA object CMakeFiles/torch_cuda.dir/aten/kernel.cu.o"),
            Some("kernel.cu")
        );
        assert_eq!(
            step_file("[2/2] Linking CUDA shared library libtorch_cuda.so"),
            Some("libtorch_cuda.so")
        );
        assert_eq!(ninja_step("[6/5] x"), None);
        assert_eq!(ninja_step("[a/b] x"), None);
        assert_eq!(ninja_step("building 'x' extension"), None);
        assert_eq!(
            step_file(
                "[1/2] /x/nvcc --generate-dependencies-with-compile -c /t/src/k.cu -o /t/k.o"
            ),
            Some("k.cu")
        );
    }

    #[test]
    fn finds_the_first_gcc_and_nvcc_errors() {
        let log = [
            "[1/2] c++ -c a.cpp",
            "/t/src/a.cpp:12:5: warning: unused variable 'x'",
            "/t/src/k.cu(41): error: identifier \"undefined_thing\" is undefined",
            "/t/src/a.cpp:7:1: error: expected ';' before '}' token",
        ];
        let e = first_compiler_error(log).unwrap();
        assert_eq!(e.file.as_deref(), Some("/t/src/k.cu"));
        assert_eq!(e.line, Some(41));
        assert_eq!(e.log_line, 3);
        assert!(e.message.contains("undefined_thing"), "{e:?}");

        let e = first_compiler_error(["x.cpp:3:10: fatal error: foo.h: No such file or directory"])
            .unwrap();
        assert_eq!((e.file.as_deref(), e.line), (Some("x.cpp"), Some(3)));
        assert_eq!(e.message, "foo.h: No such file or directory");

        let e = first_compiler_error(["nvcc fatal   : Unsupported gpu architecture 'compute_50'"])
            .unwrap();
        assert_eq!(e.file, None);
        assert!(e.message.contains("compute_50"));
        // Inside CMake's report of its compiler check.
        let e = first_compiler_error([
            "  Run Build Command(s): /usr/bin/gmake -f Makefile cmTC_cb6b9/fast",
            "    nvcc fatal   : Unsupported gpu architecture 'compute_60'",
        ])
        .unwrap();
        assert!(e.message.contains("compute_60"), "{e:?}");
        assert_eq!(
            first_compiler_error(["all good", "error: subprocess-exited-with-error"]),
            None
        );
        let e = first_compiler_error(["sccache: error: failed to execute compile"]).unwrap();
        assert!(e.message.starts_with("sccache: error"), "{e:?}");
    }

    #[test]
    fn python_errors() {
        let log = [
            "Traceback (most recent call last):",
            "  File \"setup.py\", line 3",
            "ModuleNotFoundError: No module named 'foo'",
        ];
        assert_eq!(
            last_python_error(log).as_deref(),
            Some("ModuleNotFoundError: No module named 'foo'")
        );
    }
}
