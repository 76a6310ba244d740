//! The open-loop schedule: slot k is due at start + k * interval.

use std::time::Duration;

use tokio::time::Instant;

/// Computes slot deadlines for an open-loop schedule. It never sleeps and
/// never looks at replies, so a slow peer cannot stretch the schedule.
#[derive(Debug, Clone)]
pub struct Pacer {
    start: Instant,
    interval: Duration,
    slot: u64,
}

impl Pacer {
    /// A schedule whose slot 0 is due at `start`.
    pub fn new(start: Instant, interval: Duration) -> Self {
        Self {
            start,
            interval,
            slot: 0,
        }
    }

    /// The deadline of the next slot; advances the schedule by one slot.
    pub fn next_deadline(&mut self) -> Instant {
        let at = self.deadline(self.slot);
        self.slot += 1;
        at
    }

    /// The deadline of slot `slot`, without advancing.
    pub fn deadline(&self, slot: u64) -> Instant {
        // u128 so that long runs at small intervals cannot overflow.
        let ns = self.interval.as_nanos().saturating_mul(u128::from(slot));
        let ns = u64::try_from(ns).unwrap_or(u64::MAX);
        self.start + Duration::from_nanos(ns)
    }

    /// How many slots have been handed out.
    pub fn slots_taken(&self) -> u64 {
        self.slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_are_start_plus_k_intervals() {
        let start = Instant::now();
        let mut p = Pacer::new(start, Duration::from_millis(10));
        for k in 0..1000u64 {
            assert_eq!(p.next_deadline(), start + Duration::from_millis(10 * k));
        }
        assert_eq!(p.slots_taken(), 1000);
    }

    #[test]
    fn deadlines_do_not_drift() {
        // 1/3 ms does not divide evenly into ns; the error must not accumulate.
        let start = Instant::now();
        let p = Pacer::new(start, Duration::from_nanos(333_333));
        assert_eq!(
            p.deadline(3_000_000),
            start + Duration::from_nanos(333_333 * 3_000_000)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn schedule_ignores_how_long_a_slot_took() {
        let start = Instant::now();
        let mut p = Pacer::new(start, Duration::from_millis(10));
        let first = p.next_deadline();
        // A stall far longer than the interval: the next deadlines stay put.
        tokio::time::advance(Duration::from_millis(35)).await;
        assert_eq!(first, start);
        assert_eq!(p.next_deadline(), start + Duration::from_millis(10));
        assert_eq!(p.next_deadline(), start + Duration::from_millis(20));
    }
}
