//! Hot paths of the timing core: histogram record, pacer, matcher, wire
//! encode/decode, and sample -> JSON sink.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use prober_core::stats::Dist;
use prober_core::{Clock, Collector, Event};
use prober_core::{Matcher, Outcome, Pacer, Reply, RunConfig, RunMeta, Sample, Sink, TargetInfo};
use prober_sinks::JsonSink;
use prober_tcp::wire::{self, Header, MAX_UDP_FRAME};
use tokio::time::Instant;

fn histogram(c: &mut Criterion) {
    let mut d = Dist::default();
    let mut x = 12_345u64;
    c.bench_function("dist_record", |b| {
        b.iter(|| {
            // Cheap LCG so values spread over buckets.
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1) % 10_000_000;
            d.record_ns(black_box(x));
        })
    });
}

fn pacer(c: &mut Criterion) {
    let mut p = Pacer::new(Instant::now(), Duration::from_micros(100));
    c.bench_function("pacer_next_deadline", |b| {
        b.iter(|| black_box(p.next_deadline()))
    });
}

fn matcher(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let m = Matcher::<u64>::new();
    let mut seq = 0u64;
    c.bench_function("matcher_register_deliver_recv", |b| {
        b.iter(|| {
            seq += 1;
            let mut w = m.register(seq);
            m.deliver(seq, seq);
            black_box(rt.block_on(w.recv()))
        })
    });
}

fn wire_codec(c: &mut Criterion) {
    let mut buf = Vec::with_capacity(64);
    c.bench_function("wire_encode_decode_64", |b| {
        b.iter(|| {
            wire::encode_request(&mut buf, 64, black_box(7), 42);
            black_box(Header::decode(&buf, MAX_UDP_FRAME).expect("valid frame"))
        })
    });
}

fn json_sink(c: &mut Criterion) {
    let sink = JsonSink::new(Box::new(std::io::sink()), false);
    let target = TargetInfo::new(0, "tcp://127.0.0.1:8707", "tcp", "127.0.0.1:8707", Some(64));
    let meta = RunMeta::new("bench", &RunConfig::default());
    let mut collector = Collector::new(meta, Clock::now(), sink, false);
    collector
        .add_target(target, std::sync::Arc::new(prober_core::Anomalies::default))
        .expect("add");
    collector.start().expect("start");
    let now = Instant::now();
    let reply = Reply {
        sent: now,
        received: now + Duration::from_micros(50),
        server_dwell: Some(Duration::from_micros(3)),
        rx_wake: None,
        bytes: 64,
        ttl: None,
        stamps: prober_core::sample::Stamps::default(),
        app: Default::default(),
    };
    let sample = Sample {
        target: 0,
        seq: 1,
        scheduled: now,
        sent: now,
        outcome: Outcome::Ok(reply),
        bytes: 64,
    };
    c.bench_function("json_sink_record", |b| {
        b.iter(|| {
            collector.with_sink(|cx, sink| {
                let t = &cx.targets[&0];
                sink.record(cx, t, black_box(&sample)).expect("write");
            });
        })
    });
    // The whole pipeline for one sample: statistics, then the sink.
    c.bench_function("collector_event_json", |b| {
        b.iter(|| {
            collector
                .event(Event::Sample(black_box(sample.clone())))
                .expect("write")
        })
    });
}

#[allow(missing_docs)] // criterion_group! generates an undocumented pub fn.
mod group {
    use super::*;
    criterion_group!(benches, histogram, pacer, matcher, wire_codec, json_sink);
}
criterion_main!(group::benches);
