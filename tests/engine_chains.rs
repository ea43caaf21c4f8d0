//! Engine rules: chains of mutating calls on one memory.
//!
//! Every plan made through `common::plans::planned` is also checked by
//! simulation: structurally (edits on user sets) and semantically, by the
//! reference interpreter (`common::interp`), which runs the original graph
//! with torch's functional semantics and the planned program with real
//! in-place calls on shared memory.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::builder::*;
use common::graphs::*;
use common::plans::*;
use fxrewrite::plan::{PlanArg, ValueRef};
use fxrewrite::Action;

// ----- 13: chains of mutations -----------------------------------------------------

#[test]
fn three_chained_v2_mutations_of_one_buffer() {
    let mut b = B::new();
    let EmptyBuf { x, w, buf } = empty_buffer(&mut b);
    let (_, g1) = rms_v2_result(&mut b, buf, x, w);
    let (_, g2) = rms_v2_result(&mut b, g1, x, w);
    let (_, g3) = rms_v2_result(&mut b, g2, x, w);
    let g = b.output(&[g3]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced; 3]);
    for gi in [g1, g2, g3] {
        assert_eq!(replaced_with(&p, gi), Some(ValueRef::Old(buf)));
    }
    for (_, args, _) in inserted_calls(&p) {
        assert_eq!(args[0], PlanArg::Ref(ValueRef::Old(buf)));
    }
    assert_eq!(p.new_nodes, 3);
}

#[test]
fn chained_mutation_with_old_value_read_at_the_end_clones_once() {
    // buf -> af1 -> g1 -> af2 -> g2, and the output also returns g1: the
    // second call must not overwrite g1's value in place.
    let mut b = B::new();
    let EmptyBuf { x, w, buf } = empty_buffer(&mut b);
    let (_, g1) = rms_v2_result(&mut b, buf, x, w);
    let (_, g2) = rms_v2_result(&mut b, g1, x, w);
    let g = b.output(&[g1, g2]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced, Action::Cloned]);
    assert_eq!(
        p.report.decisions[1].clones[0].reader.as_deref(),
        Some("output")
    );
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(buf)));
    assert!(matches!(replaced_with(&p, g2), Some(ValueRef::New(_))));
}
