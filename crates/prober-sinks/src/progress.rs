//! A progress line for long quiet runs on a terminal (indicatif).

use std::io;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use prober_core::{Context, Sample, Sink, Summary, TargetEntry};

/// A one-line progress display on stderr: probes done (of the total, when
/// the run is bounded by count), replies and loss so far. indicatif draws
/// nothing when stderr is not a terminal, so pipes and files get none.
#[derive(Debug)]
pub struct ProgressSink {
    bar: ProgressBar,
}

impl ProgressSink {
    /// A progress line for `total` probes (`None`: unbounded, by time or
    /// until Ctrl-C), drawn on stderr at most 10 times a second.
    pub fn new(total: Option<u64>) -> Self {
        let target = ProgressDrawTarget::stderr_with_hz(10);
        let bar = match total {
            Some(n) => ProgressBar::with_draw_target(Some(n), target).with_style(
                ProgressStyle::with_template("{pos}/{len} probes {wide_bar} {msg} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            ),
            None => ProgressBar::with_draw_target(None, target).with_style(
                ProgressStyle::with_template("{pos} probes {msg} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        Self { bar }
    }
}

impl Sink for ProgressSink {
    fn record(&mut self, cx: &Context<'_>, _t: &TargetEntry, _s: &Sample) -> io::Result<()> {
        self.bar.inc(1);
        let (mut sent, mut ok) = (0, 0);
        for t in cx.targets.values() {
            sent += t.stats.tally.sent;
            ok += t.stats.tally.ok;
        }
        if sent > 0 {
            let loss = (sent - ok) as f64 * 100.0 / sent as f64;
            self.bar.set_message(format!("{ok} ok, {loss:.1}% loss"));
        }
        Ok(())
    }

    fn finish(&mut self, _cx: &Context<'_>, _summaries: &[Summary]) -> io::Result<()> {
        self.bar.finish_and_clear();
        Ok(())
    }
}
