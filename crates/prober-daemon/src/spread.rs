//! Where in its period a periodic thing of one target falls: a target's
//! first slot, its traces (`paths`).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use prober_core::runner::phase;

/// Offset of a target's first slot within its interval, from a hash of
/// this host's name, the job and the URL: stable across reloads and spread
/// evenly, so thousands of targets at 1 Hz do not fire in the same
/// millisecond, and in a mesh (every node with the same config) the nodes
/// probing one peer do not all send to it at the same moment. A traced
/// target's trace falls within its period the same way (`paths`).
pub(crate) fn spread(host: &str, job: &str, target: &str, interval: Duration) -> Duration {
    const PARTS: u64 = 1_000_000;
    let mut h = DefaultHasher::new();
    (host, job, target).hash(&mut h);
    phase(h.finish() % PARTS, PARTS, interval)
}
