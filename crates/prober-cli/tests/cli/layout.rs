//! The layout stays as docs/architecture.md draws it: crates depend only on
//! the layers below them, and no crate has a cycle between its modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Which `prober-*` crates each crate of a fixed layer may depend on
/// (normal dependencies). Core is at the bottom; protocol crates never
/// know each other; only the binary knows every protocol. A crate not
/// named here is a protocol crate ([`PROTOCOL_LAYER`]), so a new protocol
/// needs no line here.
const ALLOWED: &[(&str, &[&str])] = &[
    ("prober-core", &[]),
    ("prober-sys", &["prober-core"]),
    ("prober-net", &["prober-core", "prober-sys"]),
    ("prober-sinks", &["prober-core"]),
    ("prober-report", &["prober-core"]),
    // Traces: not a protocol of the registry, so not the protocol layer.
    ("prober-trace", &["prober-sys"]),
    // Reads Prometheus; knows no other prober crate.
    ("prober-localize", &[]),
    (
        "prober-daemon",
        &[
            "prober-core",
            "prober-sys",
            "prober-net",
            "prober-sinks",
            // The reflector's counters on /metrics; /probe's TLS client.
            "prober-stamp",
            "prober-http",
            // A job's trace_every.
            "prober-trace",
        ],
    ),
];

/// What a protocol crate may use.
const PROTOCOL_LAYER: &[&str] = &["prober-core", "prober-sys", "prober-net"];

/// The binary, which may use every other crate (its docs say "every
/// prober crate").
const BINARY: &str = "prober-cli";

/// `cargo metadata` of the workspace (its own crates only).
fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The workspace's prober crates (not the benches), of `meta`.
fn crates(meta: &serde_json::Value) -> Vec<String> {
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .filter(|n| n.starts_with("prober-") && *n != "prober-benches")
        .map(str::to_owned)
        .collect()
}

/// What `name` may depend on, of `all`.
fn allowed_for(name: &str, all: &[String]) -> BTreeSet<String> {
    if name == BINARY {
        return all.iter().filter(|c| *c != name).cloned().collect();
    }
    let table: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    table
        .get(name)
        .copied()
        .unwrap_or(PROTOCOL_LAYER)
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

#[test]
fn crates_depend_only_on_lower_layers() {
    let meta = metadata();
    let all = crates(&meta);
    for pkg in meta["packages"].as_array().unwrap() {
        let name = pkg["name"].as_str().unwrap();
        if name == "prober-benches" {
            continue;
        }
        let ok = allowed_for(name, &all);
        for dep in pkg["dependencies"].as_array().unwrap() {
            let dep_name = dep["name"].as_str().unwrap();
            let normal = dep["kind"].is_null();
            if normal && dep_name.starts_with("prober-") {
                assert!(
                    ok.contains(dep_name),
                    "{name} depends on {dep_name}, which is not below it (docs/architecture.md)"
                );
            }
        }
    }
    for (name, _) in ALLOWED {
        assert!(
            all.iter().any(|c| c == name),
            "{name} of the table is not a crate"
        );
    }
}

/// Each crate's root says in its docs which prober crates it may use
/// (`//! May use: ...`) and what it may not do (`//! May not: ...`); the
/// list it gives is this test's table, so the docs cannot drift from it.
#[test]
fn each_crate_says_what_it_may_use_and_may_not_do() {
    let all = crates(&metadata());
    for name in &all {
        let allowed = allowed_for(name, &all);
        let dir = workspace().join("crates").join(name).join("src");
        let root = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{name} has a lib.rs or main.rs"));
        let text = std::fs::read_to_string(&root).unwrap();
        let doc: String = text
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .map(|l| l.trim_start_matches("//!").trim())
            .collect::<Vec<_>>()
            .join(" ");
        let uses = doc
            .split_once("May use:")
            .and_then(|(_, rest)| rest.split_once("May not:"))
            .map(|(uses, _)| uses)
            .unwrap_or_else(|| panic!("{name}'s crate docs have no \"May use: ... May not: ...\""));
        let said: BTreeSet<&str> = uses
            .split(|c: char| c == ',' || c == '`' || c == '.' || c.is_whitespace())
            .filter(|w| w.starts_with("prober-"))
            .collect();
        if name == BINARY {
            assert!(
                uses.contains("every prober crate"),
                "{name}: its docs say it may use every prober crate"
            );
            continue;
        }
        let table: BTreeSet<&str> = allowed.iter().map(String::as_str).collect();
        assert_eq!(
            said, table,
            "{name}: its docs' \"May use\" and this test's table differ"
        );
    }
}

/// Every crate but `prober-sys` forbids `unsafe` at its root, so an
/// `#[allow(unsafe_code)]` cannot creep in anywhere else (forbid cannot be
/// allowed again), and names no raw `libc::syscall`.
#[test]
fn unsafe_and_raw_syscalls_live_only_in_prober_sys() {
    let crates = workspace().join("crates");
    let mut roots = vec![workspace().join("benches/src/lib.rs")];
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        if dir.file_name().is_some_and(|n| n == "prober-sys") {
            continue;
        }
        let src = dir.join("src");
        let root = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{} has a lib.rs or main.rs", dir.display()));
        roots.push(root);
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(
                !text.contains("libc::syscall"),
                "{} makes a raw syscall: it belongs in prober-sys",
                f.display()
            );
        }
    }
    for root in roots {
        let text = std::fs::read_to_string(&root).unwrap();
        assert!(
            text.lines().any(|l| l.trim() == "#![forbid(unsafe_code)]"),
            "{} does not forbid unsafe code: unsafe belongs in prober-sys",
            root.display()
        );
    }
}

/// A protocol's own options, and a responder's own settings, are named
/// only by their crate: the binary and the daemon add, read, check and put
/// them by looping over the protocol and responder lists
/// (`prober_net::options::ProtocolOptions`), so a new protocol's options
/// or responder's settings cost no line in either (the daemon's unit tests
/// aside).
#[test]
fn the_binary_names_no_protocol_options_type() {
    let mut files = Vec::new();
    for dir in ["crates/prober-cli/src", "crates/prober-daemon/src"] {
        rust_files(&workspace().join(dir), &mut files);
    }
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let text = text.split("\n#[cfg(test)]").next().unwrap_or_default();
        for name in [
            "HttpSpec",
            "DnsSpec",
            "StampSpec",
            "IcmpSpec",
            "HTTP_FLAGS",
            "DNS_FLAGS",
            "STAMP_FLAGS",
            "SocketKind",
            "ReflectorSpec",
            "ReflectorConfig",
            "Impairments",
            "GrpcServeOptions",
        ] {
            assert!(
                !text.contains(name),
                "{} names {name}: a protocol's options and a responder's settings belong to its crate and its ProtocolOptions",
                f.display()
            );
        }
    }
}

/// The top-level module a source file belongs to (`runner/tests.rs` is
/// part of `runner`); `None` for the crate root.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Names the crate root re-exports, with the module they come from
/// (`pub use config::{Pacing, RunConfig};`), so `crate::Pacing` counts as
/// a use of `config`.
fn reexports(root: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for stmt in root.split(';') {
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let rest = rest.trim_start_matches("self::");
        let Some((module, names)) = rest.split_once("::") else {
            continue;
        };
        for name in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = name.trim().rsplit("::").next().unwrap_or_default();
            let name = name.rsplit(" as ").next().unwrap_or(name).trim();
            if !name.is_empty() {
                map.insert(name.to_owned(), module.to_owned());
            }
        }
    }
    map
}

/// Every top-level name a file reaches through `crate::`, including those
/// inside `use crate::{a, b::c}`.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in text.match_indices("crate::") {
        // `prober_core::x` and `$crate::` are other crates' paths.
        let before = text[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
            continue;
        }
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(group.len(), |(j, _)| j);
            let mut depth = 0;
            let mut item = String::new();
            for c in group[..end].chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.insert(ident(item.trim()));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            names.insert(ident(item.trim()));
        } else {
            names.insert(ident(rest));
        }
    }
    names.remove("");
    names
}

/// Module edges of one crate: `a -> b` when a file of module `a` names
/// `crate::b` (or a name the root re-exports from `b`).
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let root = ["lib.rs", "main.rs"]
        .iter()
        .find_map(|f| std::fs::read_to_string(src.join(f)).ok())
        .unwrap_or_default();
    let reexported = reexports(&root);
    let mut modules = BTreeSet::new();
    for f in &files {
        if let Some(m) = module_of(src, f) {
            modules.insert(m);
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some(from) = module_of(src, f) else {
            continue;
        };
        // Unit tests may use anything; comments (doc links among them) are
        // no dependency.
        if f.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let full = std::fs::read_to_string(f).unwrap();
        let code = full.split("#[cfg(test)]").next().unwrap_or_default();
        let text: String = code
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        for name in crate_paths(&text) {
            let to = if modules.contains(&name) {
                Some(name)
            } else {
                reexported.get(&name).cloned()
            };
            if let Some(to) = to.filter(|t| *t != from) {
                graph.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    graph
}

/// A cycle in `graph`, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_crate_has_a_module_cycle() {
    let crates = workspace().join("crates");
    let mut checked = 0;
    for entry in std::fs::read_dir(&crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let graph = module_graph(&src);
        if let Some(cycle) = find_cycle(&graph) {
            panic!("module cycle in {}: {}", src.display(), cycle.join(" -> "));
        }
        checked += 1;
    }
    assert!(checked >= 8, "checked {checked} crates");
}

#[test]
fn the_cycle_check_finds_cycles() {
    let text = "use crate::{a::X, b::{Y, Z}};\nfn f() { crate::c::g(); prober_core::crate::x; }";
    let names: Vec<String> = crate_paths(text).into_iter().collect();
    assert_eq!(names, ["a", "b", "c"]);
    let mut g = BTreeMap::new();
    g.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    g.insert("b".to_owned(), BTreeSet::from(["c".to_owned()]));
    assert_eq!(find_cycle(&g), None);
    g.insert("c".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(find_cycle(&g).unwrap().len(), 4);
}
