//! [`TargetInfo`]: how a target is named in results (a leaf module).

use serde::Serialize;

/// Identifies one target in results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetInfo {
    /// Index of the target in the run (unique for the daemon's lifetime).
    pub id: usize,
    /// The target as the user wrote it, normalised (`tcp://host:port`).
    pub target: String,
    /// Protocol name, the target's scheme: `tcp`, `tcp-connect`, `udp`, ...
    pub protocol: String,
    /// The resolved address probed.
    pub addr: String,
    /// Request size in bytes for this target (ICMP counts the payload only);
    /// `None` where the protocol sends no payload.
    pub size: Option<usize>,
    /// What the RTT runs between: `user` (user send to user receive, every
    /// protocol since schema 2) or `kernel` (to the kernel's receive stamp:
    /// ICMP in schema 1 files).
    pub timestamps: String,
    /// The daemon job the target belongs to, written `probe` in results as
    /// in the metrics' label (Prometheus keeps `job` for its scrape job).
    #[serde(rename = "probe", skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Extra labels of its job (Prometheus series carry them).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

impl TargetInfo {
    /// A target with user-space timestamps and no job.
    pub fn new(id: usize, target: &str, protocol: &str, addr: &str, size: Option<usize>) -> Self {
        Self {
            id,
            target: target.to_owned(),
            protocol: protocol.to_owned(),
            addr: addr.to_owned(),
            size,
            timestamps: "user".to_owned(),
            job: None,
            labels: std::collections::BTreeMap::new(),
        }
    }
}
