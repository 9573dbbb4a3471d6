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

use std::sync::atomic::{AtomicI32, Ordering};

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

#[cfg(test)]
mod tests {
    use super::*;

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
