//! Finding a job's targets: its targets file, its `file_sd` files, its
//! `dns_sd` names and the addresses of its targets' names. The async part
//! of reading a config.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use prober_core::{Registry, parse_target};
use prober_net::{Family, resolve};

use super::schema::JobSection;
use super::validate::{Checked, Found, Settings, check_label};
use super::{Resolution, Result, WithKey};
use crate::error::{DaemonError, bail};

/// An SRV name's URL (`udp://_prober._udp.example`) needs no port, since
/// the records give it: a placeholder port makes it a target URL.
pub(super) fn with_srv_port(entry: &str) -> std::borrow::Cow<'_, str> {
    let Some((scheme, rest)) = entry.split_once("://") else {
        return entry.into();
    };
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if host.starts_with('_') && !host.contains(':') {
        format!("{scheme}://{host}:1{path}").into()
    } else {
        entry.into()
    }
}

/// What a job's discovery found.
#[derive(Debug)]
pub(super) struct Discovered {
    /// Its targets: listed, from its files, from DNS.
    pub(super) found: Vec<Found>,
    /// The files they came from: the daemon reloads when one changes.
    pub(super) watched: Vec<PathBuf>,
    /// When its first `dns_sd` name is due to be looked up again.
    pub(super) refresh_at: Option<Instant>,
}

/// Gathers a job's targets: its list, its `targets_file`, its `file_sd`
/// files and its `dns_sd` names (looked up, this host's own addresses left
/// out with `exclude_self`).
///
/// # Errors
/// A file that cannot be read or parsed, a bad label in one, a `dns_sd`
/// entry that is an address or not a target.
pub(super) async fn discover(
    j: &JobSection,
    s: &Settings,
    base: &Path,
    registry: &Registry,
    resolution: Resolution<'_>,
    discovery: &crate::dns_sd::Settings,
) -> Result<Discovered> {
    let key = &s.key;
    let mut found: Vec<Found> = j
        .targets
        .iter()
        .map(|t| Found {
            text: t.clone(),
            labels: BTreeMap::new(),
            discovered: false,
        })
        .collect();
    let mut watched = Vec::new();
    if let Some(file) = &j.targets_file {
        let file = base.join(file); // an absolute path stays as it is
        let body = crate::file_sd::read_capped(&file)
            .ctx(|| format!("{key}.targets_file: reading {}", file.display()))?;
        found.extend(
            body.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|t| Found {
                    text: t.to_owned(),
                    labels: BTreeMap::new(),
                    discovered: false,
                }),
        );
        watched.push(file);
    }
    for file in &j.file_sd {
        let file = base.join(file);
        let what = format!("{key}.file_sd: {}", file.display());
        for (target, labels) in crate::file_sd::read(&file, j.file_sd_scheme.as_deref())
            .map_err(|e| DaemonError::Config(format!("{what}: {e}")))?
        {
            for name in labels.keys() {
                check_label(name).map_err(|e| {
                    DaemonError::Config(format!(
                        "{what}: label {:?} of {}: {e}",
                        prober_core::quote::short(name),
                        prober_core::quote::short(&target)
                    ))
                })?;
            }
            found.push(Found {
                text: target,
                labels,
                discovered: false,
            });
        }
        watched.push(file);
    }
    let mut refresh_at: Option<Instant> = None;
    if !j.dns_sd.is_empty() {
        let Resolution::System(found_by) = resolution else {
            bail!("{key}.dns_sd: names are not resolved here");
        };
        let own = if s.exclude_self {
            prober_net::resolve::own_addresses()
        } else {
            Vec::new()
        };
        let mut found_count = 0u64;
        for entry in &j.dns_sd {
            let what = format!("{key}.dns_sd");
            let template = parse_target(registry, &with_srv_port(entry)).ctx(|| what.clone())?;
            if template.host.parse::<std::net::IpAddr>().is_ok() {
                bail!("{what}: {template}: give a DNS name to discover, not an address");
            }
            let answer = found_by
                .lookup(&j.name, &template.host, template.port, discovery)
                .await;
            refresh_at = Some(refresh_at.map_or(answer.refresh_at, |r| r.min(answer.refresh_at)));
            for f in answer.found {
                if own.contains(&f.addr.ip()) {
                    tracing::debug!(job = %j.name, addr = %f.addr, "skipping this host's own address");
                    continue;
                }
                let mut t = template.clone();
                t.host = f.addr.ip().to_string();
                t.port = f.addr.port();
                found.push(Found {
                    text: t.to_string(),
                    labels: BTreeMap::from([("dns_name".to_owned(), f.name)]),
                    discovered: true,
                });
                found_count += 1;
            }
        }
        found_by.count(&j.name, |c| c.targets = found_count);
    }
    Ok(Discovered {
        found,
        watched,
        refresh_at,
    })
}

/// The address of each of `checked`, in order, or why it has none: one
/// name that does not resolve (a retired host, a DNS hiccup at boot) must
/// not keep every other target dark, so it is a target that fails with
/// `resolve`, looked up again by `refresh_at`, which this moves earlier.
///
/// # Errors
/// A host name where only address literals are resolved.
pub(super) async fn addresses(
    checked: &[Checked],
    key: &str,
    resolution: Resolution<'_>,
    discovery: &crate::dns_sd::Settings,
    refresh_at: &mut Option<Instant>,
) -> Result<Vec<std::result::Result<SocketAddr, String>>> {
    let mut out = Vec::with_capacity(checked.len());
    for Checked { target, .. } in checked {
        let named = target.host.parse::<std::net::IpAddr>().is_err();
        out.push(match resolution {
            Resolution::System(d) if named => {
                let answer = resolve(target, Family::Any)
                    .await
                    .map_err(|e| e.to_string());
                let (addr, retry) =
                    d.target_name(&target.host, target.port, answer, discovery.resolve_every);
                if let Some(retry) = retry {
                    let at = Instant::now() + retry;
                    *refresh_at = Some(refresh_at.map_or(at, |r| r.min(at)));
                }
                addr
            }
            Resolution::System(_) => resolve(target, Family::Any)
                .await
                .map_err(|e| e.to_string()),
            Resolution::LiteralsOnly => match target.host.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(SocketAddr::new(ip, target.port)),
                Err(_) => bail!("{key}.targets: {target}: host names are not resolved here"),
            },
        });
    }
    Ok(out)
}
