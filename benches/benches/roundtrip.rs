//! One loopback round trip per protocol through the real probe code, with
//! the responder in the same process (closed loop, one in flight).

use criterion::{Criterion, criterion_group, criterion_main};
use prober_benches::LoopbackResponder;
use prober_core::Probe;
use prober_grpc::{GrpcProbe, GrpcStreamProbe};
use prober_icmp::{IcmpClient, IcmpProbe, SocketKind};
use prober_tcp::{TcpProbe, UdpProbe};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

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
    let grpc_cfg = prober_grpc::ClientConfig {
        addr: responder.grpc,
        host: "127.0.0.1".to_owned(),
        tls: None,
        timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        size: 64,
        tx_stamps: true,
        receive: prober_core::spin::Receive::Event,
        spare: true,
    };
    let unary = GrpcProbe::new(grpc_cfg.clone());
    rt.block_on(unary.prepare()).expect("grpc channel");
    group.bench_function("grpc_unary_64B", |b| {
        b.iter(|| {
            seq += 1;
            rt.block_on(unary.probe(seq)).expect("grpc reply")
        })
    });
    let stream = GrpcStreamProbe::new(grpc_cfg);
    rt.block_on(stream.prepare()).expect("grpc stream");
    group.bench_function("grpc_stream_64B", |b| {
        b.iter(|| {
            seq += 1;
            rt.block_on(stream.probe(seq)).expect("grpc stream reply")
        })
    });
    // ICMP needs a datagram socket (ping_group_range) or a raw one (root).
    let icmp = rt.block_on(async {
        let client = IcmpClient::new(SocketKind::Auto, None);
        IcmpProbe::new(&client, IpAddr::V4(Ipv4Addr::LOCALHOST), 56)
    });
    match icmp {
        Ok(icmp) => group.bench_function("icmp_56B", |b| {
            b.iter(|| {
                seq += 1;
                rt.block_on(icmp.probe(seq)).expect("icmp reply")
            })
        }),
        Err(error) => {
            prober_core::testutil::skip(format_args!("loopback_rtt/icmp_56B: {error}"));
            &mut group
        }
    };
    group.finish();
}

#[allow(missing_docs)] // criterion_group! generates an undocumented pub fn.
mod group {
    use super::*;
    criterion_group!(benches, roundtrips);
}
criterion_main!(group::benches);
