//! Busy-poll receive: a dedicated thread that spins on non-blocking reads
//! instead of sleeping in epoll. On a VM whose idle vCPUs halt, a sleeping
//! receiver pays a wake-up of tens of µs on every reply; a spinning one does
//! not, at the cost of a whole core while it runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// What one turn of a spin loop found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing to read: spin on.
    Idle,
    /// Did some work: try again at once.
    Busy,
    /// The socket is finished (closed, failed): end the thread.
    Done,
}

/// Whether `fd` has data in its receive queue right now, without
/// blocking; unlike [`readable_now`], an error-queue entry (such as the
/// transmit stamp of the reply just sent) does not count. A responder's
/// adaptive spin waits for the next request with it.
pub fn data_waiting(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
}

/// Whether `fd` has data to read (or an error or hang-up to report) right
/// now, without blocking. A spin loop on a TCP socket should ask this before
/// each `recv`: `poll` reads the socket's state without taking its lock,
/// while every `recv` takes it and so contends with the kernel delivering
/// the very segment being waited for (and with a writer on another thread).
pub fn readable_now(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    // An error from poll itself is left for the read to report.
    !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
}

/// Owns a receive loop, whichever kind; dropping it stops the loop.
#[derive(Debug)]
pub enum Reader {
    /// A tokio task that sleeps in epoll between replies.
    Task(#[allow(dead_code, reason = "held for its Drop")] tokio_util::task::AbortOnDropHandle<()>),
    /// A thread spinning on non-blocking reads (`--busy-poll`).
    Spin(#[allow(dead_code, reason = "held for its Drop")] SpinThread),
}

/// A thread running a spin loop; stopped and joined when dropped.
#[derive(Debug)]
pub struct SpinThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl SpinThread {
    /// Starts a thread named `name` that calls `step` until it returns
    /// [`Step::Done`] or the `SpinThread` is dropped.
    ///
    /// # Errors
    /// If the thread cannot be spawned.
    pub fn spawn(
        name: &str,
        mut step: impl FnMut() -> Step + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    match step() {
                        Step::Idle => std::hint::spin_loop(),
                        Step::Busy => {}
                        Step::Done => break,
                    }
                }
            })?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }

    /// Whether the loop has ended on its own.
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for SpinThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    #[test]
    fn readable_now_sees_data_and_hang_ups_without_blocking() {
        use std::io::Write as _;
        use std::os::fd::AsFd as _;
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(!readable_now(b.as_fd()));
        a.write_all(b"x").unwrap();
        assert!(readable_now(b.as_fd()));
        let (c, d) = std::os::unix::net::UnixStream::pair().unwrap();
        drop(c);
        assert!(
            readable_now(d.as_fd()),
            "a hang-up is for the read to report"
        );
    }

    #[test]
    fn runs_until_done_or_dropped() {
        let n = Arc::new(AtomicU64::new(0));
        let c = Arc::clone(&n);
        let t = SpinThread::spawn("t", move || {
            if c.fetch_add(1, Ordering::Relaxed) >= 9 {
                Step::Done
            } else {
                Step::Busy
            }
        })
        .unwrap();
        while !t.is_finished() {
            std::thread::yield_now();
        }
        assert_eq!(n.load(Ordering::Relaxed), 10);
        let forever = SpinThread::spawn("f", || Step::Idle).unwrap();
        drop(forever); // joins: the test would hang if the flag were ignored
    }
}
