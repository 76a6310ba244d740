//! 007's vote over the links the mesh's flows cross, and each link's
//! evidence.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One probe flow over the window: where it goes and what it lost.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Flow {
    /// The daemon that probes it (Prometheus's `instance`).
    pub instance: String,
    /// Its target, `udp://h:p#flow=I`.
    pub target: String,
    /// Its path: the address it leaves from, then each hop that answered
    /// its trace, in TTL order (the destination last).
    pub path: Vec<IpAddr>,
    /// Probes lost (timeouts and errors) over the window.
    pub lost: f64,
    /// Probes sent over the window.
    pub sent: f64,
}

impl Flow {
    /// The links it crosses: each two addresses in a row, or the cable
    /// the second is an end of ([`Cables`]).
    fn links(&self, cables: &Cables) -> Vec<Link> {
        self.path
            .windows(2)
            .map(|w| {
                cables.of(w[1]).map_or(
                    Link {
                        from: w[0],
                        to: w[1],
                        both_ways: false,
                    },
                    |(a, b)| Link {
                        from: a,
                        to: b,
                        both_ways: true,
                    },
                )
            })
            .collect()
    }

    /// Whether it lost anything: `increase()` extrapolates, so half a
    /// probe is the least that counts.
    pub fn lossy(&self) -> bool {
        self.lost >= 0.5
    }
}

/// A link as the traces see it: from the address that answered one TTL
/// (or the flow's source) to the one that answered the next; or, where
/// the second is one end of a point-to-point cable whose other end also
/// answered some trace, that cable, both ways (a /31 or /30 whose two
/// hosts answered, facing different routers; docs/path.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Link {
    /// The near end (a cable's lower address).
    pub from: IpAddr,
    /// The far end (a cable's higher address).
    pub to: IpAddr,
    /// A cable: packets crossing it either way count.
    pub both_ways: bool,
}

impl std::fmt::Display for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sep = if self.both_ways { "<>" } else { ">" };
        write!(f, "{} {sep} {}", self.from, self.to)
    }
}

/// Point-to-point cables, from the addresses that answered traces. A
/// router that answers from the interface a probe came in on (as the
/// fleet lab's Linux routers do: the answer goes back the way the probe
/// came) names the cable the probe crossed; the same cable crossed the
/// other way is named by its other end. Two answering addresses that are
/// the two hosts of one /31 (RFC 3021) or /30 (IPv6: /127, /126) are
/// taken as the two ends of one cable, so both directions' evidence is
/// one link's: a cable that drops both ways is then one suspect, not two
/// (nor the links after it, which the way down also votes for). Where no
/// such pair answered (routers that answer from a loopback, unnumbered
/// links), a link stays two addresses in a row. Two addresses are not a
/// cable's ends where anything came to both, or went on from both: the
/// two ends of a cable face different routers (two routers' loopbacks
/// numbered one after the other are two routers of one tier, which the
/// same neighbours reach).
#[derive(Debug, Default)]
struct Cables {
    /// Every address that answered as a hop (not a flow's source or
    /// destination), with the addresses seen just before it and just
    /// after it on some path.
    hops: BTreeMap<IpAddr, (BTreeSet<IpAddr>, BTreeSet<IpAddr>)>,
}

impl Cables {
    fn new(flows: &[Flow]) -> Self {
        let mut hops: BTreeMap<IpAddr, (BTreeSet<IpAddr>, BTreeSet<IpAddr>)> = BTreeMap::new();
        for f in flows {
            for w in f.path.windows(3) {
                let h = hops.entry(w[1]).or_default();
                h.0.insert(w[0]);
                h.1.insert(w[2]);
            }
        }
        Self { hops }
    }

    /// Whether `a` and `b` face different routers: nothing came to both,
    /// nothing went on from both.
    fn apart(&self, a: IpAddr, b: IpAddr) -> bool {
        match (self.hops.get(&a), self.hops.get(&b)) {
            (Some(x), Some(y)) => x.0.is_disjoint(&y.0) && x.1.is_disjoint(&y.1),
            _ => false,
        }
    }

    /// The cable `addr` is an end of: both ends, lower first.
    fn of(&self, addr: IpAddr) -> Option<(IpAddr, IpAddr)> {
        if !self.hops.contains_key(&addr) {
            return None;
        }
        let (n, v6) = match addr {
            IpAddr::V4(a) => (u128::from(u32::from(a)), false),
            IpAddr::V6(a) => (u128::from(a), true),
        };
        let ip = |n: u128| -> IpAddr {
            if v6 {
                IpAddr::V6(Ipv6Addr::from(n))
            } else {
                IpAddr::V4(Ipv4Addr::from(u32::try_from(n).unwrap_or(0)))
            }
        };
        // A /31's other host; else a /30's (its hosts end in 01 and 10).
        let mut mates = vec![n ^ 1];
        match n % 4 {
            1 => mates.push(n + 1),
            2 => mates.push(n - 1),
            _ => {}
        }
        let mate = mates.into_iter().map(ip).find(|&m| self.apart(addr, m))?;
        Some((addr.min(mate), addr.max(mate)))
    }
}

/// When a link is named.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// The least confidence (0 to 1) that the flows crossing it lose more
    /// than the others.
    pub confidence: f64,
    /// The least lossy flows, not explained by a link named before it,
    /// that must cross it.
    pub lossy_flows: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            confidence: 0.999,
            lossy_flows: 2,
        }
    }
}

/// A link, ranked, with its evidence.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Suspect {
    /// 1 is the most suspect.
    pub rank: usize,
    /// The link.
    pub link: Link,
    /// Its votes when it was ranked: the lost probes of the flows crossing
    /// it that no link ranked before it explains, each over its path's
    /// length.
    pub votes: f64,
    /// Those flows.
    pub lossy_flows: usize,
    /// Flows crossing it that lost nothing.
    pub clean_flows: usize,
    /// Probes lost and sent by every flow crossing it.
    pub lost: f64,
    /// See `lost`.
    pub sent: f64,
    /// `lost / sent`.
    pub loss: f64,
    /// The loss of the flows that do not cross it.
    pub others_loss: f64,
    /// How sure it is that the flows crossing it lose more than the
    /// others: a one-sided two-proportion z-test, as a probability.
    pub confidence: f64,
    /// Above the thresholds of [`Settings`]: the localizer names it.
    pub named: bool,
}

/// Ranks the links `flows` cross, most suspect first: the link with the
/// most votes, then (as 007 does for more than one failure) the flows it
/// explains are set aside and the rest vote again, until no lossy flow is
/// left; links no lossy flow crosses are not listed.
pub fn rank(flows: &[Flow], settings: Settings) -> Vec<Suspect> {
    let cables = Cables::new(flows);
    let links: Vec<Vec<Link>> = flows.iter().map(|f| f.links(&cables)).collect();
    let mut left: Vec<usize> = (0..flows.len())
        .filter(|&i| flows[i].lossy() && !links[i].is_empty())
        .collect();
    let mut out: Vec<Suspect> = Vec::new();
    while !left.is_empty() {
        let mut votes: BTreeMap<Link, (f64, usize)> = BTreeMap::new();
        for &i in &left {
            let weight = flows[i].lost / links[i].len() as f64;
            for &l in &links[i] {
                let v = votes.entry(l).or_default();
                v.0 += weight;
                v.1 += 1;
            }
        }
        let Some((&link, &(v, n))) = votes
            .iter()
            .filter(|(l, _)| out.iter().all(|s| s.link != **l))
            .max_by(|a, b| a.1.0.total_cmp(&b.1.0).then_with(|| b.0.cmp(a.0)))
        else {
            break;
        };
        left.retain(|&i| !links[i].contains(&link));
        out.push(evidence(flows, &links, link, v, n, out.len() + 1, settings));
    }
    out
}

/// A link's evidence over all `flows` (each crossing its `links`).
fn evidence(
    flows: &[Flow],
    links: &[Vec<Link>],
    link: Link,
    votes: f64,
    lossy: usize,
    rank: usize,
    settings: Settings,
) -> Suspect {
    let (mut lost, mut sent, mut clean) = (0.0, 0.0, 0);
    let (mut lost_o, mut sent_o) = (0.0, 0.0);
    for (f, crossed) in flows.iter().zip(links) {
        if crossed.contains(&link) {
            lost += f.lost;
            sent += f.sent;
            clean += usize::from(!f.lossy());
        } else {
            lost_o += f.lost;
            sent_o += f.sent;
        }
    }
    let confidence = one_sided(lost, sent, lost_o, sent_o);
    Suspect {
        rank,
        link,
        votes,
        lossy_flows: lossy,
        clean_flows: clean,
        lost,
        sent,
        loss: ratio(lost, sent),
        others_loss: ratio(lost_o, sent_o),
        confidence,
        named: confidence >= settings.confidence && lossy >= settings.lossy_flows,
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// The probability that loss rate `a/n` is above `b/m` by more than
/// chance: the normal CDF of the pooled two-proportion z statistic.
/// 0 where there is nothing to compare (no loss, or no other flows).
fn one_sided(a: f64, n: f64, b: f64, m: f64) -> f64 {
    if n <= 0.0 || m <= 0.0 {
        return 0.0;
    }
    let p = (a + b) / (n + m);
    let se = (p * (1.0 - p) * (1.0 / n + 1.0 / m)).sqrt();
    if se <= 0.0 {
        return 0.0;
    }
    phi((a / n - b / m) / se)
}

/// The standard normal CDF (Abramowitz and Stegun 26.2.17, error under
/// 7.5e-8): five lines, where a statistics crate would be a dependency
/// for one function.
fn phi(z: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.231_641_9 * z.abs());
    let poly = t
        * (0.319_381_530
            + t * (-0.356_563_782
                + t * (1.781_477_937 + t * (-1.821_255_978 + t * 1.330_274_429))));
    let tail = (-z * z / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt() * poly;
    if z >= 0.0 { 1.0 - tail } else { tail }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// A leaf-spine mesh as the fleet lab builds it: 2 spines, 3 leaves, 2
    /// hosts a leaf, 2 flows a pair, each flow on the spine its number
    /// picks; the link from leaf 2 up to spine 1 loses `loss` of what it
    /// carries.
    fn mesh(loss: f64) -> Vec<Flow> {
        let mut flows = Vec::new();
        for sl in 1..=3 {
            for sh in 1..=2 {
                for dl in 1..=3 {
                    for dh in 1..=2 {
                        if (sl, sh) == (dl, dh) {
                            continue;
                        }
                        for flow in 0..2u8 {
                            let src = ip(&format!("10.{sl}.0.{sh}"));
                            let dst = ip(&format!("10.{dl}.0.{dh}"));
                            let leaf = ip(&format!("10.{sl}.0.254"));
                            let spine = 1 + (flow + sh + dh) % 2;
                            let path = if sl == dl {
                                vec![src, leaf, dst]
                            } else {
                                vec![
                                    src,
                                    leaf,
                                    ip(&format!("10.9.{spine}.{sl}")),
                                    ip(&format!("10.{dl}.{spine}.254")),
                                    dst,
                                ]
                            };
                            let bad = sl == 2 && sl != dl && spine == 1;
                            flows.push(Flow {
                                instance: src.to_string(),
                                target: format!("udp://{dst}:8707#flow={flow}"),
                                path,
                                lost: if bad { 3000.0 * loss } else { 0.0 },
                                sent: 3000.0,
                            });
                        }
                    }
                }
            }
        }
        flows
    }

    #[test]
    fn the_lossy_link_is_ranked_first_and_named() {
        let r = rank(&mesh(0.01), Settings::default());
        let top = &r[0];
        assert_eq!(
            top.link,
            Link {
                from: ip("10.2.0.254"),
                to: ip("10.9.1.2"),
                both_ways: false,
            },
            "{r:#?}"
        );
        assert!(top.named && top.confidence > 0.999, "{top:?}");
        assert_eq!(top.clean_flows, 0);
        assert!((top.loss - 0.01).abs() < 1e-9);
        // Every lossy flow crosses it: nothing is left to rank.
        assert_eq!(r.len(), 1, "{r:#?}");
    }

    /// A cable numbered as a /30 (the spine's end .1, the leaf's .2) that
    /// drops both ways is one suspect: the way up (leaf 2's flows to the
    /// spine) and the way down (flows into leaf 2 through it) are both its
    /// evidence, and nothing else is left to rank.
    #[test]
    fn both_ends_of_a_cable_are_one_link() {
        let mut flows = Vec::new();
        for sl in 1..=3u8 {
            for dl in 1..=3u8 {
                if sl == dl {
                    continue;
                }
                for spine in 1..=2u8 {
                    let up = ip(&format!("10.9.{spine}.{}", 4 * sl + 1));
                    let down = ip(&format!("10.9.{spine}.{}", 4 * dl + 2));
                    let bad = spine == 1 && (sl == 2 || dl == 2);
                    flows.push(Flow {
                        instance: format!("h{sl}"),
                        target: format!("udp://10.{dl}.0.9:8707#flow={spine}"),
                        path: vec![
                            ip(&format!("10.{sl}.0.9")),
                            ip(&format!("10.{sl}.0.1")),
                            up,
                            down,
                            ip(&format!("10.{dl}.0.9")),
                        ],
                        lost: if bad { 30.0 } else { 0.0 },
                        sent: 3000.0,
                    });
                }
            }
        }
        let r = rank(&flows, Settings::default());
        let cable = Link {
            from: ip("10.9.1.9"),
            to: ip("10.9.1.10"),
            both_ways: true,
        };
        assert_eq!(r.len(), 1, "{r:#?}");
        assert_eq!(r[0].link, cable);
        assert_eq!(r[0].link.to_string(), "10.9.1.9 <> 10.9.1.10");
        assert_eq!((r[0].lossy_flows, r[0].clean_flows), (4, 0));
        assert!(r[0].named);
        let cables = Cables::new(&flows);
        assert_eq!(
            cables.of(ip("10.9.1.10")),
            Some((ip("10.9.1.9"), ip("10.9.1.10")))
        );
        // A flow's source and destination are not cable ends.
        assert_eq!(cables.of(ip("10.2.0.9")), None);
    }

    /// Two spines answering from loopbacks numbered one after the other
    /// are two routers the same leaves reach, not a cable's ends.
    #[test]
    fn two_routers_of_one_tier_are_not_a_cable() {
        let mut flows = Vec::new();
        for (src, dst) in [(1u8, 2u8), (2, 1)] {
            for spine in [2u8, 3] {
                flows.push(Flow {
                    instance: format!("h{src}"),
                    target: format!("udp://10.{dst}.0.9:8707"),
                    path: vec![
                        ip(&format!("10.{src}.0.9")),
                        ip(&format!("10.0.1.{src}")),
                        ip(&format!("10.0.0.{spine}")),
                        ip(&format!("10.0.1.{dst}")),
                        ip(&format!("10.{dst}.0.9")),
                    ],
                    lost: 0.0,
                    sent: 100.0,
                });
            }
        }
        let cables = Cables::new(&flows);
        assert_eq!(cables.of(ip("10.0.0.2")), None);
        assert_eq!(cables.of(ip("10.0.0.3")), None);
    }

    #[test]
    fn a_healthy_mesh_names_nothing() {
        assert!(rank(&mesh(0.0), Settings::default()).is_empty());
        // One stray loss is not a link.
        let mut flows = mesh(0.0);
        flows[7].lost = 1.0;
        let r = rank(&flows, Settings::default());
        assert!(r.iter().all(|s| !s.named), "{r:#?}");
    }

    #[test]
    fn the_normal_cdf_is_right() {
        assert!((phi(0.0) - 0.5).abs() < 1e-7);
        assert!((phi(1.96) - 0.975).abs() < 1e-4);
        assert!((phi(-3.09) - 0.001).abs() < 1e-4);
    }
}
