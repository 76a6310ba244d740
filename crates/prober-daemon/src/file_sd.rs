//! Prometheus `file_sd` files as a source of a job's targets: a list of
//! groups, each `{"targets": [...], "labels": {...}}`, in JSON or YAML (by
//! the file's extension, as Prometheus reads them).
//!
//! An entry is a prober target URL (`udp://10.0.0.2:8707`), or `host:port`
//! as Prometheus writes them, which takes the job's `file_sd_scheme`.
//! Labels starting with `__` (Prometheus's meta labels) are dropped; the
//! others label the target's series. The daemon reloads its config when a
//! file changes (docs/config.md).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The largest target file read (`file_sd`, `targets_file`): a million
/// targets of 16 bytes; a path such as /dev/zero must not fill the memory.
const MAX_FILE: u64 = 16 << 20;

/// The target file at `path` as text, refused past [`MAX_FILE`] bytes.
///
/// # Errors
/// The file's, or that it is too long.
pub(crate) fn read_capped(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_FILE + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_FILE {
        return Err(std::io::Error::other(format!(
            "longer than {} MiB",
            MAX_FILE >> 20
        )));
    }
    Ok(text)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Group {
    #[serde(default)]
    targets: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// A target URL and its group's labels.
pub type Labelled = (String, BTreeMap<String, String>);

/// The targets of a `file_sd` file with their labels, in file order.
/// `scheme` is prefixed to entries without one.
///
/// # Errors
/// The file cannot be read or parsed, or an entry has no scheme and none
/// is given.
pub fn read(path: &Path, scheme: Option<&str>) -> Result<Vec<Labelled>, String> {
    let text = read_capped(path).map_err(|e| e.to_string())?;
    let yaml = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yml") || e.eq_ignore_ascii_case("yaml"));
    parse(&text, yaml, scheme)
}

/// The targets of a `file_sd` file's text, JSON or (with `yaml`) YAML.
///
/// # Errors
/// As [`read`], for the text.
pub fn parse(text: &str, yaml: bool, scheme: Option<&str>) -> Result<Vec<Labelled>, String> {
    let groups: Vec<Group> = if yaml {
        parse_yaml(text)?
    } else {
        serde_json::from_str(text).map_err(|e| prober_core::quote::cap(&e.to_string(), 300))?
    };
    let mut out = Vec::new();
    for g in groups {
        let labels: BTreeMap<String, String> = g
            .labels
            .into_iter()
            .filter(|(k, _)| !k.starts_with("__"))
            .collect();
        for t in g.targets {
            let t = t.trim();
            let url = if t.contains("://") {
                t.to_owned()
            } else if let Some(s) = scheme {
                format!("{s}://{t}")
            } else {
                return Err(format!(
                    "target {} has no scheme: write it as udp://{0} (or tcp://, icmp://, ...), or set the job's file_sd_scheme",
                    prober_core::quote::short(t)
                ));
            };
            out.push((url, labels.clone()));
        }
    }
    Ok(out)
}

/// YAML through yaml-rust2 (no serde YAML crate is both maintained and
/// widely used), converted to JSON values for the same checks as JSON.
fn parse_yaml(text: &str) -> Result<Vec<Group>, String> {
    use yaml_rust2::{Yaml, YamlLoader};
    fn json(y: &Yaml) -> Result<serde_json::Value, String> {
        Ok(match y {
            Yaml::String(s) => serde_json::Value::String(s.clone()),
            // Prometheus's YAML reads label values such as 1 or true as
            // strings; so does this.
            Yaml::Integer(i) => serde_json::Value::String(i.to_string()),
            Yaml::Real(r) => serde_json::Value::String(r.clone()),
            Yaml::Boolean(b) => serde_json::Value::String(b.to_string()),
            Yaml::Array(a) => {
                serde_json::Value::Array(a.iter().map(json).collect::<Result<_, _>>()?)
            }
            Yaml::Hash(h) => {
                let mut m = serde_json::Map::new();
                for (k, v) in h {
                    let k = k.as_str().ok_or("a mapping key that is not a string")?;
                    m.insert(k.to_owned(), json(v)?);
                }
                serde_json::Value::Object(m)
            }
            Yaml::Null => serde_json::Value::Null,
            _ => return Err("an alias or a value YAML could not read".to_owned()),
        })
    }
    let docs = YamlLoader::load_from_str(text)
        .map_err(|e| prober_core::quote::cap(&e.to_string(), 300))?;
    let Some(doc) = docs.first() else {
        return Ok(Vec::new()); // an empty file: no targets
    };
    serde_json::from_value(json(doc)?).map_err(|e| prober_core::quote::cap(&e.to_string(), 300))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("prober-file-sd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn json_and_yaml_give_the_same_targets() {
        let json = write(
            "a.json",
            r#"[{"targets": ["10.0.0.1:8707", "tcp://10.0.0.2:8707"], "labels": {"zone": "a", "__meta_x": "y"}},
                {"targets": ["10.0.0.3:8707"]}]"#,
        );
        let yaml = write(
            "a.yaml",
            "- targets: ['10.0.0.1:8707', 'tcp://10.0.0.2:8707']\n  labels: {zone: a, __meta_x: y}\n- targets: ['10.0.0.3:8707']\n",
        );
        let zone: BTreeMap<String, String> = [("zone".to_owned(), "a".to_owned())].into();
        let want = vec![
            ("udp://10.0.0.1:8707".to_owned(), zone.clone()),
            ("tcp://10.0.0.2:8707".to_owned(), zone),
            ("udp://10.0.0.3:8707".to_owned(), BTreeMap::new()),
        ];
        assert_eq!(read(&json, Some("udp")).unwrap(), want);
        assert_eq!(read(&yaml, Some("udp")).unwrap(), want);
    }

    #[test]
    fn a_bare_entry_without_a_scheme_is_refused_clearly() {
        let p = write("b.json", r#"[{"targets": ["10.0.0.1:8707"]}]"#);
        let e = read(&p, None).unwrap_err();
        assert!(
            e.contains("has no scheme") && e.contains("file_sd_scheme"),
            "{e}"
        );
        let p = write("c.json", r#"[{"targets": "x"}]"#);
        assert!(read(&p, None).is_err());
        let p = write("d.yml", "- targets: [a\n");
        assert!(read(&p, None).is_err());
    }
}
