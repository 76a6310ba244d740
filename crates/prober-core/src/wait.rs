//! Waiting for a slot's deadline with each [`Pacing`] mode.

use std::time::Duration;

use tokio::time::Instant;

use crate::Pacing;

/// How long before the deadline hybrid pacing stops sleeping and starts to
/// spin. The tokio timer fires on millisecond ticks, so a shorter margin
/// would often wake after the deadline.
pub const HYBRID_MARGIN: Duration = Duration::from_micros(1500);

/// Waits until `deadline` using `pacing`. Returns at once if it has passed.
///
/// Spinning yields to the runtime on every turn, so other tasks on the same
/// worker (receivers, other targets) still run; it costs a core while it waits.
pub async fn wait_until(deadline: Instant, pacing: Pacing) {
    match pacing {
        Pacing::Timer => tokio::time::sleep_until(deadline).await,
        Pacing::Spin => spin_until(deadline).await,
        Pacing::Hybrid => {
            if let Some(early) = deadline.checked_sub(HYBRID_MARGIN)
                && early > Instant::now()
            {
                tokio::time::sleep_until(early).await;
            }
            spin_until(deadline).await;
        }
    }
}

async fn spin_until(deadline: Instant) {
    while Instant::now() < deadline {
        std::hint::spin_loop();
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_mode_returns_at_or_after_the_deadline() {
        for pacing in [Pacing::Timer, Pacing::Spin, Pacing::Hybrid] {
            let deadline = Instant::now() + Duration::from_millis(3);
            wait_until(deadline, pacing).await;
            assert!(Instant::now() >= deadline, "{pacing} returned early");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn timer_wakes_at_the_deadline_in_paused_time() {
        let start = Instant::now();
        wait_until(start + Duration::from_millis(10), Pacing::Timer).await;
        assert_eq!(Instant::now() - start, Duration::from_millis(10));
    }
}
