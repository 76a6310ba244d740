//! Waiting for a slot's deadline with each [`Pacing`] mode.
//!
//! The tokio timer fires on millisecond ticks, so on its own it sends up to
//! 1-2 ms late. [`Sleeper`] therefore sleeps on tokio only for the coarse
//! part of a wait and finishes on a Linux `timerfd` (a high-resolution timer
//! the runtime polls like a socket), then, for `hybrid`, spins the last
//! microseconds.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use crate::Pacing;

/// How long before the deadline the tokio timer hands over to the timerfd.
/// The tokio timer can fire up to about a millisecond after its deadline.
pub const COARSE_MARGIN: Duration = Duration::from_micros(1500);

/// How long before the deadline hybrid pacing stops sleeping and spins:
/// about one wake-up of an idle vCPU.
pub const HYBRID_SPIN: Duration = Duration::from_micros(80);

struct Tfd(TimerFd);

impl AsRawFd for Tfd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Waits for deadlines in one pacing mode. Holds one timerfd when precise
/// sleeping is on and available.
pub struct Sleeper {
    pacing: Pacing,
    timer: Option<AsyncFd<Tfd>>,
}

impl std::fmt::Debug for Sleeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleeper")
            .field("pacing", &self.pacing)
            .field("precise", &self.timer.is_some())
            .finish()
    }
}

impl Sleeper {
    /// A sleeper for `pacing`. With `precise`, waits end on a timerfd; without
    /// (or if no timerfd can be made) only the tokio timer is used, which
    /// also makes paused-time tests work.
    pub fn new(pacing: Pacing, precise: bool) -> Self {
        let timer = (precise && pacing != Pacing::Spin)
            .then(|| {
                let flags = TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC;
                let tfd = TimerFd::new(ClockId::CLOCK_MONOTONIC, flags).ok()?;
                // `AsyncFd::new` is deprecated for I/O safety: the fd must
                // outlive its registration. `Tfd` owns the timerfd and the
                // AsyncFd deregisters before dropping it, so this use is sound;
                // the replacement, `register`, is `unsafe`, which we forbid.
                #[allow(deprecated)]
                let fd = AsyncFd::with_interest(Tfd(tfd), tokio::io::Interest::READABLE);
                fd.ok()
            })
            .flatten();
        Self { pacing, timer }
    }

    /// Waits until `deadline`. Returns at once if it has passed.
    pub async fn wait_until(&mut self, deadline: Instant) {
        match self.pacing {
            Pacing::Timer => self.sleep_until(deadline).await,
            Pacing::Spin => spin_until(deadline).await,
            Pacing::Hybrid => {
                if let Some(early) = deadline.checked_sub(HYBRID_SPIN) {
                    self.sleep_until(early).await;
                }
                spin_until(deadline).await;
            }
        }
    }

    async fn sleep_until(&mut self, deadline: Instant) {
        let Some(timer) = &self.timer else {
            return tokio::time::sleep_until(deadline).await;
        };
        if let Some(coarse) = deadline.checked_sub(COARSE_MARGIN)
            && coarse > Instant::now()
        {
            tokio::time::sleep_until(coarse).await;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let when = Expiration::OneShot(TimeSpec::from_duration(left));
        if timer
            .get_ref()
            .0
            .set(when, TimerSetTimeFlags::empty())
            .is_err()
        {
            return tokio::time::sleep_until(deadline).await;
        }
        loop {
            let Ok(mut ready) = timer.readable().await else {
                return tokio::time::sleep_until(deadline).await;
            };
            // Reading the expiry count re-arms readiness; EAGAIN means a
            // spurious wake-up.
            match ready.try_io(|t| t.get_ref().0.wait().map_err(std::io::Error::from)) {
                Ok(_) => return,
                Err(_would_block) => continue,
            }
        }
    }
}

/// Waits until `deadline` using `pacing` with the tokio timer only (no
/// timerfd). See [`Sleeper`] for precise waits.
pub async fn wait_until(deadline: Instant, pacing: Pacing) {
    Sleeper::new(pacing, false).wait_until(deadline).await;
}

/// The last stretch of a spin that does not yield to the runtime. A yield
/// costs a trip through the scheduler (an `epoll_wait` call), which alone
/// can overshoot the deadline by several µs.
pub const SPIN_WITHOUT_YIELD: Duration = Duration::from_micros(50);

/// Spinning yields to the runtime on every turn until the last
/// [`SPIN_WITHOUT_YIELD`], so other tasks on the same worker (receivers,
/// other targets) still run; it costs a core while it waits.
async fn spin_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        if deadline - now > SPIN_WITHOUT_YIELD {
            tokio::task::yield_now().await;
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_mode_returns_at_or_after_the_deadline() {
        for precise in [false, true] {
            for pacing in [Pacing::Timer, Pacing::Spin, Pacing::Hybrid] {
                let mut s = Sleeper::new(pacing, precise);
                for ms in [0, 1, 3] {
                    let deadline = Instant::now() + Duration::from_millis(ms);
                    s.wait_until(deadline).await;
                    assert!(Instant::now() >= deadline, "{pacing} returned early");
                }
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn timer_wakes_at_the_deadline_in_paused_time() {
        let start = Instant::now();
        wait_until(start + Duration::from_millis(10), Pacing::Timer).await;
        assert_eq!(Instant::now() - start, Duration::from_millis(10));
    }

    #[tokio::test]
    async fn precise_sleeper_has_a_timerfd() {
        assert!(Sleeper::new(Pacing::Timer, true).timer.is_some());
        assert!(Sleeper::new(Pacing::Spin, true).timer.is_none());
        assert!(Sleeper::new(Pacing::Timer, false).timer.is_none());
    }
}
