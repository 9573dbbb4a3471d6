//! Progress for a running build, from ninja's `[N/M]` lines: a bar with elapsed time and ETA on a
//! terminal, one plain line per finished step otherwise, nothing in quiet mode.
//!
//! setuptools builds one extension after another, each with its own ninja run, so the bar starts
//! over at each `building 'pkg.mod' extension` line and names the extension.

use super::log::{ninja_step, step_file};
use super::step_weights::{Pace, StepKind, StepPlan};
use crate::process::{Cmd, Stream};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A bar when stderr is a terminal, plain lines when it is not.
    Auto,
    Plain,
    Quiet,
}

pub struct Progress {
    bar: Option<ProgressBar>,
    plain: bool,
    started: Instant,
    step_started: Instant,
    extension: Option<String>,
    /// What the bar names when no extension is being built (`extension`, `torch`).
    label: &'static str,
    /// A build directory whose `build.ninja` and earlier `.ninja_log` weigh the ETA (build-torch).
    steps: Option<Steps>,
    /// build-ext's hooks build several extensions at once: each one's output arrives whole when it
    /// ends, so its `building`/`[n/m]` lines are history (kept in the log), not progress.
    pooled: bool,
}

/// The weighted ETA's state: where to read the plan (once `build.ninja` exists), the plan, and
/// the steps done by kind.
struct Steps {
    build_dir: std::path::PathBuf,
    earlier_log: Option<String>,
    plan: Option<StepPlan>,
    done: [usize; 4],
    pace: Pace,
}

fn fmt_secs(s: f64) -> String {
    let s = s.round() as u64;
    format!("{}:{:02}", s / 60, s % 60)
}

impl Progress {
    pub fn new(mode: Mode) -> Progress {
        Progress::labelled(mode, "extension")
    }

    /// A progress whose steps are named `label` until a `building 'x'` line names them.
    pub fn labelled(mode: Mode, label: &'static str) -> Progress {
        let tty = std::io::stderr().is_terminal();
        let bar = (mode == Mode::Auto && tty).then(|| {
            let b = ProgressBar::with_draw_target(Some(1), ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} (eta {eta}) {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.set_position(0);
            b.set_message("preparing");
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Progress {
            bar,
            plain: mode == Mode::Plain || (mode == Mode::Auto && !tty),
            started: Instant::now(),
            step_started: Instant::now(),
            extension: None,
            label,
            steps: None,
            pooled: false,
        }
    }

    /// Weighs the ETA by the steps `build_dir`'s `build.ninja` still has to run, each kind at
    /// what it took in the `.ninja_log` of earlier runs (read now, before this run adds to it).
    pub fn weighing_steps_of(mut self, build_dir: &Path) -> Progress {
        self.steps = Some(Steps {
            build_dir: build_dir.to_path_buf(),
            earlier_log: std::fs::read_to_string(build_dir.join(".ninja_log")).ok(),
            plan: None,
            done: [0; 4],
            pace: Pace::default(),
        });
        self
    }

    /// The weighted estimate of the time left, after a finished step described by `line`.
    fn weighted_eta(&mut self, line: &str, elapsed: f64) -> Option<f64> {
        let steps = self.steps.as_mut()?;
        if steps.plan.is_none() {
            steps.plan = StepPlan::read(&steps.build_dir, steps.earlier_log.as_deref());
        }
        steps.done[StepKind::of_line(line).index()] += 1;
        steps
            .plan
            .as_ref()?
            .eta(&steps.done, elapsed, &mut steps.pace)
    }

    /// Runs `cmd` with each output line written to `log` (at `log_path`), shown as progress and
    /// handed to `on_line`, which may end the run ([`Stream::EndSoon`], its reason logged); a
    /// log that cannot be written is an error once the run has ended (the build is not cut short
    /// for it). Returns the exit status.
    pub fn stream_logged(
        mut self,
        cmd: &Cmd,
        log: &mut impl Write,
        log_path: &Path,
        mut on_line: impl FnMut(&str) -> Stream,
    ) -> Result<Option<i32>> {
        let mut write_err = None;
        let mut ending = false;
        let status = cmd.stream_lines_until(|line| {
            if let Err(e) = writeln!(log, "{line}") {
                write_err.get_or_insert(e);
            }
            self.line(line);
            let asked = on_line(line);
            if let (Stream::EndSoon(why), false) = (asked, ending) {
                ending = true;
                // Said in the log, where the lines after this one end abruptly.
                if let Err(e) = writeln!(log, "archsmith: {why}") {
                    write_err.get_or_insert(e);
                }
            }
            asked
        })?;
        self.finish();
        match write_err {
            Some(e) => Err(e).with_context(|| format!("writing {}", log_path.display())),
            None => Ok(status),
        }
    }

    pub fn line(&mut self, line: &str) {
        if let Some(text) = self.render(line) {
            if self.plain {
                crate::errln!("{text}");
            }
        }
    }

    /// Moves the bar for one line of the build's output; returns the plain line it is worth.
    fn render(&mut self, line: &str) -> Option<String> {
        // Only the lines worth one are stamped (a build prints thousands of others).
        let started = self.started;
        let at = || fmt_secs(started.elapsed().as_secs_f64());
        // build-ext's hooks building several extensions at once: their start/done lines are the
        // progress.
        if let Some(rest) = line.strip_prefix("archsmith-ext: ") {
            if rest.starts_with("building ") {
                self.pooled = true;
            }
            if let Some(b) = &self.bar {
                b.set_message(rest.to_string());
                if let Some((done, total)) = extension_count(rest) {
                    b.set_length(total);
                    b.set_position(done);
                }
            }
            self.extension = None;
            return Some(format!("  [{}] {rest}", at()));
        }
        if self.pooled {
            return None;
        }
        if let Some(rest) = line.strip_prefix("building '") {
            let name = rest.split('\'').next().unwrap_or(rest).to_string();
            if let Some(b) = &self.bar {
                b.reset();
                b.set_length(1);
                b.set_message(format!("{name}: starting"));
            }
            self.step_started = Instant::now();
            let text = format!("  [{}] building {name}", at());
            self.extension = Some(name);
            return Some(text);
        }
        let (n, m) = ninja_step(line)?;
        let what = step_file(line).unwrap_or("link");
        let step_elapsed = self.step_started.elapsed().as_secs_f64();
        let weighted = self.weighted_eta(line, step_elapsed);
        let ext = self.extension.as_deref().unwrap_or(self.label);
        if let Some(b) = &self.bar {
            b.set_length(m as u64);
            b.set_position(n as u64);
            b.set_message(format!("{ext}: {what} done"));
        }
        let eta = match weighted {
            Some(left) => format!(", ~{} left", fmt_secs(left)),
            None if n > 0 => format!(
                ", ~{} left",
                fmt_secs(step_elapsed / n as f64 * (m - n) as f64)
            ),
            None => String::new(),
        };
        Some(format!("  [{}] {ext} [{n}/{m}] {what}{eta}", at()))
    }

    pub fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// `(k, total)` of a finished extension's `done NAME (k/total, Ns)` line.
fn extension_count(rest: &str) -> Option<(u64, u64)> {
    if !(rest.starts_with("done ") || rest.starts_with("FAILED ")) {
        return None;
    }
    let inner = rest.rsplit_once(" (")?.1;
    let (k, total) = inner.split(',').next()?.split_once('/')?;
    Some((k.parse().ok()?, total.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A build directory's plan weighs the ETA once `build.ninja` exists: a C++ step done leaves
    /// the CUDA step's measured weight, not one more mean step.
    #[test]
    fn the_eta_weighs_the_steps_left_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let mut before = Progress::labelled(Mode::Quiet, "torch").weighing_steps_of(dir.path());
        assert_eq!(
            before.weighted_eta("[1/2] Building CXX object x.cpp.o", 1.0),
            None
        );
        let mut p = Progress::labelled(Mode::Quiet, "torch").weighing_steps_of(dir.path());
        std::fs::write(
            dir.path().join("build.ninja"),
            "build x.cpp.o: CXX_COMPILER__t /s/x.cpp\nbuild k.cu.o: CUDA_COMPILER__t /s/k.cu\n",
        )
        .unwrap();
        // The log of an earlier run read at the start: the CUDA unit took 90 s, the C++ one 10 s.
        p.steps.as_mut().unwrap().earlier_log =
            Some("# ninja log v5\n0\t10000\t0\tx.cpp.o\th\n0\t90000\t0\tk.cu.o\th\n".into());
        let left = p.weighted_eta("[1/2] Building CXX object x.cpp.o", 12.0);
        // Neither output exists, so both are to run: 10 of 100 weight done in 12 s.
        assert_eq!(left, Some(108.0));
    }

    /// With several extensions at once, an extension's output arrives whole when it ends: its
    /// `building`/`[n/m]` lines (an ETA of `~0:00` each) are not progress; start/done lines are.
    #[test]
    fn a_pool_builds_progress_is_its_extensions_not_their_replayed_steps() {
        let step = "[1/2] c++ -c /s/a.cpp -o /b/a.o";
        let mut serial = Progress::new(Mode::Quiet);
        assert!(serial.render("building 'pkg.a' extension").is_some());
        let line = serial.render(step).unwrap();
        assert!(line.ends_with("pkg.a [1/2] a.cpp, ~0:00 left"), "{line}");

        let mut pool = Progress::new(Mode::Quiet);
        let head = pool.render("archsmith-ext: building 2 extensions in one pool of 2 job slots");
        assert!(head
            .unwrap()
            .ends_with("] building 2 extensions in one pool of 2 job slots"));
        assert!(pool.render("archsmith-ext: start pkg.a (1/2)").is_some());
        assert_eq!(pool.render("building 'pkg.a' extension"), None);
        assert_eq!(pool.render(step), None);
        let done = pool.render("archsmith-ext: done pkg.a (1/2, 3s)").unwrap();
        assert!(done.ends_with("] done pkg.a (1/2, 3s)"), "{done}");
    }
}
