//! 007's vote over the links the mesh's flows cross, and each link's
//! evidence.

use std::collections::BTreeMap;
use std::net::IpAddr;

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
    /// The links it crosses: each two addresses in a row.
    pub fn links(&self) -> impl Iterator<Item = Link> + '_ {
        self.path.windows(2).map(|w| Link {
            from: w[0],
            to: w[1],
        })
    }

    /// Whether it lost anything: `increase()` extrapolates, so half a
    /// probe is the least that counts.
    fn lossy(&self) -> bool {
        self.lost >= 0.5
    }
}

/// A link as the traces see it: from the address that answered one TTL
/// (or the flow's source) to the one that answered the next. A router
/// answers from one of its own addresses, so a link is named by its two
/// routers, and the same cable may be seen under other names from other
/// sources or in the other direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Link {
    /// The near end.
    pub from: IpAddr,
    /// The far end.
    pub to: IpAddr,
}

impl std::fmt::Display for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} > {}", self.from, self.to)
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
    let mut left: Vec<&Flow> = flows
        .iter()
        .filter(|f| f.lossy() && f.path.len() >= 2)
        .collect();
    let mut out: Vec<Suspect> = Vec::new();
    while !left.is_empty() {
        let mut votes: BTreeMap<Link, (f64, usize)> = BTreeMap::new();
        for f in &left {
            let weight = f.lost / (f.path.len() - 1) as f64;
            for l in f.links() {
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
        left.retain(|f| f.links().all(|l| l != link));
        out.push(evidence(flows, link, v, n, out.len() + 1, settings));
    }
    out
}

/// A link's evidence over all `flows`.
fn evidence(
    flows: &[Flow],
    link: Link,
    votes: f64,
    lossy: usize,
    rank: usize,
    settings: Settings,
) -> Suspect {
    let (mut lost, mut sent, mut clean) = (0.0, 0.0, 0);
    let (mut lost_o, mut sent_o) = (0.0, 0.0);
    for f in flows {
        if f.links().any(|l| l == link) {
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
                to: ip("10.9.1.2")
            },
            "{r:#?}"
        );
        assert!(top.named && top.confidence > 0.999, "{top:?}");
        assert_eq!(top.clean_flows, 0);
        assert!((top.loss - 0.01).abs() < 1e-9);
        // Every lossy flow crosses it: nothing is left to rank.
        assert_eq!(r.len(), 1, "{r:#?}");
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
