//! What stamping TCP handshakes costs a loopback `connect()`, without
//! prober's runtime: blocking connects to a listener of its own, timed with
//! no stamper, with prober's BPF program on the loopback device's transmit
//! hook (`prober_sys::synbpf`) and with its packet socket
//! (`prober_sys::syntap`). Each round runs the three in a rotating order and
//! takes each one's median connect; the medians of the rounds, and of each
//! round's difference from "none", are printed. The stampers' stamps are
//! taken after every connect, as a probe takes them, and counted, so a
//! stamper that stamped nothing shows.
//!
//! ```sh
//! taskset -c 0 cargo run --release -p prober-benches --bin hookcost -- [COUNT] [ROUNDS]
//! ```
//!
//! COUNT (default 3000) connects per run, ROUNDS (default 9). Needs root
//! (the BPF program and the packet socket); a stamper that cannot be opened
//! is reported and left out. Loopback only.

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use prober_sys::synbpf::{Stamper, SynBpf};
use prober_sys::syntap::SynTap;
use socket2::{Domain, Socket, Type};

const MODES: [&str; 3] = ["none", "bpf program", "packet socket"];

/// The stamper of `mode` (none for 0), opened as prober opens each.
fn open(mode: usize, addr: SocketAddr) -> std::io::Result<Option<Stamper>> {
    Ok(match mode {
        0 => None,
        1 => Some(Stamper::Bpf(SynBpf::open(addr.ip(), addr.port())?)),
        _ => Some(Stamper::Packet(SynTap::open(addr.port())?)),
    })
}

/// The median connect of `count`, and how many handshakes were stamped.
fn run(l: &TcpListener, addr: SocketAddr, stamper: Option<&Stamper>, count: usize) -> (u64, usize) {
    let mut times = Vec::with_capacity(count);
    let mut stamped = 0;
    for _ in 0..count {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a socket");
        // Closed with RST, as the probes close: no TIME_WAIT left behind.
        s.set_linger(Some(Duration::ZERO)).expect("SO_LINGER");
        let t = Instant::now();
        s.connect(&addr.into()).expect("connect to the listener");
        times.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
        let local = s
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map_or(0, |a| a.port());
        if stamper.is_some_and(|s| s.take(local, addr.ip()).rtt().is_some()) {
            stamped += 1;
        }
        drop(l.accept().expect("accept"));
    }
    (median(&mut times), stamped)
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let count: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(9);
    if !(100..=100_000).contains(&count) || !(1..=101).contains(&rounds) {
        eprintln!("hookcost: COUNT must be 100..100000 and ROUNDS 1..101");
        std::process::exit(2);
    }
    let l = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let addr = l.local_addr().expect("its address");
    let mut usable = [true; 3];
    for (m, ok) in usable.iter_mut().enumerate().skip(1) {
        if let Err(e) = open(m, addr) {
            eprintln!("hookcost: no {} ({e}); left out", MODES[m]);
            *ok = false;
        }
    }
    let mut medians: [Vec<u64>; 3] = Default::default();
    let mut stamped = [0usize; 3];
    for r in 0..rounds {
        for i in 0..3 {
            let m = (r + i) % 3;
            if !usable[m] {
                continue;
            }
            let stamper = open(m, addr).expect("opened before");
            // The kernel switches packet stamps on from a work item after
            // the first socket asks.
            std::thread::sleep(Duration::from_millis(50));
            let (med, n) = run(&l, addr, stamper.as_ref(), count);
            medians[m].push(med);
            stamped[m] += n;
        }
    }
    println!("connects per run {count}, rounds {rounds}; ns");
    for m in 0..3 {
        if !usable[m] {
            continue;
        }
        let mut diffs: Vec<i64> = medians[m]
            .iter()
            .zip(&medians[0])
            .map(|(&a, &b)| i64::try_from(a).unwrap_or(0) - i64::try_from(b).unwrap_or(0))
            .collect();
        diffs.sort_unstable();
        let d = diffs.get(diffs.len() / 2).copied().unwrap_or(0);
        println!(
            "{:14} median {:6}  minus none {:+6}  stamped {}/{}  rounds {:?}",
            MODES[m],
            median(&mut medians[m].clone()),
            d,
            stamped[m],
            count * rounds,
            medians[m]
        );
    }
}
