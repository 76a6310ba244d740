//! What a reload does, worked out from the old and new configs alone: a
//! pure function, so every case is tested without a socket or a task.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use crate::config::Config;

/// A target's own labels.
type Labels = std::collections::BTreeMap<String, String>;

/// A running target's key: its job's name and its target URL.
pub(crate) type Key = (String, String);

/// The changes a reload makes, in the order [`crate::daemon`] makes them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Running targets to stop: their job is gone or changed, or they left
    /// it, or they resolve elsewhere, or their labels changed.
    pub(crate) stop: Vec<Key>,
    /// Targets to build and start, as (job, target) indices into the new
    /// config: new ones, and the stopped ones that are still listed.
    pub(crate) start: Vec<(usize, usize)>,
    /// Jobs whose sinks open anew (new jobs, changed sinks, or sinks not
    /// open yet).
    pub(crate) reopen: Vec<String>,
    /// Targets that did not resolve and now do.
    pub(crate) resolved: Vec<(Key, SocketAddr)>,
    /// Targets whose name now resolves to another address.
    pub(crate) moved: Vec<(Key, SocketAddr, SocketAddr)>,
}

type Addr<'a> = &'a Result<SocketAddr, String>;

/// Where each (job, target URL) resolves, and its labels; the first
/// listing wins.
fn addrs(cfg: &Config) -> HashMap<Key, (Addr<'_>, &Labels)> {
    let mut m = HashMap::new();
    for j in &cfg.jobs {
        for t in &j.targets {
            m.entry((j.name.clone(), t.target.to_string()))
                .or_insert((&t.addr, &t.labels));
        }
    }
    m
}

/// The plan that takes the daemon from `old` to `new`. `running` are the
/// targets running now, `sinks_open` says whether a job's sinks are open.
/// Targets of unchanged jobs that resolve where they did keep running
/// (schedules, counters and all).
pub(crate) fn plan(
    old: &Config,
    new: &Config,
    running: &HashSet<Key>,
    sinks_open: &dyn Fn(&str) -> bool,
) -> Plan {
    let (old_addrs, new_addrs) = (addrs(old), addrs(new));
    let mut p = Plan::default();
    for (k, (addr, _)) in &new_addrs {
        match (old_addrs.get(k), addr) {
            (Some((Err(_), _)), Ok(addr)) => p.resolved.push((k.clone(), *addr)),
            (Some((Ok(was), _)), Ok(addr)) if was != addr => {
                p.moved.push((k.clone(), *was, *addr));
            }
            _ => {}
        }
    }
    let keep = |k: &Key| -> bool {
        let (Some(o), Some(n)) = (
            old.jobs.iter().find(|j| j.name == k.0),
            new.jobs.iter().find(|j| j.name == k.0),
        ) else {
            return false;
        };
        // Same URL resolving elsewhere now, or with other labels (from its
        // file_sd group), counts as a change.
        o.same_settings(n) && new_addrs.contains_key(k) && new_addrs.get(k) == old_addrs.get(k)
    };
    p.stop = running.iter().filter(|k| !keep(k)).cloned().collect();
    p.stop.sort();
    let stopping: HashSet<&Key> = p.stop.iter().collect();
    for (j, job) in new.jobs.iter().enumerate() {
        let was = old.jobs.iter().find(|o| o.name == job.name);
        if was.is_none_or(|o| o.sinks != job.sinks) || !sinks_open(&job.name) {
            p.reopen.push(job.name.clone());
        }
        for (t, target) in job.targets.iter().enumerate() {
            let key = (job.name.clone(), target.target.to_string());
            if !running.contains(&key) || stopping.contains(&key) {
                p.start.push((j, t));
            }
        }
    }
    p.resolved.sort();
    p.moved.sort();
    p
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use prober_core::Registry;

    use super::*;

    static REGISTRY: Registry = Registry::new(&[&prober_tcp::UDP, &prober_tcp::TCP]);

    async fn cfg(jobs: &str) -> Config {
        crate::config::parse(jobs, Path::new("/etc/prober/prober.toml"), &REGISTRY)
            .await
            .unwrap()
    }

    fn job(name: &str, extra: &str, targets: &[&str]) -> String {
        let list: Vec<String> = targets.iter().map(|t| format!("{t:?}")).collect();
        format!(
            "[[job]]\nname = {name:?}\n{extra}\ntargets = [{}]\n",
            list.join(", ")
        )
    }

    fn running(cfg: &Config) -> HashSet<Key> {
        cfg.jobs
            .iter()
            .flat_map(|j| {
                j.targets
                    .iter()
                    .map(|t| (j.name.clone(), t.target.to_string()))
            })
            .collect()
    }

    fn key(job: &str, target: &str) -> Key {
        (job.to_owned(), target.to_owned())
    }

    /// Start-up: every target starts, every job opens its sinks.
    #[tokio::test]
    async fn from_nothing_everything_starts() {
        let empty = cfg("allow_empty = true").await;
        let new = cfg(&(job("a", "", &["udp://127.0.0.1:1", "udp://127.0.0.1:2"])
            + &job("b", "", &["tcp://127.0.0.1:3"])))
        .await;
        let p = plan(&empty, &new, &HashSet::new(), &|_| false);
        assert_eq!(p.stop, Vec::<Key>::new());
        assert_eq!(p.start, [(0, 0), (0, 1), (1, 0)]);
        assert_eq!(p.reopen, ["a", "b"]);
    }

    /// The same config again changes nothing.
    #[tokio::test]
    async fn the_same_config_keeps_everything() {
        let text = job("a", "", &["udp://127.0.0.1:1", "udp://127.0.0.1:2"]);
        let (old, new) = (cfg(&text).await, cfg(&text).await);
        let p = plan(&old, &new, &running(&old), &|_| true);
        assert_eq!(p, Plan::default());
    }

    /// A target added starts, one removed stops, the rest keep running.
    #[tokio::test]
    async fn targets_added_and_removed() {
        let old = cfg(&job("a", "", &["udp://127.0.0.1:1", "udp://127.0.0.1:2"])).await;
        let new = cfg(&job("a", "", &["udp://127.0.0.1:2", "udp://127.0.0.1:3"])).await;
        let p = plan(&old, &new, &running(&old), &|_| true);
        assert_eq!(p.stop, [key("a", "udp://127.0.0.1:1")]);
        assert_eq!(p.start, [(0, 1)]);
        assert!(p.reopen.is_empty());
    }

    /// A job whose settings changed restarts all its targets; another job
    /// is left alone; a job removed stops.
    #[tokio::test]
    async fn a_changed_job_restarts_and_a_removed_one_stops() {
        let old = cfg(&(job("a", "", &["udp://127.0.0.1:1"])
            + &job("b", "", &["udp://127.0.0.1:2"])
            + &job("c", "", &["udp://127.0.0.1:3"])))
        .await;
        let new = cfg(&(job("a", "interval = \"2s\"", &["udp://127.0.0.1:1"])
            + &job("b", "", &["udp://127.0.0.1:2"])))
        .await;
        let p = plan(&old, &new, &running(&old), &|_| true);
        assert_eq!(
            p.stop,
            [key("a", "udp://127.0.0.1:1"), key("c", "udp://127.0.0.1:3")]
        );
        assert_eq!(p.start, [(0, 0)]);
    }

    /// Changed sinks reopen that job's files only, and its targets keep
    /// running; a job whose sinks are not open yet opens them.
    #[tokio::test]
    async fn changed_sinks_reopen_without_a_restart() {
        let old =
            cfg(&(job("a", "", &["udp://127.0.0.1:1"]) + &job("b", "", &["udp://127.0.0.1:2"])))
                .await;
        let new = cfg(&(job(
            "a",
            "sinks = { jsonl = { path = \"/tmp/prober-plan-a.jsonl\" } }",
            &["udp://127.0.0.1:1"],
        ) + &job("b", "", &["udp://127.0.0.1:2"])))
        .await;
        let p = plan(&old, &new, &running(&old), &|job| job != "b");
        assert!(p.stop.is_empty() && p.start.is_empty(), "{p:?}");
        assert_eq!(p.reopen, ["a", "b"]);
    }

    /// A target that failed to start (not running) is started again.
    #[tokio::test]
    async fn a_target_not_running_starts() {
        let text = job("a", "", &["udp://127.0.0.1:1", "udp://127.0.0.1:2"]);
        let (old, new) = (cfg(&text).await, cfg(&text).await);
        let mut run = running(&old);
        run.remove(&key("a", "udp://127.0.0.1:2"));
        let p = plan(&old, &new, &run, &|_| true);
        assert!(p.stop.is_empty());
        assert_eq!(p.start, [(0, 1)]);
    }

    /// A target whose name moved to another address, or that resolves
    /// now, restarts, and the plan says which.
    #[tokio::test]
    async fn a_moved_or_newly_resolved_target_restarts() {
        let text = job("a", "", &["udp://127.0.0.1:1", "udp://127.0.0.1:2"]);
        let old = cfg(&text).await;
        let mut new = cfg(&text).await;
        let was: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let now: SocketAddr = "127.0.0.9:1".parse().unwrap();
        new.jobs[0].targets[0].addr = Ok(now);
        let mut old_unresolved = old.clone();
        old_unresolved.jobs[0].targets[1].addr = Err("no such host".to_owned());
        let p = plan(&old_unresolved, &new, &running(&old), &|_| true);
        assert_eq!(p.moved, [(key("a", "udp://127.0.0.1:1"), was, now)]);
        assert_eq!(
            p.resolved,
            [(
                key("a", "udp://127.0.0.1:2"),
                "127.0.0.1:2".parse().unwrap()
            )]
        );
        assert_eq!(
            p.stop,
            [key("a", "udp://127.0.0.1:1"), key("a", "udp://127.0.0.1:2")]
        );
        assert_eq!(p.start, [(0, 0), (0, 1)]);
    }
}
