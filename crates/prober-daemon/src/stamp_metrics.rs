//! The STAMP reflector's counters on `/metrics`.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use prober_stamp::ReflectorStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;

/// Reads the reflector's counters at scrape time.
#[derive(Debug)]
pub(crate) struct StampCollector(pub(crate) Arc<ReflectorStats>);

impl Collector for StampCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let plain = [
            (
                "prober_stamp_reflector_received",
                "STAMP test packets received by the reflector",
                s.received.load(Relaxed),
            ),
            (
                "prober_stamp_reflector_reflected",
                "STAMP replies sent by the reflector",
                s.reflected.load(Relaxed),
            ),
        ];
        for (name, help, n) in plain {
            let m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(n).encode(m)?;
        }
        let mut m = encoder.encode_descriptor(
            "prober_stamp_reflector_dropped",
            "STAMP test packets the reflector dropped, by reason (short, mode, hmac, too_many_tlvs, bad_timestamp, rate_limited, sessions_full)",
            None,
            MetricType::Counter,
        )?;
        for (reason, n) in s.dropped() {
            let labels = [("reason".to_owned(), reason.to_owned())];
            ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
        }
        let mut m = encoder.encode_descriptor(
            "prober_stamp_reflector_tlv_flagged",
            "STAMP TLVs the reflector returned flagged: unrecognised (U), malformed (M), integrity (I)",
            None,
            MetricType::Counter,
        )?;
        for (flag, n) in [
            ("unrecognised", s.tlv_unrecognised.load(Relaxed)),
            ("malformed", s.tlv_malformed.load(Relaxed)),
            ("integrity", s.tlv_integrity.load(Relaxed)),
        ] {
            let labels = [("flag".to_owned(), flag.to_owned())];
            ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
