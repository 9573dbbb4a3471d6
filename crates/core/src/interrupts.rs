//! Ctrl-C (and `kill`, a closed terminal) held off while a change to the user's files must land
//! whole: a codemod that renames 300 rewritten files into place either finishes the tree or leaves
//! it as it was, never half of it, and never leaves its temporaries behind.
//!
//! While [`Deferred`] lives, SIGINT, SIGTERM and SIGHUP only set a flag (a handler, so every
//! thread of the process is covered, not just the one that would block them). The work asks
//! [`Deferred::interrupted`] at the points where it can still stop cleanly; [`Deferred::end`]
//! restores the handlers and hands back the signal that came, which [`deliver`] then raises
//! with its usual effect (the process ends as the user asked, status 128 + N).
//!
//! A signal the process was started ignoring (`nohup`, `cmd &` in a script without job control)
//! stays ignored: it is not deferred, so it cannot stop the work either (the Unix convention of
//! not catching what the parent chose to ignore).

#[cfg(test)]
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The signals deferred.
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The first deferred signal that arrived (0: none).
static ARRIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(sig: libc::c_int) {
    // Async-signal-safe: one atomic store.
    let _ = ARRIVED.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
}

/// The deferral; the handlers it replaced come back on [`Deferred::end`] or drop.
pub struct Deferred {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl Deferred {
    /// Defers SIGINT, SIGTERM and SIGHUP from now on.
    pub fn start() -> Deferred {
        ARRIVED.store(0, Ordering::SeqCst);
        let mut old = Vec::new();
        for sig in SIGNALS {
            // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe; `prev` is
            // written by the kernel before it is read.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = note as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut action.sa_mask);
                action.sa_flags = libc::SA_RESTART;
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut prev) != 0
                    || prev.sa_sigaction == libc::SIG_IGN
                {
                    continue;
                }
                if libc::sigaction(sig, &action, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        Deferred { old }
    }

    /// The signal that arrived since [`Deferred::start`], if one did.
    pub fn interrupted(&self) -> Option<i32> {
        match ARRIVED.load(Ordering::SeqCst) {
            0 => None,
            sig => Some(sig),
        }
    }

    /// Restores the handlers; the signal that arrived meanwhile, for [`deliver`].
    pub fn end(mut self) -> Option<i32> {
        self.restore();
        match ARRIVED.swap(0, Ordering::SeqCst) {
            0 => None,
            sig => Some(sig),
        }
    }

    fn restore(&mut self) {
        for (sig, prev) in self.old.drain(..) {
            // SAFETY: `prev` is the action sigaction returned for `sig`.
            unsafe {
                libc::sigaction(sig, &prev, std::ptr::null_mut());
            }
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        self.restore();
    }
}

/// Raises `sig` again, now that its handler is the one it had before: the process ends as the
/// signal would have ended it (or its earlier handler runs).
pub fn deliver(sig: i32) {
    // SAFETY: raising a signal on this process.
    unsafe {
        libc::raise(sig);
    }
}

/// Runs `work`, which starts a process tree and waits for its root (a build), so that an
/// interruption ends the whole tree before this process goes. Without it, Ctrl-C ended archsmith
/// at once while the build's compilers were still dying, and a dying nvcc deletes its output
/// file: the same command run again at once (to resume) raced with it and linked a missing
/// object.
///
/// While `work` runs, SIGINT, SIGTERM and SIGHUP are deferred and this process is the reaper of
/// its orphaned descendants (a front end killed by Ctrl-C leaves its ninja behind). When one
/// arrives, every descendant still running a second later is sent it too: a `kill` aimed at
/// archsmith alone reaches the build as a terminal's Ctrl-C would, and a terminal's own Ctrl-C
/// has meanwhile been handled by each. After `work` returns, this process waits until none of
/// its descendants in its session is left (a daemon that left the session, sccache's server,
/// is not waited for; one still running after `grace` is killed), and hands back the signal for
/// [`deliver`].
pub fn settling_descendants<T>(grace: Duration, work: impl FnOnce() -> T) -> (T, Option<i32>) {
    // SAFETY: prctl with integer arguments on this process.
    let was_reaper = unsafe {
        let mut was: libc::c_int = 0;
        libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut was as *mut libc::c_int);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        was
    };
    let deferred = Deferred::start();
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            let mut noticed: Option<Instant> = None;
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
                let Some(sig) = deferred.interrupted() else {
                    continue;
                };
                let at = *noticed.get_or_insert_with(Instant::now);
                if at.elapsed() >= Duration::from_secs(1) {
                    for pid in descendants() {
                        // SAFETY: signalling a process of this tree.
                        unsafe { libc::kill(pid, sig) };
                    }
                    return;
                }
            }
        });
        let result = work();
        done.store(true, Ordering::SeqCst);
        result
    });
    if deferred.interrupted().is_some() {
        wait_for_descendants(grace);
    }
    let sig = deferred.end();
    // SAFETY: as above.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, was_reaper) };
    (result, sig)
}

/// The live processes below this one that share its session, from /proc.
fn descendants() -> Vec<libc::pid_t> {
    // SAFETY: getpid on this process.
    descendants_of(unsafe { libc::getpid() })
}

/// Sends `sig` to `root` and every live process below it in this session: a build's whole tree
/// (its compilers run in process groups of their own, out of reach of a group's signal).
pub fn signal_tree(root: libc::pid_t, sig: libc::c_int) {
    let mut tree = descendants_of(root);
    tree.push(root);
    for pid in tree {
        // SAFETY: signalling a process of this tree.
        unsafe { libc::kill(pid, sig) };
    }
}

/// The live processes below `root` that share this process's session, from /proc.
fn descendants_of(root: libc::pid_t) -> Vec<libc::pid_t> {
    // (pid, parent, session, a zombie); parents form a tree, so no pid is reached twice.
    let mut table: Vec<(libc::pid_t, libc::pid_t, libc::pid_t, bool)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp session …`; comm may hold spaces and parentheses.
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split(' ').collect();
        if let (Some(state), Some(Ok(ppid)), Some(Ok(sid))) = (
            f.first(),
            f.get(1).map(|v| v.parse()),
            f.get(3).map(|v| v.parse()),
        ) {
            table.push((pid, ppid, sid, *state == "Z"));
        }
    }
    // SAFETY: getsid on this process.
    let session = unsafe { libc::getsid(0) };
    let mut below = vec![root];
    let mut i = 0;
    while i < below.len() {
        let parent = below[i];
        below.extend(
            table
                .iter()
                .filter(|(_, ppid, sid, _)| *ppid == parent && *sid == session)
                .map(|(pid, ..)| *pid)
                .collect::<Vec<_>>(),
        );
        i += 1;
    }
    below
        .into_iter()
        .skip(1)
        .filter(|p| table.iter().any(|(pid, .., zombie)| pid == p && !zombie))
        .collect()
}

/// Reaps this process's ended children (orphans adopted included) until no descendant in its
/// session is left; those still there after `grace` are killed.
fn wait_for_descendants(grace: Duration) {
    let started = Instant::now();
    loop {
        // SAFETY: reaping ended children without blocking.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        let live = descendants();
        if live.is_empty() {
            return;
        }
        if started.elapsed() >= grace + Duration::from_secs(5) {
            return; // unkillable (stuck in the kernel): nothing more to wait for
        }
        if started.elapsed() >= grace {
            for pid in live {
                // SAFETY: ending a process of this tree that outlived the grace.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `kill` aimed at archsmith alone reaches the build, and archsmith returns only once the
    /// build's last process has ended, an orphan included. Run in a process of its own (this
    /// test binary again, the half below alone): the settling signals and waits for every
    /// descendant, which here would be the parallel tests' processes.
    #[test]
    fn an_interruption_reaches_the_whole_tree_and_is_waited_out() {
        let dir = std::env::temp_dir().join(format!("archsmith-settle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut half = std::process::Command::new(std::env::current_exe().unwrap());
        half.args([
            "--exact",
            "interrupts::tests::settling_half",
            "--include-ignored",
        ])
        .args(["--test-threads", "1", "--nocapture"])
        .env("ARCHSMITH_SETTLE_DIR", &dir);
        // SIGINT as a terminal's process has it: a suite started with `&` from a script (CI's
        // runner) inherits it ignored, and an ignored signal is never deferred nor forwarded.
        // SAFETY: one async-signal-safe call between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut half, || {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        let out = half.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "{text}");
    }

    #[test]
    #[ignore = "half of an_interruption_reaches_the_whole_tree_and_is_waited_out, in its own process"]
    fn settling_half() {
        let dir = PathBuf::from(std::env::var_os("ARCHSMITH_SETTLE_DIR").unwrap());
        let ended = dir.join("ended");
        let (status, sig) = settling_descendants(Duration::from_secs(20), || {
            // A front end whose child outlives it: on SIGINT the front end dies at once and the
            // child (a compiler) takes half a second to clean up, then writes `ended`. (`env`
            // undoes the SIGINT a shell's background job is started ignoring; ninja's are not.
            // The loop ends by itself in half a minute or more: a signal that never came fails
            // the test instead of hanging it.)
            let script = format!(
                "env --default-signal=INT sh -c 'trap \"sleep 0.5; : > {}; exit 130\" INT; for i in $(seq 600); do sleep 0.05; done' & wait",
                ended.display()
            );
            let mut child = std::process::Command::new("sh")
                .args(["-c", &script])
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(300));
            // SAFETY: SIGINT to this process alone; `settling_descendants` has deferred it.
            unsafe { libc::kill(libc::getpid(), libc::SIGINT) };
            child.wait().unwrap()
        });
        assert!(!status.success(), "the front end was not interrupted");
        assert_eq!(sig, Some(libc::SIGINT));
        assert!(ended.is_file(), "returned before the orphan had ended");
        assert!(descendants().is_empty());
    }

    #[test]
    fn a_signal_while_deferred_is_held_and_handed_back() {
        // SIGHUP as a terminal's process has it, whatever this test process inherited (`nohup`
        // ignores it); put back at the end.
        // SAFETY: setting this process's disposition of SIGHUP.
        let inherited = unsafe { libc::signal(libc::SIGHUP, libc::SIG_DFL) };
        let d = Deferred::start();
        assert_eq!(d.interrupted(), None);
        // SAFETY: SIGHUP goes to the handler `start` installed.
        unsafe {
            libc::raise(libc::SIGHUP);
        }
        assert_eq!(d.interrupted(), Some(libc::SIGHUP));
        assert_eq!(d.end(), Some(libc::SIGHUP));
        let d = Deferred::start();
        assert_eq!(d.end(), None);

        // A signal the process ignores stays ignored while deferred: it is neither noted nor
        // handed back, and the process goes on. (In this one test: the dispositions and the
        // flag are the process's, which parallel tests would share.)
        // SAFETY: SIGHUP's old handler is put back below; each call acts on this process only.
        unsafe {
            let old = libc::signal(libc::SIGHUP, libc::SIG_IGN);
            let d = Deferred::start();
            libc::raise(libc::SIGHUP);
            assert_eq!(d.interrupted(), None);
            assert_eq!(d.end(), None);
            assert_eq!(libc::signal(libc::SIGHUP, old), libc::SIG_IGN);
            libc::signal(libc::SIGHUP, inherited);
        }
    }
}
