//! The scheduling class of the thread that sends and receives probes.
//!
//! On a machine whose CPUs are busy, a probe's send waits for the
//! scheduler: with scrapes, the daemon's probing thread was runnable but
//! behind the scrape's encoder and its reader, and its send lag grew.
//! `SCHED_FIFO` puts it ahead of every ordinary thread (BENCHMARKS.md,
//! "The probing thread at realtime priority"). Opt-in: a monitor that
//! takes realtime priority by default would also be ahead of the
//! workloads of the machine it watches.

use std::io;

/// The highest `SCHED_FIFO` priority; the lowest is 1.
pub const MAX_PRIORITY: u8 = 99;

/// Runs the calling thread under `SCHED_FIFO` at `priority` (1 to
/// [`MAX_PRIORITY`]). Threads and processes it starts from then on
/// start in the ordinary class (`SCHED_RESET_ON_FORK`): a runtime's
/// blocking pool, made on demand, resolves names and writes files.
///
/// # Errors
/// `EPERM` without root or `CAP_SYS_NICE` (or where `RLIMIT_RTPRIO` is
/// lower); `EINVAL` for a priority out of range.
#[allow(unsafe_code)]
pub fn realtime(priority: u8) -> io::Result<()> {
    let param = nix::libc::sched_param {
        sched_priority: i32::from(priority),
    };
    // SAFETY: `param` is a valid `sched_param` that outlives the call; pid 0
    // is the calling thread, and the call changes only its scheduling.
    let rc = unsafe {
        nix::libc::sched_setscheduler(
            0,
            nix::libc::SCHED_FIFO | nix::libc::SCHED_RESET_ON_FORK,
            &param,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The calling thread's `SCHED_FIFO` priority, `None` when it is not
/// `SCHED_FIFO`.
///
/// # Errors
/// The kernel's, which it has none of for the calling thread.
#[allow(unsafe_code)]
pub fn realtime_priority() -> io::Result<Option<u8>> {
    // SAFETY: pid 0 is the calling thread; the call only reads.
    let policy = unsafe { nix::libc::sched_getscheduler(0) };
    if policy < 0 {
        return Err(io::Error::last_os_error());
    }
    if policy & !nix::libc::SCHED_RESET_ON_FORK != nix::libc::SCHED_FIFO {
        return Ok(None);
    }
    let mut param = nix::libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid `sched_param` the call writes into.
    let rc = unsafe { nix::libc::sched_getparam(0, &mut param) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u8::try_from(param.sched_priority).ok())
}

/// Puts the calling thread back in the ordinary class (`SCHED_OTHER`).
///
/// # Errors
/// The kernel's.
#[allow(unsafe_code)]
pub fn ordinary() -> io::Result<()> {
    let param = nix::libc::sched_param { sched_priority: 0 };
    // SAFETY: as in `realtime`.
    let rc = unsafe { nix::libc::sched_setscheduler(0, nix::libc::SCHED_OTHER, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_runs_at_the_realtime_priority_it_asked_for() {
        // On a thread of its own: the test harness's threads keep theirs.
        std::thread::spawn(|| {
            assert_eq!(realtime_priority().unwrap(), None);
            match realtime(7) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    // Without root or CAP_SYS_NICE (CI runs as root).
                    prober_core::testutil::skip(format_args!("SCHED_FIFO: {e}"));
                    return;
                }
                Err(e) => panic!("{e}"),
            }
            assert_eq!(realtime_priority().unwrap(), Some(7));
            let child = std::thread::spawn(realtime_priority).join().unwrap();
            assert_eq!(child.unwrap(), None, "a thread it started is realtime too");
            ordinary().unwrap();
            assert_eq!(realtime_priority().unwrap(), None);
            let e = realtime(MAX_PRIORITY + 1).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(nix::libc::EINVAL), "{e}");
        })
        .join()
        .unwrap();
    }
}
