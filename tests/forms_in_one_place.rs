//! A form is known in `rust/forms/` only. The engine, the analysis, the plan
//! and the binding ask a form's capabilities (`Form::buffers_are_bases`,
//! `Form::writes_views_back_by_scatter`) and read the call its rule parsed
//! (`MutationCall::labels_naming_buffer`, `reinplace_v2::cuts_by_storage_offset_from`);
//! none of them names a form or spells a key of the v2 encoding. That is
//! what keeps "where do I add a form" (ARCHITECTURE.md) at the rule's file,
//! the registry, `Form`'s capabilities and the tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::fs;
use std::path::{Path, PathBuf};

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

#[test]
fn no_code_outside_rust_forms_names_a_form_or_a_v2_encoding_key() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("rust"), &mut files);
    let mut found = Vec::new();
    let mut read = 0;
    for path in files {
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel.starts_with("rust/forms/") || TEST_ONLY.contains(&rel.as_str()) {
            continue;
        }
        read += 1;
        let text = fs::read_to_string(&path).unwrap();
        // A file's unit tests (its `#[cfg(test)]` module, last) build nodes of either form.
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (i, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for pattern in FORM_KNOWLEDGE {
                if line.contains(pattern) {
                    found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
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

/// The code of `path` (before its unit tests), without comment lines.
fn code_of(path: &Path, comment: &str) -> String {
    let text = fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap();
    text.lines()
        .filter(|l| !l.trim_start().starts_with(comment))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_files_a_new_form_touches_are_the_ones_architecture_md_names() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Outside rust/forms/, the IR's table is the one place that names an
    // auto_functionalized operator.
    let mut rust = Vec::new();
    sources(&root.join("rust"), &mut rust);
    let mut naming = Vec::new();
    for path in &rust {
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel.starts_with("rust/forms/") || TEST_ONLY.contains(&rel.as_str()) {
            continue;
        }
        if code_of(path, "//").contains("\"auto_functionalized_v2\"") {
            naming.push(rel);
        }
    }
    assert_eq!(naming, ["rust/ir/mod.rs"]);

    // In python/fxrewrite/: the report names the forms; two readers of a
    // live node know the v2 encoding; nothing else names either.
    let mut python: Vec<PathBuf> = fs::read_dir(root.join("python/fxrewrite"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    python.sort();
    let with = |pattern: &str| -> Vec<String> {
        python
            .iter()
            .filter(|p| code_of(p, "#").contains(pattern))
            .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
            .collect()
    };
    assert_eq!(with("\"auto_functionalized_v2\""), Vec::<String>::new());
    assert_eq!(with("Literal[\"v1\", \"v2\"]"), ["report.py"]);
    assert_eq!(with("\"_all_bases\""), ["_pre_pass.py", "fx_meta.py"]);

    // ARCHITECTURE.md's answer names each of them.
    let arch = fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
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
