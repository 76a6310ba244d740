//! The least a gRPC client can do for one unary `Ping`: raw HTTP/2 frames
//! on the `h2` crate (the HTTP/2 implementation under tonic and hyper), no
//! tonic, no tower, one closed loop on a current-thread runtime. HEADERS
//! and DATA go out in one write.
//!
//! `benches/peers/run.sh` runs it beside `prober run grpc://` and ghz to
//! show how much of a gRPC round trip is the client library at all: what is
//! left is the server, the kernel and the wake-ups.
//!
//! ```sh
//! cargo run --release -p prober-grpc --example h2ping -- 127.0.0.1:8708 10000
//! ```
//!
//! Prints one JSON line: `{"count":N,"p50_ns":..,"p99_ns":..,"mean_ns":..}`.

use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use prober_grpc::pb::{PingReply, PingRequest};
use prost::Message;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(addr), Some(count)) = (args.next(), args.next()) else {
        eprintln!("usage: h2ping HOST:PORT COUNT");
        std::process::exit(2);
    };
    let count = match count.parse::<usize>() {
        Ok(n) if (1..=10_000_000).contains(&n) => n,
        _ => {
            eprintln!("h2ping: COUNT must be 1..10000000");
            std::process::exit(2);
        }
    };
    match run(&addr, count).await {
        Ok(mut rtts) => {
            rtts.sort_unstable();
            let pct = |p: usize| rtts[(rtts.len() * p).div_ceil(100).max(1) - 1];
            let mean = rtts.iter().sum::<u64>() / rtts.len() as u64;
            println!(
                "{{\"count\":{},\"p50_ns\":{},\"p99_ns\":{},\"mean_ns\":{mean}}}",
                rtts.len(),
                pct(50),
                pct(99)
            );
        }
        Err(e) => {
            eprintln!("h2ping: {e}");
            std::process::exit(1);
        }
    }
}

async fn run(addr: &str, count: usize) -> Result<Vec<u64>, Error> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (send, conn) = h2::client::handshake(tcp).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            eprintln!("h2ping: connection: {e}");
        }
    });
    let mut send = send.ready().await?;
    let mut rtts = Vec::with_capacity(count);
    for seq in 0..count as u64 {
        let msg = PingRequest {
            seq,
            payload: vec![0u8; 64],
            client_send_unix_ns: 0,
            reply_size: 0,
            want_send_time: false,
        };
        // gRPC message framing: uncompressed flag, big-endian length, bytes.
        let mut frame = BytesMut::with_capacity(5 + msg.encoded_len());
        frame.put_u8(0);
        frame.put_u32(u32::try_from(msg.encoded_len())?);
        msg.encode(&mut frame)?;
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("http://{addr}/prober.v1.Echo/Ping"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("grpc-timeout", "1000m")
            .body(())?;
        send = send.ready().await?;
        let start = Instant::now();
        let (response, mut stream) = send.send_request(req, false)?;
        stream.send_data(frame.freeze(), true)?;
        let mut body = response.await?.into_body();
        let mut data = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk: Bytes = chunk?;
            body.flow_control().release_capacity(chunk.len())?;
            data.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await?;
        let rtt = start.elapsed();
        let status = trailers
            .as_ref()
            .and_then(|t| t.get("grpc-status"))
            .and_then(|v| v.to_str().ok());
        if status != Some("0") {
            return Err(format!("seq {seq}: grpc-status {status:?}").into());
        }
        let reply = PingReply::decode(data.get(5..).ok_or("short reply")?)?;
        if reply.seq != seq {
            return Err(format!("reply for seq {} to request {seq}", reply.seq).into());
        }
        rtts.push(u64::try_from(rtt.as_nanos())?);
    }
    Ok(rtts)
}
