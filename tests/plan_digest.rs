//! A tool, not a check: one digest of the engine's plans for 12,000 random
//! graphs (`common::random`, the generator of `engine_random.rs`, from one
//! fixed seed; half with the pre pass's records), each planned with the
//! default options and with `hold_back_only_the_call`. A refactoring that
//! must keep every plan byte-identical prints the same line before and after:
//!
//! ```text
//! cargo test --release --test plan_digest -- --ignored --nocapture
//! ```
//!
//! (The saved graphs' plans are checked by `tests/test_plan_snapshot.py`.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

mod common;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use common::random::{add_alias_records, build, case};
use fxrewrite::{plan, plan_with, Action, PlanOptions};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

const GRAPHS: usize = 12_000;

#[test]
#[ignore = "a tool: prints a digest to compare before and after a refactor"]
fn digest_of_the_plans_of_12000_random_graphs() {
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[44; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let strategy = case();
    let mut hasher = DefaultHasher::new();
    let (mut rewritten, mut left, mut errors) = (0usize, 0usize, 0usize);
    for _ in 0..GRAPHS {
        let (steps, outputs, with_meta, records) =
            strategy.new_tree(&mut runner).unwrap().current();
        let mut g = build(&steps, outputs, with_meta);
        if records & 1 == 1 {
            add_alias_records(&mut g, records);
        }
        for options in [
            PlanOptions::default(),
            PlanOptions {
                hold_back_only_the_call: true,
                ..PlanOptions::default()
            },
        ] {
            match plan_with(&g, options) {
                Ok(p) => {
                    for d in &p.report.decisions {
                        match d.action {
                            Action::Left => left += 1,
                            _ => rewritten += 1,
                        }
                    }
                    format!("{p:?}").hash(&mut hasher);
                }
                Err(e) => {
                    errors += 1;
                    e.to_string().hash(&mut hasher);
                }
            }
        }
        // The entry point most callers use is the default one.
        assert_eq!(plan(&g).ok(), plan_with(&g, PlanOptions::default()).ok());
    }
    println!(
        "plans of {GRAPHS} random graphs, two options each: digest {:016x} ({rewritten} decisions rewritten, {left} left, {errors} errors)",
        hasher.finish()
    );
}
