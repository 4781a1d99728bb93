//! The floors of the crate, kept by tests: which top-level modules a module
//! may import, and that no two import each other, directly or round a
//! longer loop (docs/architecture.md draws the floors).
//!
//! The imports are read from the source text: every `crate::<module>` path
//! (a `use crate::{a::X, b::Y}` group names `a` and `b`) and every
//! `super::` chain that climbs to the crate's root, outside comments. A
//! test module reads like the module it tests: it may not reach higher.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// What the lowest floors may import, besides themselves.
const RULES: &[(&str, &[&str])] = &[
    // What a session is: depends on nothing else of the crate.
    ("domain", &[]),
    // A future adapter (`Polled`): depends on nothing of the crate.
    ("wake", &[]),
    // Persistence: the domain's types, its own settings, its metrics.
    ("store", &["config", "domain", "telemetry"]),
    // The sessions service: the store and the domain, scoped by the caller
    // (`principal`), never by how callers are authenticated or served.
    ("sessions", &["config", "domain", "principal", "store", "telemetry", "wake"]),
];

/// Every top-level module of the crate and the top-level modules each imports.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = rust_files(&src);
    let modules: BTreeSet<String> = files.iter().map(|file| module_path(&src, file)[0].clone()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let path = module_path(&src, &file);
        let source = std::fs::read_to_string(&file).unwrap();
        let code: String =
            source.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
        let named = graph.entry(path[0].clone()).or_default();
        for module in crate_paths(&code).into_iter().chain(root_via_super(&code, path.len())) {
            // (A test module inside a file climbs one level more: its
            // `super::super::x` may be a sibling `x`, not a top-level one.)
            if module != path[0] && modules.contains(&module) {
                named.insert(module);
            }
        }
    }
    graph
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|entry| entry.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// `src/a/b/mod.rs` → `[a, b]`; `src/a/b.rs` → `[a, b]`; `src/lib.rs` → `[lib]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.len() > 1 && parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The top-level modules named by `crate::` paths.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            named.extend(group_heads(group));
        } else {
            named.insert(identifier(rest).to_string());
        }
    }
    named.retain(|m| !m.is_empty());
    named
}

/// The first segment of every item of a `{…}` group, up to its closing brace.
fn group_heads(group: &str) -> Vec<String> {
    let (mut heads, mut depth, mut start_of_item) = (Vec::new(), 0, true);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => start_of_item = true,
            c if start_of_item && depth == 0 && !c.is_whitespace() => {
                heads.push(identifier(&group[i..]).to_string());
                start_of_item = false;
            }
            _ => {}
        }
    }
    heads
}

/// The modules named by `super::` chains that climb `depth` levels: to the root.
fn root_via_super(code: &str, depth: usize) -> BTreeSet<String> {
    let climb = "super::".repeat(depth);
    code.match_indices(&climb).map(|(at, _)| identifier(&code[at + climb.len()..]).to_string()).collect()
}

fn identifier(text: &str) -> &str {
    let end = text.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(text.len());
    &text[..end]
}

/// A loop of imports through `from`, if there is one.
fn loop_through(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut trail = vec![from.to_string()];
    let mut seen = BTreeSet::new();
    find_way_back(graph, from, &mut trail, &mut seen).then_some(trail)
}

fn find_way_back(
    graph: &BTreeMap<String, BTreeSet<String>>,
    to: &str,
    trail: &mut Vec<String>,
    seen: &mut BTreeSet<String>,
) -> bool {
    let here = trail.last().unwrap().clone();
    for next in graph.get(&here).into_iter().flatten() {
        if next == to {
            trail.push(next.clone());
            return true;
        }
        if seen.insert(next.clone()) {
            trail.push(next.clone());
            if find_way_back(graph, to, trail, seen) {
                return true;
            }
            trail.pop();
        }
    }
    false
}

#[test]
fn the_lowest_floors_import_only_what_they_may() {
    let graph = imports();
    for (module, allowed) in RULES {
        let named = graph.get(*module).unwrap_or_else(|| panic!("no module {module}"));
        let beyond: Vec<&String> = named.iter().filter(|m| !allowed.contains(&m.as_str())).collect();
        assert!(beyond.is_empty(), "{module} imports {beyond:?}; it may import only {allowed:?}");
    }
}

#[test]
fn no_two_top_level_modules_import_each_other_even_round_a_loop() {
    let graph = imports();
    assert!(graph.len() >= 20, "read the crate's modules ({})", graph.len());
    let loops: Vec<String> = graph.keys().filter_map(|m| loop_through(&graph, m)).map(|l| l.join(" → ")).collect();
    assert!(loops.is_empty(), "import loops between top-level modules:\n{}", loops.join("\n"));
}

#[test]
fn the_reader_sees_every_way_of_naming_a_module() {
    let code = "use crate::{a::X, b::{c, d}, e};\nlet x = crate::f::g();\nuse super::super::h::Y;";
    assert_eq!(crate_paths(code), ["a", "b", "e", "f"].map(String::from).into());
    assert_eq!(root_via_super(code, 2), ["h"].map(String::from).into());
    assert!(root_via_super(code, 3).is_empty());
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec!["a"])]
            .into_iter()
            .map(|(m, to)| (m.to_string(), to.into_iter().map(String::from).collect()))
            .collect();
    assert_eq!(loop_through(&graph, "a").unwrap(), ["a", "b", "c", "a"]);
    assert!(loop_through(&graph, "d").is_none());
}
