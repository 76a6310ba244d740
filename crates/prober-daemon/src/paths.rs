//! Paths in the daemon: a job with `trace_every` traces the path to each of
//! its `udp://`, `tcp://` and `icmp://` targets on that slow schedule, spread over it (every ECMP
//! branch, as `prober run --trace` finds them; prober-trace), and exports
//! how many branches each has, how many hops, and how often they changed
//! (docs/path.md). Traces run one at a time: every router answers one
//! sender about one ICMP error a second (Linux's default), so traces run
//! side by side would spend each other's answers.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// A target to trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Traced {
    /// Its job.
    pub(crate) job: String,
    /// Its URL without a flow (`udp://h:p`): every flow of it is one trace.
    pub(crate) target: String,
    /// Where traces go: for a `udp://` target its host, port
    /// [`prober_trace::DEFAULT_PORT`]; for `tcp://` its address (SYNs to
    /// the port its probes use); for `icmp://` its host.
    pub(crate) to: SocketAddr,
    /// How: UDP, TCP SYN or ICMP echo, as its probes go.
    pub(crate) method: prober_trace::Method,
    /// Where its flows' probes go: a flow is followed to this address
    /// and port.
    pub(crate) probed: SocketAddr,
    /// How often.
    pub(crate) every: Duration,
    /// Its branches' hops are exported as series (`trace_hops`).
    pub(crate) hops: bool,
    /// Each branch measured this many times after a trace, hop by hop
    /// (`trace_rounds`, mtr's `-c`): RTT and loss series per hop.
    pub(crate) rounds: u32,
    /// Its series' labels beside `probe` and `target` (the job's).
    pub(crate) labels: Vec<(String, String)>,
}

/// The branches of a path: each the hops' addresses, in order (`None`: no
/// answer at that TTL).
pub(crate) type Branches = Vec<Vec<Option<IpAddr>>>;

/// What the traces of a target found.
#[derive(Debug, Clone, Default)]
struct State {
    /// The branches of the last conclusive trace (of the first trace
    /// until one is).
    branches: Branches,
    changes: u64,
    traces: u64,
    /// Conclusive traces filed (none: `branches` are the first trace's).
    conclusive: u64,
    labels: Vec<(String, String)>,
    /// Export the branches' hops.
    hops: bool,
    /// Each flow's (its target, `udp://h:p#flow=I`) source address and
    /// branch (an index into `branches`), where following it told.
    flows: BTreeMap<String, (IpAddr, usize)>,
    /// The last trace's measures of each branch it found (`trace_rounds`):
    /// the branch's hops, then each hop's.
    measured: Vec<(Vec<Option<IpAddr>>, Vec<HopMeasure>)>,
}

/// One hop of a branch, as its measuring rounds saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct HopMeasure {
    /// Mean RTT of its answers, seconds (`None`: no answer).
    rtt: Option<f64>,
    /// Share of its probes unanswered.
    loss: f64,
}

/// The traced targets, their paths, and what to trace next.
#[derive(Debug)]
pub(crate) struct Paths {
    state: Mutex<BTreeMap<(String, String), State>>,
    wanted: watch::Sender<Vec<Traced>>,
    /// The source address and port of each running target's probes, by
    /// (job, target), where its probe keeps one ([`prober_core::Probe::source`]).
    sources: Mutex<BTreeMap<(String, String), SocketAddr>>,
    /// Where path changes go (the job's JSON lines file), once the daemon
    /// asks ([`Paths::changes`]).
    changed: Mutex<Option<mpsc::UnboundedSender<(String, serde_json::Value)>>>,
}

impl Default for Paths {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            wanted: watch::channel(Vec::new()).0,
            sources: Mutex::default(),
            changed: Mutex::default(),
        }
    }
}

impl Paths {
    /// Each path change from now on, as its job and a `path_change`
    /// record: `{"type": "path_change", "unix_ns", "job", "target", "old",
    /// "new"}`, each path its branches, each branch its hops' addresses
    /// (`null`: silent). Unbounded: a target changes at most once a trace.
    pub(crate) fn changes(&self) -> mpsc::UnboundedReceiver<(String, serde_json::Value)> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.changed.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
        rx
    }

    /// Notes where a running target's probes leave from (`None`: it
    /// stopped, or keeps no one source).
    pub(crate) fn source(&self, job: &str, target: &str, source: Option<SocketAddr>) {
        let mut sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (job.to_owned(), target.to_owned());
        match source {
            Some(s) => sources.insert(key, s),
            None => sources.remove(&key),
        };
    }

    /// The flows of a traced target (the target itself, or its
    /// `#flow=I`s) and their sources.
    fn flows_of(&self, t: &Traced) -> Vec<(String, SocketAddr)> {
        let sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        sources
            .iter()
            .filter(|((job, target), _)| {
                job == &t.job
                    && target
                        .strip_prefix(&t.target)
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with("#flow="))
            })
            .map(|((_, target), s)| (target.clone(), *s))
            .collect()
    }

    /// The branches a target's flows are followed against: the last
    /// conclusive trace's, in their exported order.
    fn branches_of(&self, t: &Traced) -> Option<Branches> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let s = state.get(&(t.job.clone(), t.target.clone()))?;
        (s.conclusive > 0).then(|| s.branches.clone())
    }

    /// Files the hop measures of a trace's branches.
    fn file_measures(&self, t: &Traced, measured: Vec<(Vec<Option<IpAddr>>, Vec<HopMeasure>)>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = state.get_mut(&(t.job.clone(), t.target.clone())) {
            s.measured = measured;
        }
    }

    /// Files which branch each flow took.
    fn file_flows(&self, t: &Traced, flows: BTreeMap<String, (IpAddr, usize)>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = state.get_mut(&(t.job.clone(), t.target.clone())) {
            s.flows = flows;
        }
    }

    /// Traces these targets from now on (a reload); the paths of others are
    /// forgotten.
    pub(crate) fn want(&self, targets: Vec<Traced>) {
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.retain(|(job, target), _| {
                targets.iter().any(|t| &t.job == job && &t.target == target)
            });
        }
        self.wanted.send_if_modified(|w| {
            let changed = *w != targets;
            *w = targets;
            changed
        });
    }

    /// Files a trace's branches; says whether the path changed. A trace
    /// is conclusive when it reached the destination on every branch and
    /// every hop answered: a hop without an answer (a router's ICMP limit,
    /// a lost probe) matches any router, so branches that differ only
    /// there would merge, and a branch would seem gone that was only
    /// silent. An inconclusive trace keeps the path it had (unless none
    /// was conclusive yet) and is never a change.
    fn file(&self, t: &Traced, branches: Branches, reached: bool) -> Option<(Branches, Branches)> {
        let conclusive = reached && branches.iter().flatten().all(Option::is_some);
        // In one order, so a branch keeps its number in the hop series
        // from trace to trace.
        let mut branches = branches;
        branches.sort();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let s = state.entry((t.job.clone(), t.target.clone())).or_default();
        s.labels.clone_from(&t.labels);
        s.hops = t.hops;
        s.traces += 1;
        if !conclusive {
            if s.conclusive == 0 {
                s.branches = branches;
            }
            return None;
        }
        // The first conclusive trace had no path before it to hold its
        // routers to (`known`, where `run` traces): it may have missed a
        // branch by chance. A second that finds all of its branches and
        // more completes it; it is no change.
        let completes = s.conclusive == 1 && grows(&s.branches, &branches);
        let changed = s.conclusive > 0 && !same(&s.branches, &branches) && !completes;
        s.conclusive += 1;
        let old = std::mem::replace(&mut s.branches, branches);
        if changed {
            s.changes += 1;
            let new = s.branches.clone();
            drop(state);
            if let Some(tx) = &*self.changed.lock().unwrap_or_else(PoisonError::into_inner) {
                let _ = tx.send((
                    t.job.clone(),
                    serde_json::json!({
                        "type": "path_change",
                        "unix_ns": prober_core::clock::unix_now_ns(),
                        "job": t.job,
                        "target": t.target,
                        "old": old,
                        "new": new,
                    }),
                ));
            }
            return Some((old, new));
        }
        None
    }
}

impl Paths {
    /// What the status page says of a target's path: its branches, hops
    /// (of the longest), and each branch as a line, for a hover.
    pub(crate) fn summary(&self, job: &str, target: &str) -> Option<(usize, usize, String)> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let s = state.get(&(job.to_owned(), target.to_owned()))?;
        let hops = s.branches.iter().map(Vec::len).max().unwrap_or(0);
        let lines: Vec<String> = s.branches.iter().map(|b| show_branch(b)).collect();
        Some((s.branches.len(), hops, lines.join("\n")))
    }
}

/// Whether two branches can be the same (a hop without an answer matches
/// any address).
fn fits(x: &[Option<IpAddr>], y: &[Option<IpAddr>]) -> bool {
    x.len() == y.len()
        && x.iter()
            .zip(y)
            .all(|(p, q)| p.is_none() || q.is_none() || p == q)
}

/// Whether two traces found the same branches, in whatever order (a hop
/// without an answer matches any address).
pub(crate) fn same(a: &Branches, b: &Branches) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.iter().any(|y| fits(x, y)))
}

/// Whether `new` has every branch of `old`, and more.
fn grows(old: &Branches, new: &Branches) -> bool {
    new.len() > old.len() && old.iter().all(|x| new.iter().any(|y| fits(x, y)))
}

/// A branch as a log line shows it: `10.0.0.1 > ??? > 10.0.0.9`.
fn show(b: &Branches) -> String {
    b.iter()
        .map(|hops| show_branch(hops))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// One branch: `10.0.0.1 > ??? > 10.0.0.9`.
fn show_branch(hops: &[Option<IpAddr>]) -> String {
    hops.iter()
        .map(|h| h.map_or_else(|| "???".to_owned(), |a| a.to_string()))
        .collect::<Vec<_>>()
        .join(" > ")
}

/// Traces the wanted targets, each once a period at its offset, one at a
/// time, until `stop`.
pub(crate) async fn run(paths: Arc<Paths>, host: String, stop: CancellationToken) {
    let mut wanted = paths.wanted.subscribe();
    let start = tokio::time::Instant::now();
    // Each target's next trace.
    let mut due: BTreeMap<(String, String), tokio::time::Instant> = BTreeMap::new();
    // Following flows needs a raw socket: said once.
    let mut warned = false;
    // Jobs whose traces the kernel refused a raw socket: said once each.
    let mut refused: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    // Jobs whose traces fell a whole period behind: said once each.
    let mut behind: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    loop {
        let targets = wanted.borrow_and_update().clone();
        due.retain(|k, _| targets.iter().any(|t| (&t.job, &t.target) == (&k.0, &k.1)));
        for t in &targets {
            due.entry((t.job.clone(), t.target.clone()))
                .or_insert_with(|| {
                    start + crate::spread::spread(&host, &t.job, &t.target, t.every)
                });
        }
        let next = targets
            .iter()
            .min_by_key(|t| due[&(t.job.clone(), t.target.clone())]);
        let Some(t) = next.cloned() else {
            tokio::select! {
                () = stop.cancelled() => return,
                r = wanted.changed() => if r.is_err() { return } else { continue },
            }
        };
        let key = (t.job.clone(), t.target.clone());
        let at = due[&key];
        tokio::select! {
            () = stop.cancelled() => return,
            r = wanted.changed() => { if r.is_err() { return } continue }
            () = tokio::time::sleep_until(at) => {}
        }
        // Traces run one after another: when a round of them takes longer
        // than the period, each starts late, and a path is checked less
        // often than asked.
        let late = tokio::time::Instant::now().saturating_duration_since(at);
        if late > t.every && behind.insert(t.job.clone()) {
            tracing::warn!(
                job = %t.job,
                "traces fall behind trace_every = {:?}: a trace started {:.0} s late, so paths are checked less often than asked (each trace waits on the routers' ICMP limits; raise trace_every, docs/path.md)",
                t.every,
                late.as_secs_f64()
            );
        }
        let began = tokio::time::Instant::now();
        let settings = prober_trace::Settings {
            to: t.to,
            method: t.method,
            max_ttl: 30,
            max_flows: 64,
            timeout: Duration::from_secs(1),
            // A trace every period for every target: at 95 % a node with
            // 15 peers would miss a branch somewhere every other period
            // and count it as a change; 99.9 % sends 11 flows through a
            // hop with one next hop seen, 20 with two.
            confidence: 0.999,
            // The branches, then each measured `trace_rounds` times (none
            // by default; the config allows it only with trace_hops): a
            // probe at every hop each round, 200 ms apart, so that a
            // router's ICMP burst (Linux: 6) covers a few rounds.
            count: t.rounds,
            interval: Duration::from_millis(200),
            // A branch seemingly gone is taken for gone only after as many
            // flows as would have found it: one missed by chance would be
            // counted as a change, and another when the next trace finds it.
            known: paths.branches_of(&t).unwrap_or_default(),
        };
        let traced = tokio::select! {
            () = stop.cancelled() => return,
            r = prober_trace::trace(&settings, |_| {}) => r,
        };
        match traced {
            Ok(trace) => {
                let branches: Branches = trace
                    .paths
                    .iter()
                    .map(|b| b.hops.iter().map(|h| h.addr).collect())
                    .collect();
                tracing::debug!(
                    job = %t.job, target = %t.target,
                    secs = began.elapsed().as_secs_f64(), branches = branches.len(),
                    reached = trace.reached(), flows = trace.flows,
                    "traced"
                );
                if t.rounds > 0 {
                    let measured = trace
                        .paths
                        .iter()
                        .map(|b| {
                            (
                                b.hops.iter().map(|h| h.addr).collect(),
                                b.hops
                                    .iter()
                                    .map(|h| HopMeasure {
                                        rtt: h.avg_ms.map(|ms| ms / 1e3),
                                        loss: h.loss_pct / 100.0,
                                    })
                                    .collect(),
                            )
                        })
                        .collect();
                    paths.file_measures(&t, measured);
                }
                if let Some((old, new)) = paths.file(&t, branches, trace.reached()) {
                    tracing::info!(
                        job = %t.job, target = %t.target,
                        "path changed: was {}, now {}", show(&old), show(&new)
                    );
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
                // TCP and ICMP traces need a raw socket: said once a job.
                if refused.insert(t.job.clone()) {
                    tracing::warn!(job = %t.job, %error, "cannot trace (tcp:// and icmp:// traces need root or CAP_NET_RAW)");
                }
            }
            Err(error) => {
                tracing::warn!(job = %t.job, target = %t.target, %error, "trace failed");
            }
        }
        if t.hops && t.method == prober_trace::Method::Udp {
            tokio::select! {
                () = stop.cancelled() => return,
                () = follow(&paths, &t, &mut warned) => {}
            }
        }
        due.insert(key, at + t.every);
    }
}

/// Follows each flow of `t` (`trace_hops`): which of its branches the
/// flow's own 5-tuple takes (prober-trace's `follow`), so that its loss
/// can be laid on its links (`prober localize`).
async fn follow(paths: &Paths, t: &Traced, warned: &mut bool) {
    let Some(branches) = paths.branches_of(t) else {
        return;
    };
    let flows = paths.flows_of(t);
    let sources: Vec<SocketAddr> = flows.iter().map(|(_, s)| *s).collect();
    match prober_trace::follow::follow(&branches, t.probed, &sources, Duration::from_secs(1)).await
    {
        Ok(found) => {
            let mut filed = BTreeMap::new();
            for ((target, source), f) in flows.into_iter().zip(found) {
                match f {
                    prober_trace::follow::Followed::Branch(b) => {
                        filed.insert(target, (source.ip(), b));
                    }
                    other => {
                        tracing::debug!(job = %t.job, %target, "flow not followed: {other:?}");
                    }
                }
            }
            paths.file_flows(t, filed);
        }
        Err(error) if !*warned => {
            *warned = true;
            tracing::warn!(job = %t.job, %error, "cannot follow the probe flows onto their branches (prober_path_flow)");
        }
        Err(_) => {}
    }
}

/// The paths on `/metrics`.
#[derive(Debug)]
pub(crate) struct PathCollector(pub(crate) Arc<Paths>);

impl Collector for PathCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let state = self
            .0
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if state.is_empty() {
            return Ok(());
        }
        let labels = |(job, target): &(String, String), s: &State| {
            let mut l = vec![
                ("probe".to_owned(), job.clone()),
                ("target".to_owned(), target.clone()),
            ];
            l.extend(s.labels.iter().cloned());
            l
        };
        // A hop's: its target's, its branch's number and its own (1 up).
        let hop_labels = |k: &(String, String), s: &State, branch: usize, hop: usize| {
            let mut l = labels(k, s);
            l.push(("path".to_owned(), (branch + 1).to_string()));
            l.push(("hop".to_owned(), (hop + 1).to_string()));
            l
        };
        let mut m = encoder.encode_descriptor(
            "prober_paths",
            "ECMP branches the last trace of a target found (trace_every)",
            None,
            MetricType::Gauge,
        )?;
        for (k, s) in &state {
            let n = i64::try_from(s.branches.len()).unwrap_or(i64::MAX);
            ConstGauge::new(n).encode(m.encode_family(&labels(k, s))?)?;
        }
        let mut m = encoder.encode_descriptor(
            "prober_path_hops",
            "Hops of the longest branch the last trace of a target found",
            None,
            MetricType::Gauge,
        )?;
        for (k, s) in &state {
            let n = s.branches.iter().map(Vec::len).max().unwrap_or(0);
            ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX))
                .encode(m.encode_family(&labels(k, s))?)?;
        }
        let mut m = encoder.encode_descriptor(
            "prober_path_changes",
            "Traces of a target that found other branches than the trace before",
            None,
            MetricType::Counter,
        )?;
        for (k, s) in &state {
            ConstCounter::new(s.changes).encode(m.encode_family(&labels(k, s))?)?;
        }
        let mut m = encoder.encode_descriptor(
            "prober_path_traces",
            "Traces of a target done",
            None,
            MetricType::Counter,
        )?;
        for (k, s) in &state {
            ConstCounter::new(s.traces).encode(m.encode_family(&labels(k, s))?)?;
        }
        if !state.values().any(|s| s.hops) {
            return Ok(());
        }
        let mut m = encoder.encode_descriptor(
            "prober_path_hop_info",
            "The routers of each branch of a target's path, 1 a hop (trace_hops): branch number (1 up, in address order), TTL and the address that answered",
            None,
            MetricType::Gauge,
        )?;
        for (k, s) in state.iter().filter(|(_, s)| s.hops) {
            for (b, hops) in s.branches.iter().enumerate() {
                for (h, addr) in hops.iter().enumerate() {
                    let Some(addr) = addr else { continue };
                    let mut l = hop_labels(k, s, b, h);
                    l.push(("addr".to_owned(), addr.to_string()));
                    ConstGauge::new(1).encode(m.encode_family(&l)?)?;
                }
            }
        }
        if state.values().any(|s| !s.measured.is_empty()) {
            for (name, help, read) in [
                (
                    "prober_path_hop_rtt_seconds",
                    "Mean RTT of each hop of each branch over the last trace's measuring rounds (trace_rounds), seconds: path and hop as prober_path_hop_info's",
                    (|m: &HopMeasure| m.rtt) as fn(&HopMeasure) -> Option<f64>,
                ),
                (
                    "prober_path_hop_loss_ratio",
                    "Share of each hop's probes unanswered over the last trace's measuring rounds (trace_rounds); a hop that loses more than a hop after it is its router limiting ICMP, not loss on the path",
                    |m: &HopMeasure| Some(m.loss),
                ),
            ] {
                let mut m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
                for (k, s) in state.iter().filter(|(_, s)| s.hops) {
                    for (b, hops) in s.branches.iter().enumerate() {
                        let Some((_, measures)) = s.measured.iter().find(|(h, _)| h == hops) else {
                            continue;
                        };
                        for (h, v) in measures.iter().enumerate() {
                            let Some(v) = read(v) else { continue };
                            ConstGauge::new(v).encode(m.encode_family(&hop_labels(k, s, b, h))?)?;
                        }
                    }
                }
            }
        }
        let mut m = encoder.encode_descriptor(
            "prober_path_flow",
            "Which branch each probe flow of a traced target takes, 1 a flow (trace_hops): its target (with #flow=I), the branch number of prober_path_hop_info, and the address it leaves from",
            None,
            MetricType::Gauge,
        )?;
        for ((job, _), s) in state.iter().filter(|(_, s)| s.hops) {
            for (target, (source, b)) in &s.flows {
                let mut l = labels(&(job.clone(), target.clone()), s);
                l.push(("path".to_owned(), (b + 1).to_string()));
                l.push(("source".to_owned(), source.to_string()));
                ConstGauge::new(1).encode(m.encode_family(&l)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(paths: &[&[Option<&str>]]) -> Branches {
        paths
            .iter()
            .map(|p| p.iter().map(|h| h.map(|a| a.parse().unwrap())).collect())
            .collect()
    }

    fn silent_one() -> Branches {
        b(&[&[None, Some("10.0.9.9")]])
    }

    /// The same branches in another order, or with a silent hop, are the
    /// same path; a branch gone, or another router, is a change.
    #[test]
    fn a_path_changes_when_its_branches_do() {
        let two = b(&[
            &[Some("10.0.1.1"), Some("10.0.9.9")],
            &[Some("10.0.2.1"), Some("10.0.9.9")],
        ]);
        let swapped = b(&[
            &[Some("10.0.2.1"), Some("10.0.9.9")],
            &[Some("10.0.1.1"), Some("10.0.9.9")],
        ]);
        let silent = b(&[
            &[None, Some("10.0.9.9")],
            &[Some("10.0.2.1"), Some("10.0.9.9")],
        ]);
        let one = b(&[&[Some("10.0.1.1"), Some("10.0.9.9")]]);
        let other = b(&[
            &[Some("10.0.1.1"), Some("10.0.9.9")],
            &[Some("10.0.3.1"), Some("10.0.9.9")],
        ]);
        assert!(same(&two, &swapped));
        assert!(same(&two, &silent));
        assert!(!same(&two, &one));
        assert!(!same(&two, &other));

        let paths = Paths::default();
        let t = Traced {
            job: "j".to_owned(),
            target: "udp://10.0.9.9:7".to_owned(),
            to: "10.0.9.9:7".parse().unwrap(),
            method: prober_trace::Method::Udp,
            probed: "10.0.9.9:8707".parse().unwrap(),
            every: Duration::from_secs(300),
            hops: false,
            rounds: 0,
            labels: Vec::new(),
        };
        assert!(
            paths.file(&t, two.clone(), true).is_none(),
            "a first trace is no change"
        );
        assert!(paths.file(&t, swapped, true).is_none());
        // Silent hops, or a destination not reached: not evidence of a change.
        assert!(paths.file(&t, silent_one(), true).is_none());
        assert!(paths.file(&t, one.clone(), false).is_none());
        let (old, new) = paths.file(&t, one.clone(), true).unwrap();
        assert!(same(&old, &two), "{old:?}");
        assert!(same(&new, &one));
        assert_eq!(
            paths.state.lock().unwrap()[&("j".to_owned(), t.target.clone())].changes,
            1
        );
        // A first trace that missed a branch: the second, finding it and
        // the first's, completes the path. After that, a branch gone is a
        // change, and so is a first trace's branch not found again.
        let t2 = Traced {
            target: "udp://10.0.9.9:8".to_owned(),
            ..t.clone()
        };
        assert!(paths.file(&t2, one.clone(), true).is_none());
        assert!(
            paths.file(&t2, two.clone(), true).is_none(),
            "a second trace that finds more completes the first"
        );
        assert!(paths.file(&t2, one.clone(), true).is_some());
        let t3 = Traced {
            target: "udp://10.0.9.9:9".to_owned(),
            ..t.clone()
        };
        let elsewhere = b(&[
            &[Some("10.0.3.1"), Some("10.0.9.9")],
            &[Some("10.0.2.1"), Some("10.0.9.9")],
        ]);
        assert!(paths.file(&t3, one.clone(), true).is_none());
        assert!(paths.file(&t3, elsewhere, true).is_some());
        // A reload that drops the target forgets its path.
        paths.want(Vec::new());
        assert!(paths.state.lock().unwrap().is_empty());
    }
}
