//! Rules the sources keep, read as text: where a form may be named, that
//! every dependency runs one way, and that ARCHITECTURE.md's answers name
//! real files and functions. One test binary for all three (one link in CI),
//! sharing one reader of the sources.
//!
//! Forms. A form is known in `rust/forms/` only. The engine, the analysis,
//! the plan and the binding ask a form's capabilities
//! (`Form::buffers_are_bases`, `Form::writes_views_back_by_scatter`) and read
//! the call its rule parsed (`MutationCall::labels_naming_buffer`,
//! `reinplace_v2::cuts_by_storage_offset_from`); none of them names a form or
//! spells a key of the v2 encoding. That is what keeps "where do I add a
//! form" (ARCHITECTURE.md) at the rule's file, the registry and two more.
//!
//! Circles. No top-level module of the crate reaches itself again through
//! `crate::` paths, and no file of `rust/engine/` through `super::` paths
//! (an item `engine/mod.rs` re-exports counts as its file's). `engine/mod.rs`
//! itself holds `Context` (what every engine file extends) and is left out
//! of the engine's graph.
//!
//! Read-only checks. The files of the checks and the hazards
//! (`engine/checks.rs`, `engine/hazards.rs`) extend only the read-only
//! `Model` and `Facts`, and emission (`engine/emit.rs`) only the `Emitter`:
//! a check cannot change what the next check reads.
//!
//! ARCHITECTURE.md. In "Four questions, and the files each takes", every
//! `` `rust/...rs` (`function` ``...) pair names a function defined in that
//! file, and the count each answer states ("Nine files") is the number of
//! distinct files it names.
//!
//! A file's unit tests (its `#[cfg(test)]` module, last) are not read.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

// --- reading the sources ------------------------------------------------------------------

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every file below `dir` whose name ends with `.{ext}`, sorted.
fn sources(dir: &Path, ext: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, ext, out);
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, ext, &mut out);
    out.sort();
    out
}

/// `path` relative to the checkout, with `/` separators.
fn rel(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap()
        .to_string_lossy()
        .replace('\\', "/")
}

/// The lines of code of a file before its unit tests, with their 1-based
/// numbers, comment lines (starting with `comment`) left out.
fn code_lines(path: &Path, comment: &str) -> Vec<(usize, String)> {
    let text = fs::read_to_string(path).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap();
    code.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with(comment))
        .map(|(i, l)| (i + 1, l.to_string()))
        .collect()
}

/// [`code_lines`] as one text.
fn code(path: &Path, comment: &str) -> String {
    code_lines(path, comment)
        .into_iter()
        .map(|(_, l)| l)
        .collect::<Vec<_>>()
        .join("\n")
}

// --- read-only checks ---------------------------------------------------------------------

/// The `impl` blocks of `text` by the type they extend (`impl Model<'_, '_> {` -> `Model`),
/// with the names of the methods in each that take `&mut self`.
fn impls(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut last_fn = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("impl") {
            let rest = rest.trim_start_matches(|c| c != ' ').trim_start();
            let ty = rest.split(['<', ' ', '{']).next().unwrap_or("").to_string();
            out.push((ty, Vec::new()));
        } else if let Some(i) = line.find("fn ") {
            let name = &line[i + 3..];
            last_fn = name.split(['(', '<']).next().unwrap_or("").to_string();
        }
        if line.contains("&mut self") {
            if let Some((_, muts)) = out.last_mut() {
                muts.push(last_fn.clone());
            }
        }
    }
    out
}

#[test]
fn checks_extend_only_read_only_types_and_emission_only_the_emitter() {
    let engine = root().join("rust/engine");
    for (file, allowed) in [
        ("checks.rs", &["Model", "Facts"][..]),
        ("hazards.rs", &["Model", "Facts"][..]),
        ("emit.rs", &["Emitter", "Facts"][..]),
    ] {
        for (ty, muts) in impls(&code(&engine.join(file), "//")) {
            assert!(allowed.contains(&ty.as_str()), "{file} extends {ty}");
            assert!(
                ty == "Emitter" || muts.is_empty(),
                "{file}: {ty} methods taking &mut self: {muts:?}"
            );
        }
    }
}

#[test]
fn the_impl_reader_reads_types_and_mutable_methods() {
    let text = "impl Model<'_, '_> {\n    fn a(&self) {}\n}\nimpl<'g> Context<'g> {\n    fn b(\n        &mut self,\n    ) {}\n}";
    assert_eq!(
        impls(text),
        [
            ("Model".to_string(), vec![]),
            ("Context".to_string(), vec!["b".to_string()])
        ]
    );
}

// --- forms -------------------------------------------------------------------------------

/// What only `rust/forms/` may say: a form by name, a v2 encoding key.
const FORM_KNOWLEDGE: [&str; 5] = [
    "Form::V1",
    "Form::V2",
    "\"_all_bases\"",
    "_base_index\"",
    "_storage_offset\"",
];

/// Test-only modules outside `rust/forms/` that build v2 nodes by their keys.
const TEST_ONLY: [&str; 1] = ["rust/analysis/test_graph.rs"];

#[test]
fn no_code_outside_rust_forms_names_a_form_or_a_v2_encoding_key() {
    let mut found = Vec::new();
    let mut read = 0;
    for path in sources(&root().join("rust"), "rs") {
        let rel = rel(&path);
        if rel.starts_with("rust/forms/") || TEST_ONLY.contains(&rel.as_str()) {
            continue;
        }
        read += 1;
        for (n, line) in code_lines(&path, "//") {
            for pattern in FORM_KNOWLEDGE {
                if line.contains(pattern) {
                    found.push(format!("{rel}:{n}: {}", line.trim()));
                }
            }
        }
    }
    assert!(
        read > 40,
        "only {read} source files read: is the layout still rust/?"
    );
    assert!(
        found.is_empty(),
        "form knowledge outside rust/forms/ (ask a capability of Form, or the parsed call):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_files_a_new_form_touches_are_the_ones_architecture_md_names() {
    // Outside rust/forms/, the IR's table is the one place that names an
    // auto_functionalized operator.
    let naming: Vec<String> = sources(&root().join("rust"), "rs")
        .iter()
        .map(|p| (rel(p), p))
        .filter(|(r, _)| !r.starts_with("rust/forms/") && !TEST_ONLY.contains(&r.as_str()))
        .filter(|(_, p)| code(p, "//").contains("\"auto_functionalized_v2\""))
        .map(|(r, _)| r)
        .collect();
    assert_eq!(naming, ["rust/ir/mod.rs"]);

    // In python/fxrewrite/: the report names the forms; two readers of a
    // live node know the v2 encoding; nothing else names either.
    let python = sources(&root().join("python/fxrewrite"), "py");
    let with = |pattern: &str| -> Vec<String> {
        python
            .iter()
            .filter(|p| code(p, "#").contains(pattern))
            .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
            .collect()
    };
    assert_eq!(with("\"auto_functionalized_v2\""), Vec::<String>::new());
    assert_eq!(with("Literal[\"v1\", \"v2\"]"), ["report.py"]);
    assert_eq!(with("\"_all_bases\""), ["_pre_pass.py", "fx_meta.py"]);

    // ARCHITECTURE.md's answer names each of them.
    let arch = fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let answer = arch
        .split("**Where do I add a form**")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .unwrap();
    for file in [
        "rust/forms/mod.rs",
        "rust/ir/mod.rs",
        "python/fxrewrite/report.py",
        "python/fxrewrite/_pre_pass.py",
        "python/fxrewrite/fx_meta.py",
    ] {
        assert!(
            answer.contains(file),
            "ARCHITECTURE.md does not name {file}"
        );
    }
}

// --- circles -----------------------------------------------------------------------------

type Graph = BTreeMap<String, BTreeSet<String>>;

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
    let rust_dir = root().join("rust");
    let files = sources(&rust_dir, "rs");
    let top = |p: &Path| -> String {
        let rel = p.strip_prefix(&rust_dir).unwrap();
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
        for name in names_after(&code(path, "//"), "crate::") {
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
    let dir = root().join("rust/engine");
    let stems: BTreeSet<String> = sources(&dir, "rs")
        .iter()
        .filter(|p| p.parent() == Some(dir.as_path()))
        .map(|p| p.file_stem().unwrap().to_string_lossy().to_string())
        .collect();
    // `pub use left::LeftReason;` in mod.rs: `super::LeftReason` is left.rs's.
    let mut reexported = BTreeMap::new();
    for line in code(&dir.join("mod.rs"), "//").lines() {
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
        for name in names_after(&code(&dir.join(format!("{stem}.rs")), "//"), "super::") {
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

// --- ARCHITECTURE.md ---------------------------------------------------------------------

const NUMBERS: [&str; 13] = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve",
];

/// `(path, function)` for each `` `path` (`function` `` in `text` (a path
/// under `rust/` or `python/`), in order; the function is `None` where the
/// path is not followed by one.
fn named(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut starts: Vec<usize> = ["`rust/", "`python/"]
        .iter()
        .flat_map(|prefix| text.match_indices(prefix).map(|(i, _)| i))
        .collect();
    starts.sort_unstable();
    for i in starts {
        let rest = &text[i + 1..];
        let Some(end) = rest.find('`') else { continue };
        let path = rest[..end].to_string();
        let after = &rest[end + 1..];
        let func = after
            .strip_prefix(" (`")
            .and_then(|f| f.find('`').map(|e| f[..e].to_string()));
        out.push((path, func));
    }
    out
}

#[test]
fn each_answer_names_its_files_and_functions_truly() {
    let arch = fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let section = arch
        .split("## Four questions, and the files each takes")
        .nth(1)
        .expect("ARCHITECTURE.md has the section")
        .split("\n## ")
        .next()
        .unwrap();
    let answers: Vec<&str> = section.split("\n- **").skip(1).collect();
    assert_eq!(answers.len(), 4, "four questions");
    for answer in answers {
        let question = answer.split("**").next().unwrap();
        let pairs = named(answer);
        let files: BTreeSet<&str> = pairs.iter().map(|(p, _)| p.as_str()).collect();
        let stated = answer
            .split("** ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .map(str::to_lowercase)
            .and_then(|w| NUMBERS.iter().position(|n| *n == w))
            .unwrap_or_else(|| panic!("{question}: no count of files stated"));
        assert_eq!(stated, files.len(), "{question}: {files:?}");
        for (path, func) in &pairs {
            let text = fs::read_to_string(root().join(path))
                .unwrap_or_else(|_| panic!("{question}: {path} does not exist"));
            if let Some(func) = func {
                assert!(
                    text.contains(&format!("fn {func}(")) || text.contains(&format!("fn {func}<")),
                    "{question}: {path} defines no fn {func}"
                );
            }
        }
    }
}

#[test]
fn the_reader_reads_pairs() {
    let pairs = named("see `rust/a.rs` (`f`: x), `python/c.pyi` and `rust/b.rs` alone");
    assert_eq!(
        pairs,
        [
            ("rust/a.rs".to_string(), Some("f".to_string())),
            ("python/c.pyi".to_string(), None),
            ("rust/b.rs".to_string(), None)
        ]
    );
}
