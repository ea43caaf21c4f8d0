//! ARCHITECTURE.md's answers stay true: in "Three questions, and the files
//! each takes", every `` `rust/...rs` (`function` ``...) pair names a function
//! defined in that file, and the count each answer states ("Nine files") is
//! the number of distinct files it names.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

const NUMBERS: [&str; 13] = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve",
];

/// `(path, function)` for each `` `path` (`function` `` in `text`; the
/// function is `None` where the path is not followed by one.
fn named(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("`rust/") {
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
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let arch = fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let section = arch
        .split("## Three questions, and the files each takes")
        .nth(1)
        .expect("ARCHITECTURE.md has the section")
        .split("\n## ")
        .next()
        .unwrap();
    let answers: Vec<&str> = section.split("\n- **").skip(1).collect();
    assert_eq!(answers.len(), 3, "three questions");
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
            let text = fs::read_to_string(root.join(path))
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
    let pairs = named("see `rust/a.rs` (`f`: x) and `rust/b.rs` alone");
    assert_eq!(
        pairs,
        [
            ("rust/a.rs".to_string(), Some("f".to_string())),
            ("rust/b.rs".to_string(), None)
        ]
    );
}
