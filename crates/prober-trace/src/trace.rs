//! Tracing a path: exploring every ECMP branch with the Multipath
//! Detection Algorithm's stopping rule, then measuring each branch hop by
//! hop as mtr does.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::flow::{Flow, Heard, Kind, Method, now_ns};
use crate::mda::flows_needed;

/// How to trace.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where to: the destination and the port probes go to (for UDP a
    /// closed port, which answers Port Unreachable: traceroute's 33434;
    /// for TCP an open or a closed one; ICMP has none).
    pub to: SocketAddr,
    /// UDP, TCP SYN or ICMP echo probes.
    pub method: Method,
    /// The last TTL tried.
    pub max_ttl: u8,
    /// The most flows (source ports) tried to find branches.
    pub max_flows: u16,
    /// How long a probe waits for its answer.
    pub timeout: Duration,
    /// How sure that no branch was missed at any hop (0.95).
    pub confidence: f64,
    /// Probes per hop of each branch when measuring (mtr's `-c`).
    pub count: u32,
    /// Time between measuring rounds (mtr's `-i`).
    pub interval: Duration,
    /// The branches an earlier trace of the same destination found (each
    /// its hops' addresses, `None`: silent), or none. The stopping rule
    /// takes each router to have at least the next hops they show after
    /// it, so a branch is taken for gone only once as many flows passed
    /// the router as would have found it: without it, a branch missed by
    /// chance (one trace in a thousand at 99.9 %) reads as a path change.
    pub known: Vec<Vec<Option<IpAddr>>>,
}

/// Which part of a trace a probe belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Finding the branches.
    Explore,
    /// Measuring each branch.
    Measure,
}

/// One probe and what answered it, for the JSON lines.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeRecord {
    /// The record's type in JSON lines.
    #[serde(rename = "type")]
    pub kind_of_record: &'static str,
    /// Exploring or measuring.
    pub phase: Phase,
    /// The flow: its source port.
    pub flow: u16,
    /// The probe's TTL (IPv6 hop limit).
    pub ttl: u8,
    /// Who answered, if anyone did.
    pub from: Option<IpAddr>,
    /// What answered.
    pub answer: Option<Kind>,
    /// From the kernel's send stamp to the kernel's receive stamp of the
    /// answer (user-space clocks where a stamp is missing), ns.
    pub rtt_ns: Option<u64>,
}

impl ProbeRecord {
    /// The record of a probe of `flow` (a source port) at `ttl`, and its
    /// answer.
    fn of(phase: Phase, flow: u16, ttl: u8, a: Option<Answer>) -> Self {
        Self {
            kind_of_record: "trace_probe",
            phase,
            flow,
            ttl,
            from: a.and_then(|a| a.from),
            answer: a.map(|a| a.kind),
            rtt_ns: a.map(|a| a.rtt_ns),
        }
    }
}

/// One hop of a branch, measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HopStats {
    /// Its TTL.
    pub ttl: u8,
    /// Who answered there (the first seen; `None`: no answer at all).
    pub addr: Option<IpAddr>,
    /// Others that answered at the same TTL of the same flow (a route
    /// that changed while measuring).
    pub also: Vec<IpAddr>,
    /// What the last answer was.
    pub answer: Option<Kind>,
    /// Probes sent and answered.
    pub sent: u32,
    /// Answers.
    pub received: u32,
    /// RTTs in ms: the last, mean, best, worst and standard deviation.
    pub last_ms: Option<f64>,
    /// Mean.
    pub avg_ms: Option<f64>,
    /// Best.
    pub best_ms: Option<f64>,
    /// Worst.
    pub worst_ms: Option<f64>,
    /// Standard deviation (of the population, as mtr gives it).
    pub stdev_ms: Option<f64>,
    /// Share of probes unanswered, in %.
    pub loss_pct: f64,
    /// This hop lost more than a later hop of the branch: the extra is the
    /// router limiting its own ICMP (Linux's `icmp_ratelimit`, a router's
    /// control-plane policer), not packets lost on the way.
    pub rate_limited: bool,
}

/// One ECMP branch: the flows that take it and its hops.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Branch {
    /// Source ports of the flows that took this branch.
    pub flows: Vec<u16>,
    /// Its hops, by TTL.
    pub hops: Vec<HopStats>,
    /// The destination answered at its last hop.
    pub reached: bool,
}

/// The addresses seen at one TTL while exploring.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Level {
    /// The TTL.
    pub ttl: u8,
    /// Every address that answered there.
    pub addresses: Vec<IpAddr>,
    /// Flows sent through it.
    pub flows: u32,
}

/// A whole trace.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Trace {
    /// The record's type in JSON lines.
    #[serde(rename = "type")]
    pub kind_of_record: &'static str,
    /// The destination.
    pub to: SocketAddr,
    /// How it was probed.
    pub method: Method,
    /// Every branch found.
    pub paths: Vec<Branch>,
    /// Every TTL explored.
    pub levels: Vec<Level>,
    /// Flows tried.
    pub flows: u32,
    /// The confidence the stopping rule held, where the flow cap did not
    /// cut it short.
    pub confidence: f64,
    /// The flow cap stopped exploring before the rule was met at some TTL.
    pub capped: bool,
    /// Answers whose quote was too short to say which probe they answer.
    pub unmatched: u64,
    /// Answers timed by user-space clocks, a kernel stamp missing (the
    /// others run from the kernel's send stamp to its receive stamp).
    pub user_timed: u64,
}

impl Trace {
    /// Whether every branch reached the destination.
    pub fn reached(&self) -> bool {
        !self.paths.is_empty() && self.paths.iter().all(|b| b.reached)
    }
}

/// An answer to one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answer {
    from: Option<IpAddr>,
    kind: Kind,
    rtt_ns: u64,
}

/// A probe sent and not yet answered.
#[derive(Debug)]
struct Pending {
    slot: usize,
    sent_ns: u64,
    tx_ns: Option<u64>,
}

/// The flows, their listeners, and what they heard.
struct Prober {
    to: SocketAddr,
    /// The address every flow is bound to.
    from: IpAddr,
    method: Method,
    /// The first TCP or ICMP flow's identifier; each next flow's is one more.
    first_id: u16,
    timeout: Duration,
    flows: Vec<Arc<Flow>>,
    /// Per flow, the probe number of each datagram sent, in order (the
    /// kernel numbers transmit stamps by send).
    sent: Vec<Vec<u32>>,
    heard: mpsc::UnboundedReceiver<Heard>,
    tell: mpsc::UnboundedSender<Heard>,
    listeners: JoinSet<()>,
    next_id: u32,
    unmatched: u64,
    user_timed: u64,
    /// Stamps of probes whose round has ended, by number.
    late_tx: HashMap<u32, u64>,
}

impl Prober {
    fn new(to: SocketAddr, method: Method, timeout: Duration) -> io::Result<Self> {
        let (tell, heard) = mpsc::unbounded_channel();
        // Every flow leaves from one address: for raw sockets the one the
        // route to `to` takes, asked once.
        let from = match method {
            Method::Udp => prober_sys::mark::bind_addr(&Default::default(), to.is_ipv6()).ip(),
            Method::Tcp | Method::Icmp => crate::flow::source_for(to)?,
        };
        // Source ports or echo identifiers from the top of the ephemeral
        // range, starting where the clock says, so two traces at once
        // rarely share one.
        let first_id = 40_000 + u16::try_from(now_ns() / 1000 % 20_000).unwrap_or(0);
        Ok(Self {
            to,
            from,
            method,
            first_id,
            timeout,
            flows: Vec::new(),
            sent: Vec::new(),
            heard,
            tell,
            listeners: JoinSet::new(),
            next_id: 0,
            unmatched: 0,
            user_timed: 0,
            late_tx: HashMap::new(),
        })
    }

    fn add_flow(&mut self) -> io::Result<usize> {
        let i = self.flows.len();
        let id = self
            .first_id
            .wrapping_add(u16::try_from(i).unwrap_or(u16::MAX));
        let flow = Arc::new(Flow::open(self.to, self.from, self.method, id)?);
        let (f, tell) = (Arc::clone(&flow), self.tell.clone());
        self.listeners.spawn(async move { f.listen(i, tell).await });
        self.flows.push(flow);
        self.sent.push(Vec::new());
        Ok(i)
    }

    /// Sends one probe for each (flow, TTL) and waits for their answers,
    /// up to the timeout; `None` where none came.
    async fn round(&mut self, probes: &[(usize, u8)]) -> io::Result<Vec<Option<Answer>>> {
        let mut pending: HashMap<u32, Pending> = HashMap::new();
        for (slot, &(flow, ttl)) in probes.iter().enumerate() {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            let sent_ns = now_ns();
            self.flows[flow].send(ttl, id)?;
            self.sent[flow].push(id);
            pending.insert(
                id,
                Pending {
                    slot,
                    sent_ns,
                    tx_ns: None,
                },
            );
        }
        let mut out = vec![None; probes.len()];
        let mut left = probes.len();
        let deadline = tokio::time::Instant::now() + self.timeout;
        while left > 0 {
            let heard = tokio::select! {
                h = self.heard.recv() => h,
                () = tokio::time::sleep_until(deadline) => break,
            };
            let Some(heard) = heard else { break };
            match heard {
                Heard::Sent { flow, key, ns } => {
                    let Some(&id) = self.sent[flow].get(key as usize) else {
                        continue;
                    };
                    match pending.get_mut(&id) {
                        Some(p) => p.tx_ns = Some(ns),
                        None => {
                            self.late_tx.insert(id, ns);
                        }
                    }
                }
                Heard::Answer { id: None, .. } => self.unmatched += 1,
                Heard::Answer {
                    id: Some(id),
                    from,
                    kind,
                    ns,
                    kernel,
                } => {
                    let Some(p) = pending.remove(&id) else {
                        continue; // a late or duplicate answer
                    };
                    // The kernel's send stamp may come after the answer is
                    // read; without it, user space's send time.
                    let sent = p.tx_ns.or_else(|| self.late_tx.remove(&id));
                    let rtt_ns = match (sent, kernel) {
                        (Some(t), true) if ns >= t => ns - t,
                        _ => {
                            self.user_timed += 1;
                            ns.saturating_sub(p.sent_ns)
                        }
                    };
                    out[p.slot] = Some(Answer { from, kind, rtt_ns });
                    left -= 1;
                }
            }
        }
        self.late_tx.clear();
        Ok(out)
    }

    /// As [`Prober::round`], and the probes that got no answer once more
    /// (an answer lost to a router's ICMP rate limit comes back later).
    async fn round_with_retry(
        &mut self,
        probes: &[(usize, u8)],
    ) -> io::Result<Vec<Option<Answer>>> {
        let mut out = self.round(probes).await?;
        let silent: Vec<usize> = (0..out.len()).filter(|&i| out[i].is_none()).collect();
        if !silent.is_empty() {
            let again: Vec<(usize, u8)> = silent.iter().map(|&i| probes[i]).collect();
            let more = self.round(&again).await?;
            for (i, a) in silent.into_iter().zip(more) {
                out[i] = a;
            }
        }
        Ok(out)
    }
}

/// A flow's path as explored: the answer at each TTL from 1.
#[derive(Debug, Clone, Default)]
struct Explored {
    hops: Vec<Option<Answer>>,
    /// The path ended (destination reached, or unreachable) at the last hop.
    ended: bool,
}

/// Traces `s.to`: finds every branch (the MDA's stopping rule per router),
/// then measures each branch `s.count` times. `record` gets every probe.
///
/// # Errors
/// A socket that cannot be opened or sent on.
pub async fn trace(s: &Settings, mut record: impl FnMut(&ProbeRecord)) -> io::Result<Trace> {
    let mut p = Prober::new(s.to, s.method, s.timeout)?;
    let mut paths: Vec<Explored> = Vec::new();
    let mut capped = false;
    let mut silent_run = 0u8;
    let mut levels = Vec::new();
    let prior = next_hops(&s.known);
    let max_flows = usize::from(s.max_flows.max(1));
    let first = usize::try_from(flows_needed(1, s.confidence))
        .unwrap_or(6)
        .min(max_flows);
    for _ in 0..first {
        p.add_flow()?;
        paths.push(Explored::default());
    }
    for ttl in 1..=s.max_ttl {
        loop {
            // Every flow still on its way, probed at every TTL up to this
            // one (a flow added now, at all of them).
            let mut probes = Vec::new();
            for (i, e) in paths.iter().enumerate() {
                if e.ended {
                    continue;
                }
                for t in (e.hops.len() + 1)..=usize::from(ttl) {
                    probes.push((i, u8::try_from(t).unwrap_or(u8::MAX)));
                }
            }
            // In TTL order per flow, so a path that ends stops taking answers.
            let answers = p.round_with_retry(&probes).await?;
            for (&(i, t), a) in probes.iter().zip(answers) {
                record(&ProbeRecord::of(Phase::Explore, p.flows[i].port, t, a));
                let e = &mut paths[i];
                if e.ended || e.hops.len() + 1 != usize::from(t) {
                    continue;
                }
                e.hops.push(a);
                e.ended = a.is_some_and(|a| a.kind.ends());
            }
            // The stopping rule at every TTL so far, per vertex: enough
            // flows through each router for the next hops seen after it.
            let short = flows_short(&paths, ttl, s.confidence, &prior);
            if short == 0 {
                break;
            }
            if paths.len() >= max_flows {
                capped = true;
                break;
            }
            let want = paths.len().saturating_add(short).min(max_flows);
            while paths.len() < want {
                p.add_flow()?;
                paths.push(Explored::default());
            }
        }
        let answered = paths.iter().any(|e| {
            e.hops
                .get(usize::from(ttl) - 1)
                .is_some_and(Option::is_some)
        });
        silent_run = if answered { 0 } else { silent_run + 1 };
        if paths.iter().all(|e| e.ended) || silent_run >= 3 {
            break;
        }
    }
    confirm_ends(&mut p, &mut paths, &mut record).await?;
    let deepest = paths.iter().map(|e| e.hops.len()).max().unwrap_or(0);
    for t in 1..=deepest {
        let ttl = u8::try_from(t).unwrap_or(u8::MAX);
        levels.push(Level {
            ttl,
            addresses: distinct(&paths, ttl),
            flows: u32::try_from(paths.iter().filter(|e| e.hops.len() >= t).count()).unwrap_or(0),
        });
    }
    let groups = branches(&paths);
    let hops = measure(&mut p, s, &groups, &mut record).await?;
    let paths_out = merge(
        groups
            .iter()
            .zip(hops)
            .map(|(g, mut hops)| {
                // A hop silent while exploring that the destination answered
                // while measuring: the branch ends there (its exploring
                // probes met the destination's ICMP limit).
                if let Some(end) = hops.iter().position(|h| {
                    h.addr == Some(s.to.ip()) && h.answer.is_some_and(Kind::is_destination)
                }) {
                    hops.truncate(end + 1);
                }
                Branch {
                    flows: g.flows.iter().map(|&i| p.flows[i].port).collect(),
                    reached: hops
                        .last()
                        .and_then(|h| h.answer)
                        .is_some_and(Kind::is_destination)
                        || g.reached,
                    hops,
                }
            })
            .collect(),
    );
    Ok(Trace {
        kind_of_record: "trace",
        to: s.to,
        method: s.method,
        paths: paths_out,
        levels,
        flows: u32::try_from(paths.len()).unwrap_or(u32::MAX),
        confidence: s.confidence,
        capped,
        unmatched: p.unmatched,
        user_timed: p.user_timed,
    })
}

/// Rounds of [`confirm_ends`] at most, a second each.
const CONFIRM_TRIES: usize = 8;

/// The TTL at which a flow reached the destination (its last hop), if it
/// did.
fn reached_at(e: &Explored) -> Option<usize> {
    let last = e.hops.last().copied().flatten()?;
    (e.ended && last.kind.is_destination()).then_some(e.hops.len())
}

/// Whether two flows' first `n` hops can be the same path (a hop without
/// an answer matches any).
fn compatible(a: &Explored, b: &Explored, n: usize) -> bool {
    (0..n).all(|i| {
        let (x, y) = (
            a.hops.get(i).copied().flatten().and_then(|h| h.from),
            b.hops.get(i).copied().flatten().and_then(|h| h.from),
        );
        x.is_none() || y.is_none() || x == y
    })
}

/// A destination that limits its ICMP (Linux: a burst of 6, then one a
/// second to a host) leaves some flows' probes at its distance without an
/// answer; such a flow goes on, and "reaches" the destination at a later
/// TTL, since every probe past the last router goes there. Where a flow's
/// hops before the destination are silent and a flow with the same hops
/// before them reached it sooner, the flow's probe at that sooner TTL is
/// sent again, a second apart (the limit's refill: one such flow is
/// confirmed a second), up to [`CONFIRM_TRIES`] times; when the destination
/// answers it, the flow ends there. Without an answer the flow keeps the
/// TTL it was answered at: no path is made up.
async fn confirm_ends(
    p: &mut Prober,
    paths: &mut [Explored],
    record: &mut impl FnMut(&ProbeRecord),
) -> io::Result<()> {
    for _ in 0..CONFIRM_TRIES {
        let mut todo: Vec<(usize, usize)> = Vec::new();
        for (i, e) in paths.iter().enumerate() {
            let Some(end) = reached_at(e) else { continue };
            let mut start = end;
            while start > 1 && e.hops[start - 2].is_none() {
                start -= 1;
            }
            let sooner = paths
                .iter()
                .filter_map(|o| reached_at(o).map(|at| (o, at)))
                .filter(|&(o, at)| at >= start && at < end && compatible(o, e, at - 1))
                .map(|(_, at)| at)
                .min();
            if let Some(at) = sooner {
                todo.push((i, at));
            }
        }
        if todo.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let probes: Vec<(usize, u8)> = todo
            .iter()
            .map(|&(i, at)| (i, u8::try_from(at).unwrap_or(u8::MAX)))
            .collect();
        let answers = p.round(&probes).await?;
        for (&(i, ttl), a) in probes.iter().zip(answers) {
            record(&ProbeRecord::of(Phase::Explore, p.flows[i].port, ttl, a));
            if let Some(a) = a
                && a.kind.is_destination()
            {
                let e = &mut paths[i];
                e.hops.truncate(usize::from(ttl) - 1);
                e.hops.push(Some(a));
            }
        }
    }
    Ok(())
}

/// Branches with the same hops as one (a branch cut short by measuring can
/// become another's twin): their flows together, the first one's figures.
fn merge(branches: Vec<Branch>) -> Vec<Branch> {
    let mut out: Vec<Branch> = Vec::new();
    for b in branches {
        let key: Vec<Option<IpAddr>> = b.hops.iter().map(|h| h.addr).collect();
        match out
            .iter_mut()
            .find(|o| o.hops.iter().map(|h| h.addr).eq(key.iter().copied()))
        {
            Some(o) => {
                o.flows.extend(b.flows);
                o.reached |= b.reached;
            }
            None => out.push(b),
        }
    }
    out
}

/// How many more flows the MDA's stopping rule asks for, applied per
/// vertex as the MDA does: at each TTL `t` up to `ttl`, every router that
/// answered at `t - 1` (the source, at the first) must have sent `n_k` of
/// the flows through it on to `t`, `k` the next hops they met there. A
/// router short by `d` flows, through which a share `s` of all the flows
/// goes, asks for `d / s` more, rounded up: a flow's hash picks its router,
/// so only that share of the flows added will pass it. Each TTL on its
/// own would undercount a router that few flows reach (a branch taken by
/// one flow in ten would have its next hops judged by the others).
///
/// `prior` (from [`next_hops`]) is the next hops each router had in an
/// earlier trace: a router is held to `n_k` for at least that many.
fn flows_short(paths: &[Explored], ttl: u8, confidence: f64, prior: &Prior) -> usize {
    let need = |seen: usize| {
        usize::try_from(flows_needed(
            u32::try_from(seen).unwrap_or(u32::MAX),
            confidence,
        ))
        .unwrap_or(usize::MAX) as f64
    };
    let total = paths.len().max(1) as f64;
    let mut short = 0.0f64;
    for t in 1..=usize::from(ttl) {
        // The flows probed at t, by the router they passed at t - 1; those
        // silent there (a router's ICMP limit) are counted with each router
        // in its share, as they most likely split: counting them nowhere
        // would ask for flows that the limit leaves silent too.
        let mut by_vertex: BTreeMap<Option<IpAddr>, Vec<&Explored>> = BTreeMap::new();
        let mut silent = 0usize;
        for e in paths.iter().filter(|e| e.hops.len() >= t) {
            let vertex = if t == 1 {
                None
            } else {
                match e.hops[t - 2] {
                    Some(a) if !a.kind.ends() => a.from,
                    Some(_) => continue,
                    None => {
                        silent += 1;
                        continue;
                    }
                }
            };
            by_vertex.entry(vertex).or_default().push(e);
        }
        let known: usize = by_vertex.values().map(Vec::len).sum();
        for (vertex, flows) in &by_vertex {
            let next = distinct(flows.iter().copied(), u8::try_from(t).unwrap_or(u8::MAX));
            let before = prior.get(&(t, *vertex)).map_or(0, |n| n.len());
            let through = flows.len() as f64 * (1.0 + silent as f64 / known.max(1) as f64);
            let deficit = need(next.len().max(before)) - through;
            if deficit > 0.0 {
                short = short.max(deficit / (through / total));
            }
        }
    }
    short.ceil() as usize
}

/// Each router's next hops in branches found before, by the TTL of those
/// next hops and the router (`None`: the source, at TTL 1).
type Prior = BTreeMap<(usize, Option<IpAddr>), std::collections::BTreeSet<IpAddr>>;

/// The next hops each router of `branches` has in them (a silent hop is
/// no router, and no next hop).
fn next_hops(branches: &[Vec<Option<IpAddr>>]) -> Prior {
    let mut prior = Prior::new();
    for b in branches {
        for (i, next) in b.iter().enumerate() {
            let vertex = match i {
                0 => None,
                _ => match b[i - 1] {
                    Some(a) => Some(a),
                    None => continue,
                },
            };
            if let Some(next) = next {
                prior.entry((i + 1, vertex)).or_default().insert(*next);
            }
        }
    }
    prior
}

/// The addresses that answered the flows at `ttl`, each once, in order.
fn distinct<'a>(paths: impl IntoIterator<Item = &'a Explored>, ttl: u8) -> Vec<IpAddr> {
    let mut seen: Vec<IpAddr> = paths
        .into_iter()
        .filter_map(|e| e.hops.get(usize::from(ttl) - 1).copied().flatten())
        .filter_map(|a| a.from)
        .collect();
    seen.sort();
    seen.dedup();
    seen
}

/// Flows that took the same path.
#[derive(Debug)]
struct Group {
    /// The path: who answered at each TTL (`None`: nobody, for every flow).
    hops: Vec<Option<IpAddr>>,
    /// The flows (indices).
    flows: Vec<usize>,
    /// Its flows reached the destination.
    reached: bool,
}

/// The flows grouped by path. A TTL where a flow got no answer matches
/// any address there (a probe lost, not another path); the groups with
/// the most answers are formed first.
fn branches(paths: &[Explored]) -> Vec<Group> {
    let mut order: Vec<usize> = (0..paths.len()).collect();
    let known = |i: usize| paths[i].hops.iter().filter(|a| a.is_some()).count();
    order.sort_by_key(|&i| std::cmp::Reverse((known(i), paths[i].hops.len())));
    let mut groups: Vec<Group> = Vec::new();
    for i in order {
        let hops: Vec<Option<IpAddr>> = paths[i]
            .hops
            .iter()
            .map(|a| a.and_then(|a| a.from))
            .collect();
        let reached = paths[i]
            .hops
            .last()
            .copied()
            .flatten()
            .is_some_and(|a| a.kind.is_destination());
        let fits = |g: &Group| {
            g.hops.len() == hops.len()
                && g.hops
                    .iter()
                    .zip(&hops)
                    .all(|(a, b)| a.is_none() || b.is_none() || a == b)
        };
        match groups.iter_mut().find(|g| fits(g)) {
            Some(g) => {
                for (a, b) in g.hops.iter_mut().zip(&hops) {
                    if a.is_none() {
                        *a = *b;
                    }
                }
                g.flows.push(i);
                g.reached |= reached;
            }
            None => groups.push(Group {
                hops,
                flows: vec![i],
                reached,
            }),
        }
    }
    for g in &mut groups {
        g.flows.sort_unstable();
    }
    groups.sort_by_key(|g| g.flows[0]);
    groups
}

/// Measures every branch through its first flow, one branch after the
/// other, as mtr run on that flow would: `s.count` rounds, each a probe at
/// every TTL of the branch, `s.interval` apart. Not all at once: a host
/// limits the ICMP errors it sends to one sender (Linux: one a second
/// after a burst of six), so branches measured together through a shared
/// router or to the same destination would spend each other's answers and
/// show that as loss.
async fn measure(
    p: &mut Prober,
    s: &Settings,
    groups: &[Group],
    record: &mut impl FnMut(&ProbeRecord),
) -> io::Result<Vec<Vec<HopStats>>> {
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        let probes: Vec<(usize, u8)> = (1..=g.hops.len())
            .map(|t| (g.flows[0], u8::try_from(t).unwrap_or(u8::MAX)))
            .collect();
        let mut seen: Vec<Vec<Option<Answer>>> = vec![Vec::new(); g.hops.len()];
        let start = tokio::time::Instant::now();
        for round in 0..s.count {
            if round > 0 {
                tokio::time::sleep_until(start + s.interval * round).await;
            }
            let answers = p.round(&probes).await?;
            for ((&(flow, ttl), a), hop) in probes.iter().zip(answers).zip(&mut seen) {
                record(&ProbeRecord::of(Phase::Measure, p.flows[flow].port, ttl, a));
                hop.push(a);
            }
        }
        out.push(stats(g, &seen));
        if s.count > 0 && groups.len() > 1 {
            // The next branch starts an interval after this one's last round.
            tokio::time::sleep_until(start + s.interval * s.count).await;
        }
    }
    Ok(out)
}

/// mtr's columns for each hop of a branch, and which hops' loss is their
/// own ICMP limited rather than packets lost.
fn stats(g: &Group, hops: &[Vec<Option<Answer>>]) -> Vec<HopStats> {
    let mut out: Vec<HopStats> = hops
        .iter()
        .enumerate()
        .map(|(h, answers)| {
            let rtts: Vec<f64> = answers
                .iter()
                .flatten()
                .map(|a| a.rtt_ns as f64 / 1e6)
                .collect();
            let mut who: BTreeMap<IpAddr, usize> = BTreeMap::new();
            for a in answers.iter().flatten() {
                if let Some(f) = a.from {
                    *who.entry(f).or_default() += 1;
                }
            }
            let addr = g.hops[h].or_else(|| who.keys().next().copied());
            let sent = u32::try_from(answers.len()).unwrap_or(u32::MAX);
            let received = u32::try_from(rtts.len()).unwrap_or(u32::MAX);
            let n = rtts.len() as f64;
            let avg = (!rtts.is_empty()).then(|| rtts.iter().sum::<f64>() / n);
            HopStats {
                ttl: u8::try_from(h + 1).unwrap_or(u8::MAX),
                addr,
                also: who.keys().copied().filter(|a| Some(*a) != addr).collect(),
                answer: answers.iter().rev().flatten().map(|a| a.kind).next(),
                sent,
                received,
                last_ms: answers
                    .iter()
                    .rev()
                    .flatten()
                    .next()
                    .map(|a| a.rtt_ns as f64 / 1e6),
                avg_ms: avg,
                best_ms: rtts.iter().copied().reduce(f64::min),
                worst_ms: rtts.iter().copied().reduce(f64::max),
                stdev_ms: avg
                    .map(|m| (rtts.iter().map(|r| (r - m).powi(2)).sum::<f64>() / n).sqrt()),
                loss_pct: if sent == 0 {
                    0.0
                } else {
                    100.0 * f64::from(sent - received) / f64::from(sent)
                },
                rate_limited: false,
            }
        })
        .collect();
    mark_rate_limited(&mut out);
    out
}

/// Marks the hops that lost more than some hop after them: a packet lost
/// on the way to hop h is lost to every later hop too, so loss that does
/// not carry on is the router not answering, not the path losing.
pub(crate) fn mark_rate_limited(hops: &mut [HopStats]) {
    let mut least_after = f64::INFINITY;
    for h in hops.iter_mut().rev() {
        h.rate_limited = h.loss_pct > least_after;
        least_after = least_after.min(h.loss_pct);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flow through these routers (`None`: silent), the last one the
    /// destination.
    fn flow(hops: &[Option<&str>]) -> Explored {
        let n = hops.len();
        Explored {
            hops: hops
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    h.map(|a| Answer {
                        from: Some(a.parse().unwrap()),
                        kind: if i + 1 == n {
                            Kind::PortUnreachable
                        } else {
                            Kind::TimeExceeded
                        },
                        rtt_ns: 1,
                    })
                })
                .collect(),
            ended: true,
        }
    }

    /// The stopping rule counts flows per router: an even split over two
    /// routers, each with one next hop, has enough at 95 % (6 through
    /// each); a router that few flows reach asks for more in proportion.
    #[test]
    fn the_stopping_rule_is_applied_per_router() {
        fn via(r: &'static str, n: usize) -> impl Iterator<Item = Explored> {
            (0..n).map(move |_| flow(&[Some("10.0.0.1"), Some(r), Some("10.0.9.9")]))
        }
        let even: Vec<Explored> = via("10.0.1.1", 8).chain(via("10.0.2.1", 8)).collect();
        // TTL 2: two next hops after 10.0.0.1 (n_2 = 11 of 16); TTL 3: one
        // after each router, 8 >= n_1 = 6.
        assert_eq!(flows_short(&even, 3, 0.95, &Prior::new()), 0);
        // 18 flows one way, 2 the other: 10.0.2.1 is 4 short of n_1, and a
        // tenth of the flows pass it, so 40 more.
        let uneven: Vec<Explored> = via("10.0.1.1", 18).chain(via("10.0.2.1", 2)).collect();
        assert_eq!(flows_short(&uneven, 3, 0.95, &Prior::new()), 40);
        // A TTL per se has enough (20 flows, one address at TTL 3).
        assert_eq!(flows_short(&uneven, 2, 0.95, &Prior::new()), 0);
        // Silent at the router before: counted with each router in its
        // share. 4 and 4 answered, 8 silent: as if 8 and 8, enough.
        let mut silent: Vec<Explored> = via("10.0.1.1", 4).chain(via("10.0.2.1", 4)).collect();
        silent.extend((0..8).map(|_| flow(&[Some("10.0.0.1"), None, Some("10.0.9.9")])));
        assert_eq!(flows_short(&silent, 3, 0.95, &Prior::new()), 0);
        // Too few flows at the first hop: n_1 - 3.
        let few: Vec<Explored> = via("10.0.1.1", 3).collect();
        assert_eq!(flows_short(&few, 1, 0.95, &Prior::new()), 3);
        // A branch an earlier trace found: its router is held to n_2 = 11
        // before the branch is taken for gone. 8 flows all through
        // 10.0.1.1 are enough for one next hop, not for the two known.
        let ip = |a: &str| Some(a.parse().unwrap());
        let known = next_hops(&[
            vec![ip("10.0.0.1"), ip("10.0.1.1"), ip("10.0.9.9")],
            vec![ip("10.0.0.1"), ip("10.0.2.1"), ip("10.0.9.9")],
        ]);
        let one_way: Vec<Explored> = via("10.0.1.1", 8).collect();
        assert_eq!(flows_short(&one_way, 3, 0.95, &Prior::new()), 0);
        assert_eq!(flows_short(&one_way, 3, 0.95, &known), 3);
        // Where the earlier branches had a silent hop, no router is known
        // after it.
        let silent_known = next_hops(&[vec![ip("10.0.0.1"), None, ip("10.0.9.9")]]);
        assert_eq!(silent_known.len(), 1, "{silent_known:?}");
        assert_eq!(flows_short(&one_way, 3, 0.95, &silent_known), 0);
    }

    fn hop(ttl: u8, loss: f64) -> HopStats {
        HopStats {
            ttl,
            addr: None,
            also: Vec::new(),
            answer: None,
            sent: 10,
            received: 10,
            last_ms: None,
            avg_ms: None,
            best_ms: None,
            worst_ms: None,
            stdev_ms: None,
            loss_pct: loss,
            rate_limited: false,
        }
    }

    /// Loss that later hops do not see is the router's ICMP, not the path;
    /// loss that carries on to the end is real.
    #[test]
    fn loss_that_does_not_carry_on_is_rate_limiting() {
        let mut h = vec![hop(1, 0.0), hop(2, 40.0), hop(3, 10.0), hop(4, 10.0)];
        mark_rate_limited(&mut h);
        let marked: Vec<bool> = h.iter().map(|h| h.rate_limited).collect();
        assert_eq!(marked, [false, true, false, false]);
    }

    fn answer(from: &str) -> Option<Answer> {
        Some(Answer {
            from: Some(from.parse().unwrap()),
            kind: Kind::TimeExceeded,
            rtt_ns: 1,
        })
    }

    /// A flow that reached the destination only past a silent run is a
    /// candidate for an earlier end where a flow with the same routers
    /// reached it sooner; routers that differ are not the same path.
    #[test]
    fn an_end_past_silence_is_matched_with_a_sooner_one() {
        let end = Some(Answer {
            from: Some("10.0.0.9".parse().unwrap()),
            kind: Kind::PortUnreachable,
            rtt_ns: 1,
        });
        let e = |hops: Vec<Option<Answer>>| Explored { hops, ended: true };
        let sooner = e(vec![answer("10.0.1.1"), end]);
        let later = e(vec![answer("10.0.1.1"), None, None, end]);
        let other = e(vec![answer("10.0.2.1"), end]);
        assert_eq!(reached_at(&sooner), Some(2));
        assert_eq!(reached_at(&later), Some(4));
        assert!(compatible(&sooner, &later, 1));
        assert!(!compatible(&other, &later, 1));
        assert_eq!(reached_at(&e(vec![answer("10.0.1.1")])), None);
    }

    /// Flows group by path; a hop a flow got no answer at matches any.
    #[test]
    fn flows_group_by_path_and_a_silent_hop_matches_any() {
        let end = Some(Answer {
            from: Some("10.0.0.9".parse().unwrap()),
            kind: Kind::PortUnreachable,
            rtt_ns: 1,
        });
        let e = |hops: Vec<Option<Answer>>| Explored { hops, ended: true };
        let paths = vec![
            e(vec![answer("10.0.1.1"), end]),
            e(vec![answer("10.0.2.1"), end]),
            e(vec![None, end]),
            e(vec![answer("10.0.1.1"), end]),
        ];
        let g = branches(&paths);
        assert_eq!(g.len(), 2, "{g:?}");
        assert_eq!(g[0].flows, [0, 2, 3]);
        assert_eq!(g[1].flows, [1]);
        assert!(g.iter().all(|g| g.reached));
    }
}
