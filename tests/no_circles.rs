//! Every dependency in the Rust sources runs one way: no top-level module
//! of the crate reaches itself again through `crate::` paths, and no file of
//! `rust/engine/` through `super::` paths (an item `engine/mod.rs`
//! re-exports counts as its file's). The one exception is `engine/mod.rs`
//! itself, which holds `Context` (what every engine file extends) and is
//! left out of the engine's graph. A file's unit tests are not read.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its unit tests and comment lines.
fn code(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap();
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names written right after each `prefix` in `text`: `a` of `a::b`,
/// and each of `a, b` of `{a, b}`.
fn names_after(text: &str, prefix: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in text.match_indices(prefix) {
        let rest = &text[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            out.extend(group.split(',').map(|s| ident(s.trim())));
        } else {
            out.push(ident(rest));
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// The groups of more than one node that reach one another (Tarjan).
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in &self.graph[v] {
                let w = w.as_str();
                if !self.graph.contains_key(w) {
                    continue;
                }
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.stack.contains(&w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.out
}

#[test]
fn the_crate_modules_depend_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("rust");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let top = |p: &Path| -> String {
        let rel = p.strip_prefix(&root).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        first.trim_end_matches(".rs").to_string()
    };
    let modules: BTreeSet<String> = files.iter().map(|p| top(p)).collect();
    let mut graph = Graph::new();
    for path in &files {
        let me = top(path);
        if me == "lib" {
            continue;
        }
        let deps = graph.entry(me.clone()).or_default();
        for name in names_after(&code(path), "crate::") {
            if name != me && modules.contains(&name) {
                deps.insert(name);
            }
        }
    }
    assert!(graph["engine"].contains("analysis"), "{graph:?}");
    assert_eq!(circles(&graph), Vec::<Vec<String>>::new(), "{graph:?}");
}

#[test]
fn the_engine_files_depend_one_way() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("rust/engine");
    let stems: BTreeSet<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().to_string())
        .collect();
    // `pub use left::LeftReason;` in mod.rs: `super::LeftReason` is left.rs's.
    let mut reexported = BTreeMap::new();
    for line in code(&dir.join("mod.rs")).lines() {
        let line = line.trim();
        let Some(rest) = line
            .strip_prefix("pub use ")
            .or_else(|| line.strip_prefix("use "))
        else {
            continue;
        };
        if let Some((module, item)) = rest.trim_end_matches(';').split_once("::") {
            if stems.contains(module) && !item.contains("::") {
                reexported.insert(item.to_string(), module.to_string());
            }
        }
    }
    let mut graph = Graph::new();
    for stem in stems.iter().filter(|s| *s != "mod") {
        let deps = graph.entry(stem.clone()).or_default();
        for name in names_after(&code(&dir.join(format!("{stem}.rs"))), "super::") {
            let module = reexported.get(&name).cloned().unwrap_or(name);
            if &module != stem && stems.contains(&module) && module != "mod" {
                deps.insert(module);
            }
        }
    }
    assert!(graph["checks"].contains("sharing"), "{graph:?}");
    assert!(graph["sharing"].contains("left"), "{graph:?}");
    assert_eq!(circles(&graph), Vec::<Vec<String>>::new(), "{graph:?}");
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let g = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry((*a).into()).or_default().insert((*b).into());
            g.entry((*b).into()).or_default();
        }
        g
    };
    assert_eq!(
        circles(&g(&[("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")])),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
    assert!(circles(&g(&[("a", "b")])).is_empty());
    assert_eq!(names_after("use super::{x, y::Z};", "super::"), ["x", "y"]);
}
