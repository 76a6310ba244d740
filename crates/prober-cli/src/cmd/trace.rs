//! `prober run --trace TARGET`: the path to a target, hop by hop, with
//! every ECMP branch (prober-trace does the work; this reads the flags
//! and prints).

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};

use crate::cli::{Output, RunArgs};

/// The way a `--trace` target says to probe, and the port it names or
/// the way's own: `HOST`, `HOST:PORT` or `[V6]:PORT`, alone or after
/// `udp://` or `trace://` (UDP, port [`prober_trace::DEFAULT_PORT`]),
/// `tcp://` (SYN, port 80 as tcptraceroute's and `mtr -T`'s) or `icmp://`
/// (echo, no port).
pub(crate) fn destination(text: &str) -> anyhow::Result<(prober_trace::Method, String, u16)> {
    use prober_trace::Method;
    let (method, rest) = match text.split_once("://") {
        Some(("udp" | "trace", rest)) => (Method::Udp, rest),
        Some(("tcp", rest)) => (Method::Tcp, rest),
        Some(("icmp", rest)) => (Method::Icmp, rest),
        Some((scheme, _)) => bail!(
            "--trace probes with udp://, tcp:// or icmp:// (or trace://, UDP), not {scheme}://"
        ),
        None => (Method::Udp, text),
    };
    let default = match method {
        Method::Udp => prober_trace::DEFAULT_PORT,
        Method::Tcp => 80,
        Method::Icmp => 0,
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = if let Ok(ip) = rest.parse::<IpAddr>() {
        (ip.to_string(), default)
    } else if let Ok(sa) = rest.parse::<SocketAddr>() {
        (sa.ip().to_string(), sa.port())
    } else {
        match rest.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => {
                let port = port.parse::<u16>().map_err(|_| {
                    anyhow!("--trace {text}: the port {port:?} is not a number up to 65535")
                })?;
                (host.trim_matches(['[', ']']).to_owned(), port)
            }
            _ if rest.is_empty() => bail!("--trace {text}: no host"),
            _ => (rest.trim_matches(['[', ']']).to_owned(), default),
        }
    };
    if method == Method::Icmp && port != 0 {
        bail!("--trace {text}: an ICMP echo trace has no port");
    }
    Ok((method, host, port))
}

/// Runs the trace `args` asks for: exit 0 when every path reached the
/// destination, 1 when one did not (ping's rule), 2 for what cannot be
/// traced.
pub(crate) async fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let [text] = args.targets.as_slice() else {
        bail!("--trace traces one target: give exactly one");
    };
    if args.output == Output::Csv {
        bail!("--trace writes a table or JSON lines (-o json), not CSV");
    }
    for (given, flag) in [
        (args.duration.is_some(), "--duration"),
        (args.burst != 1, "--burst"),
        (args.size.is_some(), "--size"),
        (
            args.flows != 1,
            "--flows (a trace tries its own, up to --trace-flows)",
        ),
        (
            args.ttl.is_some(),
            "--ttl (a trace sets every TTL; --max-ttl caps them)",
        ),
    ] {
        if given {
            bail!("--trace does not take {flag}");
        }
    }
    let (method, host, port) = destination(text)?;
    let to = tokio::net::lookup_host((host.as_str(), port))
        .await
        .with_context(|| format!("cannot resolve host {host:?}"))?
        .find(|a| (!args.ipv4 || a.is_ipv4()) && (!args.ipv6 || a.is_ipv6()))
        .ok_or_else(|| anyhow!("host {host:?} has no address of the family asked for"))?;
    let settings = prober_trace::Settings {
        to,
        method,
        max_ttl: args.max_ttl,
        max_flows: args.trace_flows,
        timeout: args.timeout,
        confidence: args.trace_confidence / 100.0,
        count: u32::try_from(args.count.unwrap_or(10)).unwrap_or(u32::MAX),
        interval: args.interval.unwrap_or(Duration::from_secs(1)),
        known: Vec::new(),
    };
    let json = args.output == Output::Json;
    let mut out = std::io::stdout().lock();
    let trace = prober_trace::trace(&settings, |p| {
        if json && !args.quiet {
            let _ = serde_json::to_writer(&mut out, p);
            let _ = out.write_all(b"\n");
        }
    })
    .await
    .with_context(|| match method {
        prober_trace::Method::Icmp => format!("tracing {}", to.ip()),
        _ => format!("tracing {to}"),
    })?;
    if json {
        serde_json::to_writer(&mut out, &trace)?;
        out.write_all(b"\n")?;
    } else {
        out.write_all(prober_trace::report::human(&trace).as_bytes())?;
    }
    out.flush()?;
    Ok(if trace.reached() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::destination;

    #[test]
    fn a_trace_target_is_a_host_and_a_port() {
        use prober_trace::Method::{Icmp, Tcp, Udp};
        let d = |t: &str| destination(t).map_err(|e| e.to_string());
        assert_eq!(d("10.0.0.1").unwrap(), (Udp, "10.0.0.1".to_owned(), 33434));
        assert_eq!(
            d("udp://10.0.0.1:8707").unwrap(),
            (Udp, "10.0.0.1".to_owned(), 8707)
        );
        assert_eq!(
            d("trace://h.example").unwrap(),
            (Udp, "h.example".to_owned(), 33434)
        );
        assert_eq!(d("[::1]:7").unwrap(), (Udp, "::1".to_owned(), 7));
        assert_eq!(d("::1").unwrap(), (Udp, "::1".to_owned(), 33434));
        assert_eq!(d("tcp://h").unwrap(), (Tcp, "h".to_owned(), 80));
        assert_eq!(d("tcp://[::1]:443").unwrap(), (Tcp, "::1".to_owned(), 443));
        assert_eq!(d("icmp://h").unwrap(), (Icmp, "h".to_owned(), 0));
        assert!(d("icmp://h:7").unwrap_err().contains("has no port"));
        assert!(d("http://h").unwrap_err().contains("not http://"));
        assert!(d("h:port").unwrap_err().contains("not a number"));
    }
}
