//! `prober localize`: the links the mesh's lossy flows have in common,
//! ranked (prober-localize does the work; this reads the flags and
//! prints, or serves the page).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::cli::{LocalizeArgs, Output};

/// How long one query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) async fn localize(args: &LocalizeArgs) -> anyhow::Result<ExitCode> {
    if matches!(args.output, Output::Csv) {
        bail!("--output csv: localize writes a table (human) or JSON");
    }
    let p = prober_localize::prometheus::Prometheus::new(&args.prometheus, QUERY_TIMEOUT)?;
    let ask = prober_localize::Ask {
        probe: args.probe.clone(),
        window: args.window.clone(),
        at: args.at.clone(),
        settings: prober_localize::Settings {
            confidence: args.confidence / 100.0,
            lossy_flows: args.lossy_flows,
        },
        top: args.top,
    };
    if let Some(addr) = &args.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("--listen {addr}: cannot listen"))?;
        let at = listener.local_addr()?;
        eprintln!(
            "prober localize: the page at http://{at}/, its JSON at http://{at}/localize.json"
        );
        prober_localize::serve(listener, p, ask, stopped()).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let r = prober_localize::localize(&p, &ask).await?;
    if args.output == Output::Json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{}", r.table());
    }
    Ok(ExitCode::from(u8::from(r.named > 0)))
}

/// Resolves on SIGINT or SIGTERM.
async fn stopped() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
