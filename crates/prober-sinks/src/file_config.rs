//! The file sinks of a daemon job (`[job.sinks]`), as a config file gives
//! them: each sink's settings live here beside the sink, are checked here,
//! and open the sink themselves. The daemon embeds [`SinksConfig`] in its
//! job table and keeps the checked [`JobSinks`].

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use prober_core::sink::Fanout;
use prober_core::{Sink, duration::parse_duration};
use serde::Deserialize;

use crate::files::{CsvLinesFile, HlogFile, JsonLinesFile, Rotation};

/// `[job.sinks]` as written.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinksConfig {
    /// `[job.sinks.jsonl]`: every probe as a JSON line.
    pub jsonl: Option<JsonLinesConfig>,
    /// `[job.sinks.csv]`: every probe as a CSV row.
    pub csv: Option<CsvConfig>,
    /// `[job.sinks.hlog]`: an HdrHistogram interval log.
    pub hlog: Option<HlogConfig>,
}

/// `[job.sinks.jsonl]`: a JSON lines file, appended, rotated by size
/// and/or age.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonLinesConfig {
    /// The file; relative to the config file's folder.
    pub path: PathBuf,
    /// Rotate above this size.
    pub rotate_bytes: Option<u64>,
    /// Rotate at this age (`1h`).
    pub rotate_age: Option<String>,
    /// Rotated files kept (`path.1` is the newest) [default: 5].
    pub keep: Option<usize>,
}

/// `[job.sinks.csv]`: a CSV file of every probe.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvConfig {
    /// The file; relative to the config file's folder.
    pub path: PathBuf,
}

/// `[job.sinks.hlog]`: an HdrHistogram interval log of RTT.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HlogConfig {
    /// The file; relative to the config file's folder.
    pub path: PathBuf,
    /// One histogram per interval (`10s`, at least `100ms`) [default: 10s].
    pub interval: Option<String>,
}

/// A job's file sinks, checked: absolute paths, parsed durations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobSinks {
    /// Probe lines as JSON lines, and how the file rotates.
    pub jsonl: Option<(PathBuf, Rotation)>,
    /// Probe lines as CSV.
    pub csv: Option<PathBuf>,
    /// HdrHistogram interval log and its interval.
    pub hlog: Option<(PathBuf, Duration)>,
}

impl SinksConfig {
    /// Checks the settings; `key` names the table in messages (`job[0].sinks`),
    /// relative paths are taken from `base` (the config file's folder).
    ///
    /// # Errors
    /// The first setting that cannot be used, by key.
    pub fn check(&self, key: &str, base: &Path) -> Result<JobSinks, String> {
        let duration =
            |text: &str, at: &str| parse_duration(text).map_err(|e| format!("{key}.{at}: {e}"));
        let jsonl = match &self.jsonl {
            None => None,
            Some(j) => {
                let age = j
                    .rotate_age
                    .as_deref()
                    .map(|a| duration(a, "jsonl.rotate_age"))
                    .transpose()?;
                if age.is_some_and(|a| a.is_zero()) || j.rotate_bytes == Some(0) {
                    return Err(format!(
                        "{key}.jsonl: rotate_bytes and rotate_age must be greater than zero"
                    ));
                }
                let rotation = Rotation {
                    bytes: j.rotate_bytes,
                    age,
                    keep: j.keep.unwrap_or(5),
                };
                Some((base.join(&j.path), rotation))
            }
        };
        let hlog = match &self.hlog {
            None => None,
            Some(h) => {
                let every = match &h.interval {
                    Some(text) => duration(text, "hlog.interval")?,
                    None => Duration::from_secs(10),
                };
                if every < Duration::from_millis(100) {
                    return Err(format!("{key}.hlog.interval: must be at least 100ms"));
                }
                Some((base.join(&h.path), every))
            }
        };
        Ok(JobSinks {
            jsonl,
            csv: self.csv.as_ref().map(|c| base.join(&c.path)),
            hlog,
        })
    }
}

impl JobSinks {
    /// Every file the sinks write.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.jsonl
            .iter()
            .map(|j| j.0.as_path())
            .chain(self.csv.as_deref())
            .chain(self.hlog.iter().map(|h| h.0.as_path()))
    }

    /// Opens the files, as one sink.
    ///
    /// # Errors
    /// A file that cannot be opened.
    pub fn open(&self) -> io::Result<Fanout> {
        let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
        if let Some((path, rotation)) = &self.jsonl {
            sinks.push(Box::new(JsonLinesFile::open(path, rotation.clone())?));
        }
        if let Some(path) = &self.csv {
            sinks.push(Box::new(CsvLinesFile::open(path, Rotation::default())?));
        }
        if let Some((path, every)) = &self.hlog {
            sinks.push(Box::new(HlogFile::open(path, *every)?));
        }
        Ok(Fanout::retrying(sinks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> SinksConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn paths_are_relative_to_the_config_and_defaults_fill_in() {
        let s = config("jsonl = { path = \"p.jsonl\" }\nhlog = { path = \"/abs/h.hlog\" }\n")
            .check("job[0].sinks", Path::new("/etc/prober"))
            .unwrap();
        let (path, rotation) = s.jsonl.clone().unwrap();
        assert_eq!(path, Path::new("/etc/prober/p.jsonl"));
        assert_eq!(rotation.keep, 5);
        assert_eq!(
            s.hlog,
            Some((PathBuf::from("/abs/h.hlog"), Duration::from_secs(10)))
        );
        assert_eq!(s.paths().count(), 2);
    }

    #[test]
    fn bad_settings_name_their_key() {
        for (text, want) in [
            (
                "jsonl = { path = \"p\", rotate_bytes = 0 }",
                "job[0].sinks.jsonl: rotate_bytes and rotate_age must be greater than zero",
            ),
            (
                "jsonl = { path = \"p\", rotate_age = \"soon\" }",
                "job[0].sinks.jsonl.rotate_age:",
            ),
            (
                "hlog = { path = \"h\", interval = \"10ms\" }",
                "job[0].sinks.hlog.interval: must be at least 100ms",
            ),
        ] {
            let e = config(text)
                .check("job[0].sinks", Path::new("/"))
                .unwrap_err();
            assert!(e.starts_with(want), "{text}: {e}");
        }
    }
}
