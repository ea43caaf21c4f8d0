//! Engine rules, v2 basics: `auto_functionalized_v2` calls of custom
//! mutating operators on graphs built in Rust that mirror torch's post-grad
//! graphs: re-inplaced, readers moved, buffers cloned with their layout,
//! graph inputs and their write-backs.
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
use common::ops::*;
use common::plans::*;
use fxrewrite::ir::{Graph, NodeId, Value};
use fxrewrite::plan::{Callee, MetaSource, NewId, PlanArg, ValueRef};
use fxrewrite::{Action, Edit, Form, Plan};

// ----- 1-4: v2 basics ----------------------------------------------------------

#[test]
fn v2_write_into_empty_buffer_is_reinplaced() {
    let mut b = B::new();
    let EmptyBuf { x, w, buf } = empty_buffer(&mut b);
    let (af, g1) = rms_v2_result(&mut b, buf, x, w);
    let g = b.output(&[g1]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced]);
    let d = &p.report.decisions[0];
    assert_eq!(d.rule, "reinplace_v2");
    assert_eq!(d.form, Form::V2);
    assert_eq!(d.op, "mylib::rms.default");
    assert!(d.clones.is_empty() && d.moved.is_empty());
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(buf)));
    assert!(erased(&p, g1) && erased(&p, af));
    // One in-place call, on the buffer itself, positional, with the read
    // arguments passed through from the node's kwargs.
    let calls = inserted_calls(&p);
    assert_eq!(calls.len(), 1);
    let (_, args, kwargs) = &calls[0];
    assert_eq!(args[0], PlanArg::Ref(ValueRef::Old(buf)));
    assert_eq!(
        args[1],
        PlanArg::FromKwarg {
            node: af,
            key: "x".into()
        }
    );
    assert!(kwargs.is_empty());
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 0);
    assert!(matches!(
        p.edits.iter().find(|e| matches!(e, Edit::Insert { .. })),
        Some(Edit::Insert {
            meta: MetaSource::Nothing,
            before,
            ..
        }) if *before == af
    ));
}

#[test]
fn v2_later_pure_reader_is_moved_before_the_call() {
    let mut b = B::new();
    let MmBuf { a, w, buf, .. } = mm_buffer(&mut b);
    let (af, g1) = rms_v2_result(&mut b, buf, a, w);
    // Reads the *old* value of `buf` after the call; its inputs all exist
    // before the call.
    let r = b.call(&mul_op(), vec![n(buf), n(a)]);
    let g = b.output(&[g1, r]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced]);
    assert_eq!(moves(&p), [(r, af)]);
    assert_eq!(p.report.decisions[0].moved, ["mul"]);
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 0);
    assert!(p.report.decisions[0].clones.is_empty());
    // The move comes before the in-place call is inserted.
    let mv = p
        .edits
        .iter()
        .position(|e| matches!(e, Edit::Move { .. }))
        .unwrap();
    let ins = p
        .edits
        .iter()
        .position(|e| matches!(e, Edit::Insert { .. }))
        .unwrap();
    assert!(mv < ins);
}

/// A reader moved ahead of the call must not cross a write of memory it
/// reads: here `copy_` (an in-place call already in the graph, from another
/// pass or an earlier round) writes `other` between the call and the
/// reader. Moved before the call, the reader would see `other` unwritten;
/// the old value of `buf` is cloned instead. (Found by the second-round
/// check of `apply_show`'s property test.)
#[test]
fn a_reader_does_not_move_across_an_in_place_write_it_reads() {
    let mut b = B::new();
    let MmBuf { a, m, w, buf } = mm_buffer(&mut b);
    let other = b.call_meta(&mm_op(), vec![n(a), n(m)], Some(meta(&[4, 8])));
    let (_, g1) = rms_v2_result(&mut b, buf, a, w);
    b.call(&copy_op(), vec![n(other), n(g1)]);
    let r = b.call(&mul_op(), vec![n(buf), n(other)]);
    let g = b.output(&[g1, r]);
    let p = planned(&g);
    assert!(moves(&p).is_empty(), "{:?}", moves(&p));
    assert_eq!(actions(&p), [Action::Cloned]);
    check_structure(&g, &p).unwrap();
    same_results(&g, &p).unwrap();
}

fn realized(p: &Plan) -> Vec<NodeId> {
    p.realized_nodes().collect()
}

/// Inductor computes a pointwise node lazily, inside the kernel of its first
/// user that needs a buffer; a reader of the old value whose user comes
/// after the in-place call would read the new value. Every reader of the
/// written memory that stands before the call, moved there or already there,
/// is marked to be computed where it stands; readers of other memory and
/// readers after the last write are not.
#[test]
fn readers_before_an_in_place_write_are_realized_where_they_stand() {
    let mut b = B::new();
    let MmBuf { a, w, buf, .. } = mm_buffer(&mut b);
    let early = b.call(&mul_op(), vec![n(buf), n(buf)]);
    let other = b.call(&mul_op(), vec![n(a), n(a)]);
    let (af, g1) = rms_v2_result(&mut b, buf, a, w);
    let moved = b.call(&mul_op(), vec![n(buf), n(a)]);
    let after = b.call(&mul_op(), vec![n(g1), n(g1)]);
    let g = b.output(&[g1, early, other, moved, after]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced]);
    assert_eq!(moves(&p), [(moved, af)]);
    assert_eq!(realized(&p), [early, moved]);
    assert_eq!(p.report.realized, 2);
    check_structure(&g, &p).unwrap();
    same_results(&g, &p).unwrap();
}

/// A clone writes no memory of the program: nothing needs realizing.
#[test]
fn nothing_is_realized_when_the_call_writes_a_clone() {
    let mut b = B::new();
    let MmBuf { a, w, buf, .. } = mm_buffer(&mut b);
    let early = b.call(&mul_op(), vec![n(buf), n(buf)]);
    let (_, g1) = rms_v2_result(&mut b, buf, a, w);
    let g = b.output(&[g1, buf, early]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned]);
    assert!(realized(&p).is_empty());
}

#[test]
fn v2_reader_that_cannot_move_forces_a_clone() {
    let mut b = B::new();
    let MmBuf { a, w, buf, .. } = mm_buffer(&mut b);
    let (_, g1) = rms_v2_result(&mut b, buf, a, w);
    // The output node reads the old value: it cannot move.
    let g = b.output(&[g1, buf]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned]);
    let d = &p.report.decisions[0];
    assert_eq!(d.clones.len(), 1);
    assert_eq!(d.clones[0].arg, "_all_bases[0]");
    assert_eq!(d.clones[0].reader.as_deref(), Some("output"));
    assert!(
        d.clones[0].reason.contains("output"),
        "{}",
        d.clones[0].reason
    );
    assert_eq!(d.clones[0].bytes, Some(4 * 8 * 4));
    assert!(moves(&p).is_empty());
    // The call writes the clone, and the new value is the clone: the flat
    // copy of buf's storage viewed back with buf's layout.
    assert_eq!(inserted_atens(&p), EXACT_CLONE);
    let inserts: Vec<(NewId, &Vec<PlanArg>)> = p
        .edits
        .iter()
        .filter_map(|e| match e {
            Edit::Insert { id, args, .. } => Some((*id, args)),
            _ => None,
        })
        .collect();
    assert_eq!(
        inserts[0].1,
        &vec![
            PlanArg::Ref(ValueRef::Old(buf)),
            PlanArg::IntList(vec![32]),
            PlanArg::IntList(vec![1]),
            PlanArg::Int(0)
        ]
    );
    assert_eq!(
        inserts[2].1[1..],
        [
            PlanArg::IntList(vec![4, 8]),
            PlanArg::IntList(vec![8, 1]),
            PlanArg::Int(0)
        ]
    );
    let clone_id = inserts[2].0;
    let calls = inserted_calls(&p);
    assert_eq!(calls[0].1[0], PlanArg::Ref(ValueRef::New(clone_id)));
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::New(clone_id)));
    assert_eq!(replaced_with(&p, buf), None);
}

#[test]
fn the_reference_interpreter_catches_a_missing_clone() {
    // The plan of the test above with the clone dropped: the call writes
    // `buf` itself while the output still reads the old value.
    let mut b = B::new();
    let MmBuf { a, w, buf, .. } = mm_buffer(&mut b);
    let (_, g1) = rms_v2_result(&mut b, buf, a, w);
    let g = b.output(&[g1, buf]);
    let good = planned(&g);
    let mut bad = good.clone();
    for e in &mut bad.edits {
        match e {
            Edit::Insert {
                callee: Callee::Target(_),
                args,
                ..
            } => args[0] = PlanArg::Ref(ValueRef::Old(buf)),
            Edit::Replace { node, with } if *node == g1 => *with = ValueRef::Old(buf),
            _ => {}
        }
    }
    let err = same_results(&g, &bad).unwrap_err();
    assert!(err.contains("differs"), "{err}");
    assert!(check_structure(&g, &bad).is_ok());
}

/// `rms` on graph input `x`, then optionally the `copy_(x, new)` epilogue.
fn input_write(epilogue: bool) -> (Graph, NodeId, NodeId) {
    let mut b = B::new();
    let InputBuf { x, y, w } = input_buffer(&mut b);
    let (_, g1) = rms_v2_result(&mut b, x, y, w);
    let copy = if epilogue {
        Some(b.call(&copy_op(), vec![n(x), n(g1)]))
    } else {
        None
    };
    let g = b.output(&[g1]);
    (g, g1, copy.unwrap_or(NodeId(u32::MAX)))
}

#[test]
fn graph_input_written_back_is_reinplaced_and_the_copy_removed() {
    let (g, g1, copy) = input_write(true);
    let x = id_of(&g, "x");
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced]);
    assert_eq!(p.report.writebacks_removed, 1);
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(x)));
    assert!(erased(&p, copy));
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 0);
}

/// `s = select_scatter(x, row, 0, 1)` of graph input `x`, a call writing
/// `s`, then the write-back `copy_(x, other)` (or, `own`, of the call's
/// result), and `s`'s new value returned. Inductor's reinplace pass makes
/// such a scatter write `x` itself whatever the write-back's source: with
/// another source, the write-back would then overwrite what the call wrote
/// (issue 30), so the call writes a copy; with its own result, in place.
fn scatter_of_an_input_written_back(own: bool) -> Graph {
    let mut b = B::new();
    let InputBuf { x, y, w } = input_buffer(&mut b);
    let row = b.input("row", Some(meta(&[8])));
    let other = b.input("other", Some(meta(&[4, 8])));
    let s = b.call_meta(
        &select_scatter_op(),
        vec![n(x), n(row), Value::Int(0), Value::Int(1)],
        Some(meta(&[4, 8])),
    );
    let (_, g1) = rms_v2_result(&mut b, s, y, w);
    b.call(&copy_op(), vec![n(x), n(if own { g1 } else { other })]);
    b.output(&[g1])
}

#[test]
fn a_scatter_of_an_input_overwritten_by_its_write_back_is_written_as_a_copy() {
    let g = scatter_of_an_input_written_back(false);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned], "{:#?}", p.report);
    let reason = &p.report.decisions[0].clones[0].reason;
    assert!(reason.contains("Inductor's reinplace pass"), "{reason}");
    same_results(&g, &p).unwrap();
    let g = scatter_of_an_input_written_back(true);
    let p = planned(&g);
    assert_ne!(actions(&p), [Action::Cloned], "{:#?}", p.report);
    same_results(&g, &p).unwrap();
}

#[test]
fn graph_input_not_written_back_is_cloned() {
    let (g, g1, _) = input_write(false);
    let x = id_of(&g, "x");
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned]);
    assert_eq!(p.report.writebacks_removed, 0);
    let note = &p.report.decisions[0].clones[0];
    assert!(note.reason.contains("not written back"), "{}", note.reason);
    assert!(note.reason.contains("`x`"), "{}", note.reason);
    assert_eq!(note.reader, None);
    assert_ne!(replaced_with(&p, g1), Some(ValueRef::Old(x)));
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 1);
}
