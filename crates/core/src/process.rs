//! The one process runner: every external program archsmith starts goes through here, so errors
//! always name the program, its arguments and what it printed.
//!
//! Arguments are passed as a vector, never through a shell string. Short commands are captured
//! ([`Cmd::output`], [`Cmd::read`]); long builds stream through `duct` ([`Cmd::stream_lines`]).
//! One-shot commands may be written with `xshell`'s `cmd!` (rust-analyzer's style: the template is
//! split into arguments at compile time, `{var}` interpolates one argument, `{args...}` several) and
//! converted into a [`Cmd`], so they still run, fail and report through this runner:
//!
//! ```no_run
//! # use archsmith_core::process::{shell, Cmd};
//! let sh = shell()?;
//! let nvcc = "/opt/cuda/bin/nvcc";
//! let text = Cmd::from(xshell::cmd!(sh, "{nvcc} --version")).read()?;
//! # anyhow::Ok(())
//! ```

use anyhow::{bail, Context, Result};
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;

/// What a streamed command's reader asks after a line ([`Cmd::stream_lines_until`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Stream {
    Continue,
    /// End the command's whole process tree, for the reason given: what it still does is
    /// wasted (a build whose first step failed).
    EndSoon(&'static str),
}

#[derive(Debug, Clone)]
pub struct Cmd {
    program: OsString,
    args: Vec<OsString>,
    envs: Vec<(OsString, Option<OsString>)>,
    dir: Option<PathBuf>,
    /// A cgroup's `cgroup.procs`: the child joins that group before it runs the program.
    cgroup_procs: Option<PathBuf>,
}

/// Runs `work` while another thread calls `measure` every `every`: `work`'s result and the
/// highest value `measure` gave (a process tree's or a cgroup's memory while a build runs).
pub fn with_peak<T>(
    every: std::time::Duration,
    measure: impl Fn() -> u64 + Sync,
    work: impl FnOnce() -> T,
) -> (T, u64) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(measure());
                std::thread::sleep(every);
            }
            peak
        });
        let out = work();
        done.store(true, Ordering::Relaxed);
        (out, sampler.join().unwrap_or(0))
    })
}

/// Makes the child of `c` write `0` (itself) into the cgroup file `procs` between fork and exec.
fn join_cgroup_before_exec(c: &mut std::process::Command, procs: &Path) {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    let Ok(path) = std::ffi::CString::new(procs.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: the closure runs in the forked child; it only calls open, write and close, which
    // are async-signal-safe, on a path allocated before the fork.
    unsafe {
        c.pre_exec(move || {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let written = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if written != 1 {
                return Err(err);
            }
            Ok(())
        });
    }
}

/// The `xshell` shell that one-shot `cmd!` templates are written against (its working directory is
/// the process's; the command itself runs through [`Cmd`]).
pub fn shell() -> Result<xshell::Shell> {
    xshell::Shell::new().context("reading the current directory for a shell")
}

impl From<xshell::Cmd<'_>> for Cmd {
    fn from(cmd: xshell::Cmd<'_>) -> Cmd {
        let std: std::process::Command = cmd.into();
        let mut out = Cmd::new(std.get_program()).args(std.get_args());
        out.envs.extend(
            std.get_envs()
                .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned))),
        );
        out.dir = std.get_current_dir().map(Path::to_path_buf);
        out
    }
}

/// What a finished command returned.
#[derive(Debug)]
pub struct Output {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
}

impl Cmd {
    /// A command of `program`; it starts with the offline flags in its environment
    /// ([`crate::offline::child_env`]), so no child misses `--offline`.
    pub fn new(program: impl AsRef<OsStr>) -> Cmd {
        Cmd {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            envs: crate::offline::child_env()
                .into_iter()
                .map(|(k, v)| (k.into(), Some(v)))
                .collect(),
            dir: None,
            cgroup_procs: None,
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Cmd {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Cmd {
        self.envs
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Cmd {
        self.envs.push((key.as_ref().to_owned(), None));
        self
    }

    /// Runs the program inside the cgroup whose `cgroup.procs` file is `procs` (the child moves
    /// itself there between fork and exec, so nothing it starts escapes the group).
    pub fn in_cgroup(mut self, procs: impl AsRef<Path>) -> Cmd {
        self.cgroup_procs = Some(procs.as_ref().to_path_buf());
        self
    }

    pub fn dir(mut self, dir: impl AsRef<Path>) -> Cmd {
        self.dir = Some(dir.as_ref().to_owned());
        self
    }

    /// `prog arg1 arg2`, quoted where needed, for messages and logs (never executed).
    pub fn display(&self) -> String {
        self.display_with(usize::MAX)
    }

    /// [`Cmd::display`] for a message: an argument longer than 160 characters (a script passed
    /// with `-c`) is shown by its start and size, so an error stays a line, not the script.
    pub fn display_bounded(&self) -> String {
        self.display_with(160)
    }

    fn display_with(&self, limit: usize) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| {
                let s = a.to_string_lossy();
                let s = if s.chars().count() > limit {
                    let start: String = s.chars().take(40).collect();
                    let start = start.lines().next().unwrap_or_default().to_string();
                    std::borrow::Cow::Owned(format!("{start}… ({} bytes)", s.len()))
                } else {
                    s
                };
                if s.is_empty()
                    || s.contains(|c: char| c.is_whitespace() || "'\"$;&|<>()".contains(c))
                {
                    format!("'{}'", s.replace('\'', r"'\''"))
                } else {
                    s.into_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn std_command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(&self.program);
        c.args(&self.args);
        for (k, v) in &self.envs {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        if let Some(d) = &self.dir {
            c.current_dir(d);
        }
        if let Some(procs) = &self.cgroup_procs {
            join_cgroup_before_exec(&mut c, procs);
        }
        c
    }

    /// Runs to completion and captures both streams; a non-zero exit is returned, not an error.
    pub fn output(&self) -> Result<Output> {
        let out = self
            .std_command()
            .stdin(std::process::Stdio::null())
            .output()
            .with_context(|| format!("could not start `{}`", self.display_bounded()))?;
        Ok(Output {
            status: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Runs to completion with stderr written to `log` as it comes (a long run's full record on
    /// disk) and stdout captured; the returned `stderr` is empty.
    pub fn output_logging_stderr(&self, log: &Path) -> Result<Output> {
        let file = std::fs::File::create(log)
            .with_context(|| format!("creating the log {}", log.display()))?;
        let out = self
            .std_command()
            .stdin(std::process::Stdio::null())
            .stderr(file)
            .output()
            .with_context(|| format!("could not start `{}`", self.display_bounded()))?;
        Ok(Output {
            status: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::new(),
        })
    }

    /// Runs and returns trimmed stdout; a non-zero exit is an error that quotes stderr.
    pub fn read(&self) -> Result<String> {
        let out = self.output()?;
        if !out.success() {
            bail!("{}", self.failure_message(&out));
        }
        Ok(out.stdout.trim_end().to_string())
    }

    /// Runs with inherited stdout/stderr (the user sees the tool's own progress); error on failure.
    pub fn run_inherit(&self) -> Result<()> {
        let status = self
            .std_command()
            .stdin(std::process::Stdio::null())
            .status()
            .with_context(|| format!("could not start `{}`", self.display_bounded()))?;
        if !status.success() {
            bail!("`{}` failed with {}", self.display_bounded(), status);
        }
        Ok(())
    }

    /// Runs with the child's stdout and stderr both sent to our stderr: the user sees a tool's own
    /// progress, and our stdout stays clean for `--json`. Error on failure.
    pub fn run_progress(&self) -> Result<()> {
        let status = self
            .std_command()
            .stdin(std::process::Stdio::null())
            .stdout(std::io::stderr())
            .status()
            .with_context(|| format!("could not start `{}`", self.display_bounded()))?;
        if !status.success() {
            bail!("`{}` failed with {}", self.display_bounded(), status);
        }
        Ok(())
    }

    /// Streams merged stdout+stderr line by line to `on_line` while the command runs (long builds).
    /// Returns the exit code; the caller decides what a failure means and which line to show.
    pub fn stream_lines(&self, mut on_line: impl FnMut(&str)) -> Result<Option<i32>> {
        self.stream_lines_until(|line| {
            on_line(line);
            Stream::Continue
        })
    }

    /// [`Cmd::stream_lines`], where `on_line` may end the run: after [`Stream::EndSoon`], the
    /// command and every process below it get SIGTERM a second later (the output that line
    /// begins still arrives), and the lines are read to the end.
    pub fn stream_lines_until(
        &self,
        mut on_line: impl FnMut(&str) -> Stream,
    ) -> Result<Option<i32>> {
        let mut expr = duct::cmd(&self.program, &self.args)
            .stderr_to_stdout()
            .stdin_null()
            .unchecked();
        // The last setting of a variable wins, as with std's Command (`output`); duct alone would
        // let the first win (its innermost expression), so settings are collapsed first.
        let mut last: Vec<(&OsString, &Option<OsString>)> = Vec::new();
        for (k, v) in self.envs.iter().rev() {
            if !last.iter().any(|(seen, _)| *seen == k) {
                last.push((k, v));
            }
        }
        for (k, v) in last {
            expr = match v {
                Some(v) => expr.env(k, v),
                None => expr.env_remove(k),
            };
        }
        if let Some(d) = &self.dir {
            expr = expr.dir(d);
        }
        if let Some(procs) = self.cgroup_procs.clone() {
            expr = expr.before_spawn(move |c| {
                join_cgroup_before_exec(c, &procs);
                Ok(())
            });
        }
        let reader = expr
            .reader()
            .with_context(|| format!("could not start `{}`", self.display_bounded()))?;
        let root = reader.pids().first().copied();
        std::thread::scope(|s| -> Result<()> {
            // Dropped when the output ends: a stop still pending is called off, since the child
            // may be reaped by then and its pid another process's.
            let (ended_tx, ended_rx) = std::sync::mpsc::channel::<()>();
            let mut ended_rx = Some(ended_rx);
            let mut buf = BufReader::new(&reader);
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = buf
                    .read_until(b'\n', &mut line)
                    .with_context(|| format!("reading output of `{}`", self.display_bounded()))?;
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&line);
                let asked = on_line(text.trim_end_matches(['\n', '\r']));
                if let (Stream::EndSoon(_), Some(root)) = (asked, root) {
                    if let Some(rx) = ended_rx.take() {
                        s.spawn(move || {
                            let wait = std::time::Duration::from_secs(1);
                            if rx.recv_timeout(wait) == Err(RecvTimeoutError::Timeout) {
                                crate::interrupts::signal_tree(root as libc::pid_t, libc::SIGTERM);
                            }
                        });
                    }
                }
            }
            drop(ended_tx);
            Ok(())
        })?;
        let status = reader
            .try_wait()
            .context("waiting for child")?
            .map(|o| o.status.code())
            .unwrap_or(None);
        Ok(status)
    }

    /// Starts the command now with a pipe on its stdin and returns at once; [`Running::finish`]
    /// later writes its input and collects its output. For work that can start before its input
    /// exists (a Python process that imports torch while a build runs, told what to import at the
    /// end). Dropping a [`Running`] without finishing it kills the process.
    pub fn spawn_piped(&self) -> Result<Running> {
        let child = self
            .std_command()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("could not start `{}`", self.display_bounded()))?;
        Ok(Running {
            cmd: self.clone(),
            child: Some(child),
        })
    }

    /// Starts the command in the background with stdout and stderr appended to `log`, for a
    /// service the caller stops (a loopback sccache-dist scheduler and server). [`Service`] kills
    /// the process when dropped.
    pub fn spawn_service(&self, log: &Path) -> Result<Service> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let err = file
            .try_clone()
            .with_context(|| format!("opening {}", log.display()))?;
        let child = self
            .std_command()
            .stdin(std::process::Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .with_context(|| format!("could not start `{}`", self.display_bounded()))?;
        Ok(Service {
            cmd: self.clone(),
            child,
            log: log.to_path_buf(),
        })
    }

    /// The message for a failed command: what ran, its exit code, and the end of stderr.
    pub fn failure_message(&self, out: &Output) -> String {
        let code = out
            .status
            .map_or("a signal".to_string(), |c| format!("exit code {c}"));
        let stderr = out.stderr.trim();
        let tail: Vec<&str> = stderr
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if tail.is_empty() {
            format!("`{}` failed with {code}", self.display_bounded())
        } else {
            format!(
                "`{}` failed with {code}:\n{}",
                self.display_bounded(),
                tail.join("\n")
            )
        }
    }
}

/// A background process started by [`Cmd::spawn_service`]; killed when dropped.
#[derive(Debug)]
pub struct Service {
    cmd: Cmd,
    child: std::process::Child,
    log: PathBuf,
}

impl Service {
    /// The exit status if it has already ended (a service that should be running).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// What ran, and the end of its log, for a message about a service that stopped.
    pub fn describe(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "`{}` (log {}):\n{}",
            self.cmd.display(),
            self.log.display(),
            tail.join("\n")
        )
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A command started by [`Cmd::spawn_piped`], waiting for its input.
#[derive(Debug)]
pub struct Running {
    cmd: Cmd,
    child: Option<std::process::Child>,
}

impl Running {
    /// The command, for messages.
    pub fn cmd(&self) -> &Cmd {
        &self.cmd
    }

    /// Writes `input` to stdin, closes it, and waits for the process to end.
    pub fn finish(mut self, input: &str) -> Result<Output> {
        use std::io::Write;
        let mut child = self.child.take().context("process already finished")?;
        if let Some(mut stdin) = child.stdin.take() {
            // A process that exited early (e.g. its own start-up failed) closed the pipe; its
            // exit status and stderr below say why, so a broken pipe is not the error to show.
            let _ = stdin.write_all(input.as_bytes());
        }
        let out = child
            .wait_with_output()
            .with_context(|| format!("waiting for `{}`", self.cmd.display()))?;
        Ok(Output {
            status: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Finds `name` on PATH, like `which`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// What the kernel counted for this process (`RUSAGE_SELF`) or for every child it has waited for,
/// their waited-for descendants included (`RUSAGE_CHILDREN`): CPU seconds (user + system) and the
/// largest resident set in bytes (for children: of the largest single process, not their sum).
pub fn rusage(children: bool) -> Option<(f64, u64)> {
    let who = if children {
        libc::RUSAGE_CHILDREN
    } else {
        libc::RUSAGE_SELF
    };
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes the struct it is handed; it is read only when the call succeeded.
    if unsafe { libc::getrusage(who, usage.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: filled by the successful call above (and zeroed before it).
    let usage = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    // Linux reports ru_maxrss in KiB.
    Some((
        secs(usage.ru_utime) + secs(usage.ru_stime),
        (usage.ru_maxrss.max(0) as u64) * 1024,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cmd!` templates become [`Cmd`]s with the same program, arguments (an interpolated value
    /// stays one argument, spaces and all), environment and directory, and fail like any other.
    #[test]
    fn xshell_templates_run_through_the_one_runner() {
        let sh = shell().unwrap();
        let word = "two words";
        let many = ["a", "b"];
        let cmd = Cmd::from(xshell::cmd!(sh, "printf %s| {word} {many...}").env("K", "v"));
        assert_eq!(cmd.display(), "printf '%s|' 'two words' a b");
        assert_eq!(cmd.read().unwrap(), "two words|a|b|");
        let failing = Cmd::from(xshell::cmd!(sh, "sh -c 'exit 3'"));
        let e = failing.read().unwrap_err().to_string();
        assert!(e.contains("sh -c"), "{e}");
    }

    #[test]
    fn a_piped_process_gets_its_input_late_and_is_killed_when_dropped() {
        let r = Cmd::new("sh")
            .args(["-c", "read x; echo got $x; echo err >&2"])
            .spawn_piped()
            .unwrap();
        let out = r.finish("it\n").unwrap();
        assert!(out.success());
        assert_eq!(
            (out.stdout.as_str(), out.stderr.as_str()),
            ("got it\n", "err\n")
        );
        // A process that never gets its input does not outlive its handle.
        let t = std::time::Instant::now();
        let r = Cmd::new("sleep").arg("30").spawn_piped().unwrap();
        let pid = r.child.as_ref().unwrap().id();
        drop(r);
        assert!(t.elapsed().as_secs() < 5);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn captures_output_and_reports_failures_with_the_command() {
        assert_eq!(Cmd::new("sh").args(["-c", "echo hi"]).read().unwrap(), "hi");
        let err = Cmd::new("sh")
            .args(["-c", "echo boom >&2; exit 3"])
            .read()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("exit code 3")
                && err.contains("boom")
                && err.contains("'echo boom >&2; exit 3'"),
            "{err}"
        );
    }

    /// A variable set twice has its last value, streamed or not (build-ext sets the toolkit's
    /// CUDA_HOME, then the arch guard's over it).
    #[test]
    fn the_last_setting_of_a_variable_wins_in_every_runner() {
        let cmd = Cmd::new("sh")
            .args(["-c", "echo ${K-unset}"])
            .env("K", "first")
            .env("K", "last");
        assert_eq!(cmd.read().unwrap(), "last");
        let mut lines = Vec::new();
        cmd.stream_lines(|l| lines.push(l.to_string())).unwrap();
        assert_eq!(lines, ["last"]);
        let removed = Cmd::new("sh")
            .args(["-c", "echo ${K-unset}"])
            .env("K", "first")
            .env_remove("K");
        let mut lines = Vec::new();
        removed.stream_lines(|l| lines.push(l.to_string())).unwrap();
        assert_eq!(lines, ["unset"]);
    }

    #[test]
    fn streams_lines_in_order() {
        let mut lines = Vec::new();
        let code = Cmd::new("sh")
            .args(["-c", "echo a; echo b >&2; echo c; exit 4"])
            .stream_lines(|l| lines.push(l.to_string()))
            .unwrap();
        assert_eq!(code, Some(4));
        assert_eq!(lines, ["a", "b", "c"]);
    }

    #[test]
    fn missing_program_is_a_clear_error() {
        let err = Cmd::new("definitely-not-a-program-xyz")
            .output()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("could not start `definitely-not-a-program-xyz`"),
            "{err}"
        );
    }
}
