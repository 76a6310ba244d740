//! The responders' counters on `/metrics`: the STAMP reflector's, and what
//! the limits of a public address refused.

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

/// Reads what the responders' limits refused at scrape time.
#[derive(Debug)]
pub(crate) struct GuardCollector(pub(crate) Arc<prober_net::guard::GuardStats>);

impl Collector for GuardCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut m = encoder.encode_descriptor(
            "prober_responder_refused",
            "Requests and connections the responders' limits refused, by reason (rate_limited, conns_over_total, conns_over_source, request_timeout, idle_timeout, over_buffer)",
            None,
            MetricType::Counter,
        )?;
        for (reason, n) in self.0.by_reason() {
            let labels = [("reason".to_owned(), reason.to_owned())];
            ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
