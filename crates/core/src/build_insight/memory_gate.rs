//! A pool of memory every compile of a build draws from: a compile starts only when the memory it
//! is expected to take (its peak in an earlier build, else the per-kind estimate) fits under the
//! build's budget beside what the compiles already running reserved, and under what is free now;
//! otherwise it waits for one of them to end, instead of starting and being killed. A compile
//! alone always starts (there is nothing to wait for); if even that does not fit, the kill is
//! named for what it is.
//!
//! The ledger is a directory: one `PID.slot` file per running compile holding the bytes it
//! reserved, read and written under the directory's lock; a slot whose process is gone (killed
//! before it could remove it) is dropped by the next reader. ninja and setuptools know nothing of
//! it: the compile wrapper every compile passes through asks it (build_ext/arch_guard.rs).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The ledger's directory.
pub const LEDGER_VAR: &str = "ARCHSMITH_MEMORY_LEDGER";
/// The build's memory budget in bytes: what was free for builds when it started.
pub const BUDGET_VAR: &str = "ARCHSMITH_MEMORY_BUDGET";
/// Set on an admitted compile's process: its reservation already counts it.
pub const ADMITTED_VAR: &str = "ARCHSMITH_MEMORY_ADMITTED";

/// A build's memory pool.
#[derive(Debug, Clone)]
pub struct Gate {
    dir: PathBuf,
    pub budget: u64,
}

/// Whether a compile may start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Start,
    /// Why it waits, in a sentence.
    Wait(String),
}

/// A running compile's place in the pool; leaving it (drop) gives its memory back.
#[derive(Debug)]
pub struct Admission {
    pub waited_ms: u64,
    slot: PathBuf,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.slot);
    }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0 * 1024.0)
}

/// The rule: `reserved` are the reservations of the compiles running now, `live_available` the
/// memory free now (the tighter of MemAvailable and the cgroup's room).
pub fn verdict(budget: u64, reserved: &[u64], bytes: u64, live_available: u64) -> Verdict {
    if reserved.is_empty() {
        return Verdict::Start;
    }
    let taken: u64 = reserved.iter().sum();
    if taken.saturating_add(bytes) > budget {
        return Verdict::Wait(format!(
            "needs {:.2} GiB; {} running compile(s) reserved {:.2} GiB of the build's {:.2} GiB",
            gib(bytes),
            reserved.len(),
            gib(taken),
            gib(budget)
        ));
    }
    if bytes > live_available {
        return Verdict::Wait(format!(
            "needs {:.2} GiB; {:.2} GiB is free now",
            gib(bytes),
            gib(live_available)
        ));
    }
    Verdict::Start
}

/// Whether process `pid` still runs.
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

impl Gate {
    pub fn new(dir: PathBuf, budget: u64) -> Gate {
        Gate { dir, budget }
    }

    /// A build's budget: what is free for builds now (`mem_available_gib`), less what is left
    /// for the rest of the machine.
    pub fn budget_for(mem_available_gib: f64, reserve_gib: f64) -> u64 {
        ((mem_available_gib - reserve_gib).max(0.25) * 1024.0 * 1024.0 * 1024.0) as u64
    }

    /// The gate of the build this process runs in, when it has one.
    pub fn from_env() -> Option<Gate> {
        Gate::from_vars(&|k| std::env::var(k).ok())
    }

    /// [`Self::from_env`] over `var`. None inside a compile already admitted ([`ADMITTED_VAR`]):
    /// a compiler launcher whose nvcc is the guard's own wrapper runs a second guard for the same
    /// compile, which, waiting for a reservation while the first holds one, waited forever when
    /// the budget held one compile (a loaded machine).
    fn from_vars(var: &dyn Fn(&str) -> Option<String>) -> Option<Gate> {
        if var(ADMITTED_VAR).is_some() {
            return None;
        }
        let dir = var(LEDGER_VAR)?;
        let budget = var(BUDGET_VAR)?.parse().ok()?;
        Some(Gate::new(dir.into(), budget))
    }

    /// The variables that hand this gate to a build's compiles.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (LEDGER_VAR.into(), self.dir.display().to_string()),
            (BUDGET_VAR.into(), self.budget.to_string()),
        ]
    }

    /// The reservations of the compiles running now (dropping those of processes gone).
    fn running(&self) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)
            .with_context(|| format!("reading the memory ledger {}", self.dir.display()))?
            .flatten()
        {
            let p = e.path();
            let Some(pid) = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".slot"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if !alive(pid) {
                let _ = std::fs::remove_file(&p);
                continue;
            }
            if let Some(b) = std::fs::read_to_string(&p)
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                out.push(b);
            }
        }
        Ok(out)
    }

    /// One look at the ledger: the verdict for `bytes`, and the slot taken when it starts.
    pub fn try_admit(&self, bytes: u64, live_available: u64) -> Result<(Verdict, Option<PathBuf>)> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating the memory ledger {}", self.dir.display()))?;
        let _lock = crate::cache::lock(&self.dir.join("lock"), &mut || {})?;
        let v = verdict(self.budget, &self.running()?, bytes, live_available);
        if v != Verdict::Start {
            return Ok((v, None));
        }
        let slot = self.dir.join(format!("{}.slot", std::process::id()));
        std::fs::write(&slot, bytes.to_string())
            .with_context(|| format!("writing {}", slot.display()))?;
        Ok((v, Some(slot)))
    }

    /// Waits until a compile reserving `bytes` may start and takes its slot; `waiting` hears
    /// the first reason it waits.
    pub fn admit(&self, bytes: u64, waiting: &mut dyn FnMut(&str)) -> Result<Admission> {
        let started = Instant::now();
        let mut said = false;
        loop {
            let live = (crate::host::memory().available_gib() * 1024.0 * 1024.0 * 1024.0) as u64;
            match self.try_admit(bytes, live)? {
                (_, Some(slot)) => {
                    // Waited: refused at least once. Taking the lock and reading the memory on
                    // the first look costs a few ms, which is not a wait for memory.
                    let waited_ms = match said {
                        true => started.elapsed().as_millis() as u64,
                        false => 0,
                    };
                    return Ok(Admission { waited_ms, slot });
                }
                (Verdict::Wait(why), None) if !said => {
                    waiting(&why);
                    said = true;
                }
                _ => {}
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1024 * 1024 * 1024;

    /// A compile already admitted (its process marked) is not admitted again by a guard it
    /// runs: the nested guard deadlocked a recipe-less port on a loaded machine.
    #[test]
    fn a_compile_inside_an_admitted_one_is_not_gated_again() {
        let vars = |admitted: bool| {
            move |k: &str| match k {
                LEDGER_VAR => Some("/ledger".to_string()),
                BUDGET_VAR => Some("1024".to_string()),
                ADMITTED_VAR if admitted => Some("1".to_string()),
                _ => None,
            }
        };
        let gate = Gate::from_vars(&vars(false)).expect("a build's gate");
        assert_eq!(
            (gate.dir.as_path(), gate.budget),
            (Path::new("/ledger"), 1024)
        );
        assert!(Gate::from_vars(&vars(true)).is_none());
    }

    #[test]
    fn a_compile_waits_while_it_would_not_fit_and_runs_alone_whatever_its_size() {
        assert_eq!(verdict(4 * G, &[], 9 * G, 0), Verdict::Start);
        assert_eq!(verdict(4 * G, &[2 * G], 2 * G, 8 * G), Verdict::Start);
        let Verdict::Wait(why) = verdict(4 * G, &[2 * G, G], 2 * G, 8 * G) else {
            panic!("3 + 2 GiB under 4 must wait");
        };
        assert_eq!(
            why,
            "needs 2.00 GiB; 2 running compile(s) reserved 3.00 GiB of the build's 4.00 GiB"
        );
        // Under the budget but not free now (something outside the pool took it).
        assert!(matches!(verdict(8 * G, &[G], 2 * G, G), Verdict::Wait(_)));
    }

    #[test]
    fn the_ledger_holds_a_slot_per_running_compile_and_forgets_dead_ones() {
        let d = tempfile::tempdir().unwrap();
        let gate = Gate::new(d.path().join("ledger"), 3 * G);
        let (v, slot) = gate.try_admit(2 * G, 8 * G).unwrap();
        assert_eq!(v, Verdict::Start);
        let first = Admission {
            waited_ms: 0,
            slot: slot.unwrap(),
        };
        // This process holds 2 GiB: another 2 GiB waits (same pid, but the rule is the sum).
        let (v, slot) = gate.try_admit(2 * G, 8 * G).unwrap();
        assert!(matches!(v, Verdict::Wait(_)) && slot.is_none(), "{v:?}");
        drop(first);
        assert_eq!(gate.try_admit(2 * G, 8 * G).unwrap().0, Verdict::Start);
        // A slot left by a process that is gone does not hold memory.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        std::fs::remove_file(gate.dir().join(format!("{}.slot", std::process::id()))).unwrap();
        std::fs::write(gate.dir().join(format!("{pid}.slot")), (3 * G).to_string()).unwrap();
        assert_eq!(gate.try_admit(2 * G, 8 * G).unwrap().0, Verdict::Start);
        assert!(!gate.dir().join(format!("{pid}.slot")).exists());
    }
}
