//! SIGINT and SIGTERM both cancel one root token.

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
