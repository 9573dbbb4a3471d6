//! One pool of job slots that several builds share: the packages of a tree built at once
//! (`port-extension --src ROOT`), as a package's extensions share one in the build hooks
//! (crates/workflows/src/build_ext/build_hooks/archsmith_job_pool.py).
//!
//! The pool is a GNU make jobserver: a named pipe holding one token per slot. A build starts
//! when its driver takes a token (the build's own slot, which its compiles use first), and each
//! build's ninja (≥ 1.13 joins a jobserver through `MAKEFLAGS`; `MAX_JOBS` must then be unset,
//! or ninja ignores it) takes further tokens for further compiles, so all builds together never
//! run more compiles than slots, and a build left alone widens into every slot. The driver
//! itself compiles nothing, so, unlike make, it keeps no implicit slot: the pipe holds all of
//! them. The builds' compiles also draw on one memory ledger
//! ([`crate::build_insight::memory_gate`]), so two builds never reserve the same memory.
//!
//! Where the build's ninja is older (no jobserver client), each build gets `MAX_JOBS=1`: its one
//! slot; the pool then still bounds the compiles, without widening.

use anyhow::{Context, Result};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The variable naming the pool's pipe to the build hooks' own pool, which joins it instead of
/// making one (a package of several extensions inside a tree's pool).
pub const POOL_VAR: &str = "ARCHSMITH_JOB_POOL";

/// The pool, owned by the driver that made it; the pipe goes when it is dropped.
#[derive(Debug)]
pub struct JobPool {
    pipe: File,
    share: PoolShare,
    _dir: tempfile::TempDir,
}

/// What a build needs to join a pool: its pipe, its size and its memory ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolShare {
    pub fifo: PathBuf,
    pub slots: u32,
    pub ledger: PathBuf,
    /// The memory budget of every compile in the pool, in bytes.
    pub budget: u64,
}

/// A slot taken from the pool; dropping it gives it back.
#[derive(Debug)]
pub struct Slot<'p> {
    pool: &'p JobPool,
    token: u8,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        // The pipe holds at most `slots` bytes: this write never blocks.
        let _ = (&self.pool.pipe).write_all(&[self.token]);
    }
}

impl JobPool {
    /// A pool of `slots` job slots (at least one) in a new directory under `parent`, whose
    /// compiles share `budget` bytes of memory.
    pub fn new(parent: &Path, slots: u32, budget: u64) -> Result<JobPool> {
        let slots = slots.max(1);
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
        let dir = tempfile::Builder::new()
            .prefix("job-pool-")
            .tempdir_in(parent)
            .with_context(|| {
                format!("creating the job pool's directory in {}", parent.display())
            })?;
        let fifo = dir.path().join("jobserver.fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes())
            .context("the job pool's path holds a NUL byte")?;
        // SAFETY: `c` is a valid NUL-terminated path; mkfifo only creates the node.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("creating the job pool's pipe {}", fifo.display()));
        }
        // Read and write: the pipe never reads end-of-file while the pool lives, and opening it
        // does not wait for a peer.
        let mut pipe = File::options()
            .read(true)
            .write(true)
            .open(&fifo)
            .with_context(|| format!("opening the job pool's pipe {}", fifo.display()))?;
        pipe.write_all(&vec![b'+'; slots as usize])
            .context("filling the job pool")?;
        let ledger = dir.path().join("memory-ledger");
        Ok(JobPool {
            pipe,
            share: PoolShare {
                fifo,
                slots,
                ledger,
                budget,
            },
            _dir: dir,
        })
    }

    pub fn share(&self) -> &PoolShare {
        &self.share
    }

    /// A slot, waiting until one is free.
    pub fn take(&self) -> Result<Slot<'_>> {
        let mut token = [0u8; 1];
        (&self.pipe)
            .read_exact(&mut token)
            .context("taking a slot from the job pool")?;
        Ok(Slot {
            pool: self,
            token: token[0],
        })
    }
}

impl PoolShare {
    /// The variables that make a build join the pool; `joins`: the build's ninja is a jobserver
    /// client ([`ninja_joins_jobservers`]). With them, the build must not set `MAX_JOBS`
    /// ([`PoolShare::max_jobs`]).
    pub fn env(&self, joins: bool) -> Vec<(String, String)> {
        let mut vars = vec![(POOL_VAR.to_string(), self.fifo.display().to_string())];
        if joins {
            vars.push((
                "MAKEFLAGS".into(),
                format!(
                    " -j{} --jobserver-auth=fifo:{}",
                    self.slots,
                    self.fifo.display()
                ),
            ));
        }
        vars
    }

    /// The build's `MAX_JOBS`: none where its ninja joins the pool (a `-j` would make it ignore
    /// the pool), else 1, the one slot its driver took.
    pub fn max_jobs(&self, joins: bool) -> Option<u32> {
        match joins {
            true => None,
            false => Some(1),
        }
    }
}

/// Whether `ninja` is a jobserver client: 1.13 or newer (`ninja --version`).
pub fn ninja_joins_jobservers(ninja: &Path) -> bool {
    let Ok(out) = crate::process::Cmd::new(ninja).arg("--version").read() else {
        return false;
    };
    version_joins(&out)
}

/// `1.13.2.git.kitware.jobserver-pipe-1` → true; `1.11.1` → false.
fn version_joins(version: &str) -> bool {
    let mut parts = version.trim().split('.').map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor) >= (1, 13),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_hands_out_its_slots_and_takes_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let pool = JobPool::new(dir.path(), 2, 1 << 30).unwrap();
        let readable = || {
            let mut n: libc::c_int = 0;
            let fd = std::os::fd::AsRawFd::as_raw_fd(&pool.pipe);
            // SAFETY: FIONREAD writes the pipe's readable byte count into `n`.
            assert_eq!(
                unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n as *mut libc::c_int) },
                0
            );
            n
        };
        let a = pool.take().unwrap();
        let b = pool.take().unwrap();
        // Both slots taken: the pipe is empty (what a third build or compile would wait on).
        assert_eq!(readable(), 0);
        drop(a);
        assert_eq!(readable(), 1);
        drop(b);
        assert_eq!(readable(), 2);
        let share = pool.share().clone();
        assert!(share.fifo.exists());
        drop(pool);
        assert!(!share.fifo.exists(), "the pipe goes with the pool");
    }

    #[test]
    fn a_waiting_build_starts_when_a_slot_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let pool = JobPool::new(dir.path(), 1, 1 << 30).unwrap();
        let held = pool.take().unwrap();
        let started = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _slot = pool.take().unwrap();
                started.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            std::thread::sleep(std::time::Duration::from_millis(200));
            assert!(!started.load(std::sync::atomic::Ordering::SeqCst));
            drop(held);
        });
        assert!(started.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn ninja_joins_a_pool_from_1_13_on() {
        assert!(version_joins("1.13.2.git.kitware.jobserver-pipe-1\n"));
        assert!(version_joins("1.13.0"));
        assert!(!version_joins("1.11.1.git.kitware.jobserver-1"));
        assert!(!version_joins(""));
        let share = PoolShare {
            fifo: "/x/jobserver.fifo".into(),
            slots: 4,
            ledger: "/x/memory-ledger".into(),
            budget: 1,
        };
        assert_eq!(share.max_jobs(false), Some(1));
        assert_eq!(
            share.env(false),
            [(POOL_VAR.into(), "/x/jobserver.fifo".into())]
        );
    }
}
