//! Signals of `prober run`: SIGINT and SIGTERM both cancel one root token;
//! SIGQUIT asks for interim statistics, as ping's Ctrl-\.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What a second SIGINT or SIGTERM does, where the first one leaves probes
/// in flight to their timeouts.
pub(crate) struct Drain {
    /// Said on stderr at the first signal: what the stop waits for.
    pub(crate) waiting: String,
    /// Cancelled at the second: the probes still in flight end at once,
    /// counted as timeouts, and the run writes its statistics.
    pub(crate) abandon: CancellationToken,
}

/// Set when a second signal abandoned the probes in flight: the run then
/// exits with status 130.
pub(crate) static ABANDONED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Cancels `token` on the first SIGINT or SIGTERM. A second signal exits at
/// once with status 130, for a user who does not want to wait for the drain;
/// with a [`Drain`], it abandons the probes in flight instead (they count
/// as timeouts), so the statistics of what is known are still written, and
/// exits 130 after at most a few seconds whatever happens.
///
/// The handlers run on a thread of their own, with a runtime of its own:
/// `prober run` often runs on one runtime thread, which a write to a
/// standard output nobody reads can hold (`prober run -o json | less`,
/// not scrolled), and a second Ctrl-C must still end the process then.
///
/// Both handlers are in place when this returns, not when the thread first
/// runs: a signal that comes right after start-up is caught, instead of
/// taking the default action and killing the process with nothing written.
pub(crate) fn cancel_on_signals(token: CancellationToken, drain: Option<Drain>) {
    let (ready, listening) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("prober-signals".to_owned())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            {
                Ok(rt) => rt,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGTERM and SIGINT");
                    let _ = ready.send(());
                    return;
                }
            };
            runtime.block_on(wait_for_signals(token, drain, ready));
        });
    match spawned {
        Ok(_) => {
            let _ = listening.recv();
        }
        Err(error) => tracing::warn!(%error, "cannot listen for SIGTERM and SIGINT"),
    }
}

async fn wait_for_signals(
    token: CancellationToken,
    drain: Option<Drain>,
    ready: std::sync::mpsc::Sender<()>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = signal(SignalKind::terminate()).and_then(|term| {
        let int = signal(SignalKind::interrupt())?;
        Ok((term, int))
    });
    let _ = ready.send(());
    let (mut term, mut int) = match handlers {
        Ok(h) => h,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM and SIGINT");
            return;
        }
    };
    for round in 0..2 {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        if round == 0 {
            tracing::debug!("stopping: waiting for probes in flight");
            if let Some(d) = &drain {
                eprintln!("prober: stopping: {} (Ctrl-C again to stop now)", d.waiting);
            }
            token.cancel();
        } else if let Some(d) = &drain {
            eprintln!("prober: stopping now: probes still in flight count as timeouts");
            ABANDONED.store(true, std::sync::atomic::Ordering::SeqCst);
            d.abandon.cancel();
            // The statistics are written within moments; a standard output
            // nobody reads must not keep the process alive.
            std::thread::sleep(std::time::Duration::from_secs(3));
            std::process::exit(130);
        } else {
            std::process::exit(130);
        }
    }
}

/// A receiver that gets a message on every SIGQUIT; the run prints interim
/// statistics and goes on (the default action would kill it and lose the
/// results).
pub(crate) fn interim_on_sigquit() -> Option<mpsc::Receiver<()>> {
    let mut quit = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::quit()) {
        Ok(s) => s,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGQUIT");
            return None;
        }
    };
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        while quit.recv().await.is_some() {
            if tx.send(()).await.is_err() {
                break;
            }
        }
    });
    Some(rx)
}
