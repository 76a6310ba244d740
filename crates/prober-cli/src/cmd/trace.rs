//! `prober run --trace TARGET`: the path to a target, hop by hop, with
//! every ECMP branch (prober-trace does the work; this reads the flags
//! and prints).

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};

use crate::cli::{Output, RunArgs};

/// The destination a `--trace` target names: `HOST`, `HOST:PORT`,
/// `[V6]:PORT`, or the same after `udp://` or `trace://`; the port is
/// [`prober_trace::DEFAULT_PORT`] unless given.
pub(crate) fn destination(text: &str) -> anyhow::Result<(String, u16)> {
    let rest = match text.split_once("://") {
        Some(("udp" | "trace", rest)) => rest,
        Some((scheme, _)) => bail!(
            "--trace traces UDP paths (udp://HOST[:PORT], trace://HOST[:PORT] or HOST), not {scheme}:// (TCP and ICMP traces are not built yet)"
        ),
        None => text,
    };
    let rest = rest.trim_end_matches('/');
    if let Ok(ip) = rest.parse::<IpAddr>() {
        return Ok((ip.to_string(), prober_trace::DEFAULT_PORT));
    }
    if let Ok(sa) = rest.parse::<SocketAddr>() {
        return Ok((sa.ip().to_string(), sa.port()));
    }
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => {
            let port = port.parse::<u16>().map_err(|_| {
                anyhow!("--trace {text}: the port {port:?} is not a number up to 65535")
            })?;
            Ok((host.trim_matches(['[', ']']).to_owned(), port))
        }
        _ if rest.is_empty() => bail!("--trace {text}: no host"),
        _ => Ok((
            rest.trim_matches(['[', ']']).to_owned(),
            prober_trace::DEFAULT_PORT,
        )),
    }
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
    let (host, port) = destination(text)?;
    let to = tokio::net::lookup_host((host.as_str(), port))
        .await
        .with_context(|| format!("cannot resolve host {host:?}"))?
        .find(|a| (!args.ipv4 || a.is_ipv4()) && (!args.ipv6 || a.is_ipv6()))
        .ok_or_else(|| anyhow!("host {host:?} has no address of the family asked for"))?;
    let settings = prober_trace::Settings {
        to,
        max_ttl: args.max_ttl,
        max_flows: args.trace_flows,
        timeout: args.timeout,
        confidence: args.trace_confidence / 100.0,
        count: u32::try_from(args.count.unwrap_or(10)).unwrap_or(u32::MAX),
        interval: args.interval.unwrap_or(Duration::from_secs(1)),
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
    .with_context(|| format!("tracing {to}"))?;
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
        let d = |t: &str| destination(t).map_err(|e| e.to_string());
        assert_eq!(d("10.0.0.1").unwrap(), ("10.0.0.1".to_owned(), 33434));
        assert_eq!(
            d("udp://10.0.0.1:8707").unwrap(),
            ("10.0.0.1".to_owned(), 8707)
        );
        assert_eq!(
            d("trace://h.example").unwrap(),
            ("h.example".to_owned(), 33434)
        );
        assert_eq!(d("[::1]:7").unwrap(), ("::1".to_owned(), 7));
        assert_eq!(d("::1").unwrap(), ("::1".to_owned(), 33434));
        assert!(d("tcp://h:1").unwrap_err().contains("not tcp://"));
        assert!(d("h:port").unwrap_err().contains("not a number"));
    }
}
