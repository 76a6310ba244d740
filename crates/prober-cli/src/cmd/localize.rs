//! `prober localize`: the links the mesh's lossy flows have in common,
//! ranked (prober-localize does the work; this reads the flags and
//! prints).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;

use crate::cli::{LocalizeArgs, Output};

/// How long one query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) async fn localize(args: &LocalizeArgs) -> anyhow::Result<ExitCode> {
    if matches!(args.output, Output::Csv) {
        bail!("--output csv: localize writes a table (human) or JSON");
    }
    let p = prober_localize::prometheus::Prometheus::new(&args.prometheus, QUERY_TIMEOUT)?;
    let got = prober_localize::prometheus::gather(&p, &args.probe, &args.window).await?;
    if got.flows.is_empty() {
        bail!(
            "no probe flow with a followed path in {} (jobs matching {:?}): the daemons' udp:// jobs need trace_every and trace_hops = true, and a trace done (docs/path.md)",
            args.prometheus,
            args.probe
        );
    }
    let settings = prober_localize::Settings {
        confidence: args.confidence / 100.0,
        lossy_flows: args.lossy_flows,
    };
    let ranked = prober_localize::rank(&got.flows, settings);
    let named = ranked.iter().filter(|s| s.named).count();
    let lossy = got.flows.iter().filter(|f| f.lossy()).count();
    let shown: Vec<_> = ranked.iter().take(args.top).collect();
    if args.output == Output::Json {
        let v = serde_json::json!({
            "type": "localize",
            "window": args.window,
            "flows": got.flows.len(),
            "lossy_flows": lossy,
            "unmapped_flows": got.unmapped,
            "named": named,
            "links": shown,
        });
        println!("{v}");
    } else {
        println!(
            "{} flows over {} ({} lossy, {} without a followed path); {} links named",
            got.flows.len(),
            args.window,
            lossy,
            got.unmapped,
            named
        );
        if !shown.is_empty() {
            println!(
                "{:>4}  {:<36} {:>8} {:>6} {:>6} {:>8} {:>8} {:>7}  named",
                "rank", "link", "votes", "lossy", "clean", "loss%", "others%", "conf%"
            );
        }
        for s in &shown {
            println!(
                "{:>4}  {:<36} {:>8.1} {:>6} {:>6} {:>8.3} {:>8.3} {:>7.3}  {}",
                s.rank,
                s.link.to_string(),
                s.votes,
                s.lossy_flows,
                s.clean_flows,
                s.loss * 100.0,
                s.others_loss * 100.0,
                s.confidence * 100.0,
                if s.named { "yes" } else { "" }
            );
        }
    }
    Ok(ExitCode::from(u8::from(named > 0)))
}
