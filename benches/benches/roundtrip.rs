//! One loopback round trip per protocol through the real probe code, with
//! the responder in the same process (closed loop, one in flight).

use criterion::{Criterion, criterion_group, criterion_main};
use prober_benches::LoopbackResponder;
use prober_core::Probe;
use prober_tcp::{TcpProbe, UdpProbe};

fn roundtrips(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let responder = LoopbackResponder::start(&rt);
    let tcp = TcpProbe::new(responder.tcp, 64);
    rt.block_on(tcp.prepare())
        .expect("connect to the loopback responder");
    let udp = rt
        .block_on(UdpProbe::connect(responder.udp, 64))
        .expect("udp socket");
    let mut seq = 0u64;
    let mut group = c.benchmark_group("loopback_rtt");
    group.bench_function("tcp_64B", |b| {
        b.iter(|| {
            seq += 1;
            rt.block_on(tcp.probe(seq)).expect("tcp reply")
        })
    });
    group.bench_function("udp_64B", |b| {
        b.iter(|| {
            seq += 1;
            rt.block_on(udp.probe(seq)).expect("udp reply")
        })
    });
    group.finish();
}

#[allow(missing_docs)] // criterion_group! generates an undocumented pub fn.
mod group {
    use super::*;
    criterion_group!(benches, roundtrips);
}
criterion_main!(group::benches);
