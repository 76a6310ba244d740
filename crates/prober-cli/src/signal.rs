//! Signals of `prober run`: SIGINT and SIGTERM both cancel one root token;
//! SIGQUIT asks for interim statistics, as ping's Ctrl-\.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Cancels `token` on the first SIGINT or SIGTERM. A second signal exits at
/// once with status 130, for a user who does not want to wait for the drain.
pub(crate) fn cancel_on_signals(token: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGTERM");
                    return;
                }
            };
        for round in 0..2 {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            if round == 0 {
                tracing::debug!("stopping: waiting for probes in flight");
                token.cancel();
            } else {
                std::process::exit(130);
            }
        }
    })
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
