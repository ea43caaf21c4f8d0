//! Engine rules, regressions: named tests for the patterns on which the
//! engine once made plans that changed the program's result, which the
//! random graphs (`engine_random.rs`) now include.
//!
//! Every plan made through `common::plans::planned` is also checked by
//! simulation: structurally (edits on user sets) and semantically, by the
//! reference interpreter (`common::interp`), which runs the original graph
//! with torch's functional semantics and the planned program with real
//! in-place calls on shared memory.
//!
//! The random graphs include the five patterns on which the engine once
//! made plans that changed the program's result (each has a named
//! regression test here):
//! - a graph input whose intermediate value is still read after the input's
//!   `copy_` write-back (returned next to the final value, or the input written
//!   back with an unrelated value): the re-inplaced value lived in the input's
//!   memory, which the write-back then overwrote;
//! - a `split_with_sizes` of an old value taken after a call wrote it: the
//!   split's getitems were moved before the call, their own readers were not;
//! - `as_strided` addressing (v2 view info or an `as_strided` node) on the
//!   result of a call whose buffer was cloned from a strided or offset view:
//!   a plain `clone` did not keep the layout torch's `clone_preserve_strides`
//!   gives the result;
//! - the same without metadata, by an `as_strided` node on the result (or a
//!   view of it): the engine cannot know the buffer's layout, and its plain
//!   `clone` came out contiguous; such a node is now left alone;
//! - a `copy_` write-back whose source is a view of the input's own original
//!   memory (`copy_(x, x)`, `copy_(x, x[:, 0:8])`): the hazard scan skipped
//!   the write-back as a reader, so a call on `x` was re-inplaced and the
//!   write-back then copied the overwritten values.
//!
//! They still avoid two forms of the no-metadata pattern on which the
//! engine's plan is known to change the program's result (reported, not
//! tested here; `Gen::strided_info_ok` and `Gen::strided_node_ok`). In both a
//! call's buffer, a strided or offset view without metadata, is cloned
//! plainly (contiguous), and the result's layout is then used by stride
//! further on, out of sight of the engine's check for a layout-preserving
//! clone:
//! - `as_strided` view info of a later v2 call on the result (or a view of
//!   it): that call is left alone for want of metadata, but still addresses
//!   its base by stride;
//! - an `as_strided` node on the result of a later call that writes the
//!   first call's result (re-inplaced into the plain clone).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::builder::*;
use common::graphs::*;
use common::ops::*;
use common::plans::*;
use fxrewrite::ir::{Dim, Graph, NodeId, OpCode, TargetKind, TensorMeta, Value};
use fxrewrite::plan::{Callee, NewId, PlanArg, ValueRef};
use fxrewrite::{plan, Action, Edit};

// ----- 14: regressions: patterns the random graphs once avoided ---------------

/// The strided, offset buffer of bugs 3 and 4 with metadata: [`mm_buffer`]'s
/// `mm` and its slice of columns 2..8 (strides `[8, 1]`, offset 2), given
/// `layout`, as `(the mm and its inputs, the slice)`.
fn offset_slice_of_an_mm(b: &mut B, layout: &TensorMeta) -> (MmBuf, NodeId) {
    let mm = mm_buffer(b);
    let sl = b.call_meta(
        &slice_op(),
        vec![n(mm.buf), Value::Int(1), Value::Int(2), Value::Int(8)],
        Some(layout.clone()),
    );
    (mm, sl)
}

/// A `[4, 24]` mm compiled with dynamic shapes (layout symbolic, offset 0)
/// and what a v1 `rms` on a `width`-column view of it reads: `x`
/// `[4, width]` and `w` `[width]`, as `(mm, [x, w])`.
fn symbolic_mm(b: &mut B, width: i64) -> (NodeId, [NodeId; 2]) {
    let a = b.input("a", Some(meta(&[4, 8])));
    let m = b.input("m", Some(meta(&[8, 24])));
    let x = b.input("x", Some(meta(&[4, width])));
    let w = b.input("w", Some(meta(&[width])));
    let mm = b.call_meta(&mm_op(), vec![n(a), n(m)], Some(symbolic_meta(2, Some(0))));
    (mm, [x, w])
}

/// The inputs of the writes into an empty slice of an mm: `a` `[4, 8]`, `m`
/// `[8, 8]`, `x` `[4, 0]` and `w` `[0]` (what an empty write reads), and
/// `mm = a @ m` `[4, 8]`, whose old value the test reads after the call.
struct EmptyWrite {
    a: NodeId,
    m: NodeId,
    x: NodeId,
    w: NodeId,
    mm: NodeId,
}

fn empty_write(b: &mut B) -> EmptyWrite {
    let a = b.input("a", Some(meta(&[4, 8])));
    let m = b.input("m", Some(meta(&[8, 8])));
    let x = b.input("x", Some(meta(&[4, 0])));
    let w = b.input("w", Some(meta(&[0])));
    let mm = b.call_meta(&mm_op(), vec![n(a), n(m)], Some(meta(&[4, 8])));
    EmptyWrite { a, m, x, w, mm }
}

/// Bug 1: x is written twice and written back with the second value, and
/// the first (intermediate) value is also returned. Re-inplacing the first
/// call would leave that value in x's memory, which the `copy_` write-back
/// then overwrites.
#[test]
fn intermediate_value_of_a_written_back_input_returned_is_cloned() {
    let mut b = B::new();
    let InputBuf { x, y, w } = input_buffer(&mut b);
    let (_, g1) = rms_v2_result(&mut b, x, y, w);
    let (_, g2) = rms_v2_result(&mut b, g1, y, w);
    let copy = b.call(&copy_op(), vec![n(x), n(g2)]);
    let g = b.output(&[g1, g2]);
    let p = planned(&g);
    assert_eq!(
        actions(&p),
        [Action::Cloned, Action::Cloned],
        "{}",
        dump(&g, &p)
    );
    let d1 = &p.report.decisions[0];
    assert_eq!(d1.clones.len(), 1);
    assert_eq!(d1.clones[0].reader.as_deref(), Some("output"));
    assert!(
        d1.clones[0].reason.contains("writes the input back"),
        "{}",
        d1.clones[0].reason
    );
    // The second call's buffer, g1, is still returned: cloned too.
    assert_eq!(
        p.report.decisions[1].clones[0].reader.as_deref(),
        Some("output")
    );
    // Neither call writes x: the write-back stays and does the writing.
    assert!(!erased(&p, copy));
    assert_eq!(p.report.writebacks_removed, 0);
    let calls = inserted_calls(&p);
    assert_eq!(calls.len(), 2);
    for (_, args, _) in &calls {
        assert!(
            matches!(args[0], PlanArg::Ref(ValueRef::New(_))),
            "{args:?}"
        );
    }
    assert!(matches!(replaced_with(&p, g1), Some(ValueRef::New(_))));
    assert_ne!(replaced_with(&p, g1), replaced_with(&p, g2));
}

/// Bug 1, second form: x is written by a call, then written back with an
/// unrelated value (`copy_(x, y)`), and the call's result is returned.
#[test]
fn result_in_an_input_overwritten_by_an_unrelated_write_back_is_cloned() {
    let mut b = B::new();
    let InputBuf { x, y, w } = input_buffer(&mut b);
    let (_, g1) = rms_v2_result(&mut b, x, y, w);
    let copy = b.call(&copy_op(), vec![n(x), n(y)]);
    let g = b.output(&[g1]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned], "{}", dump(&g, &p));
    let note = &p.report.decisions[0].clones[0];
    assert_eq!(note.arg, "_all_bases[0]");
    assert_eq!(note.reader.as_deref(), Some("output"));
    assert!(
        note.reason.contains("writes the input back"),
        "{}",
        note.reason
    );
    assert_eq!(note.bytes, Some(4 * 8 * 4));
    assert!(!erased(&p, copy));
    assert_eq!(p.report.writebacks_removed, 0);
    assert_eq!(inserted_atens(&p), EXACT_CLONE);
    let calls = inserted_calls(&p);
    assert_eq!(calls[0].1[0], PlanArg::Ref(ValueRef::New(NewId(2))));
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::New(NewId(2))));

    // The plan the engine used to make (the call writes x itself) is caught
    // by the reference interpreter.
    let mut bad = p.clone();
    for e in &mut bad.edits {
        if let Edit::Insert {
            id: NewId(1),
            callee,
            ..
        } = e
        {
            *callee = Callee::Aten("aten::alias.default");
        }
    }
    let err = same_results(&g, &bad).unwrap_err();
    assert!(err.contains("differs"), "{err}");
}

/// The write-back's own value may stay in the input's memory: the plain
/// epilogue case is still re-inplaced (see
/// `graph_input_written_back_is_reinplaced_and_the_copy_removed`), also when
/// the final value is returned next to an earlier one that lives elsewhere.
#[test]
fn final_value_of_a_written_back_input_returned_is_not_cloned() {
    let mut b = B::new();
    let InputBuf { x, y, w } = input_buffer(&mut b);
    let (_, g1) = rms_v2_result(&mut b, x, y, w);
    let (_, g2) = rms_v2_result(&mut b, g1, y, w);
    let copy = b.call(&copy_op(), vec![n(x), n(g2)]);
    let g = b.output(&[g2]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced; 2], "{}", dump(&g, &p));
    assert!(erased(&p, copy));
    assert_eq!(p.report.writebacks_removed, 1);
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(x)));
    assert_eq!(replaced_with(&p, g2), Some(ValueRef::Old(x)));
}

/// Bug 2: a `split_with_sizes` of the old value taken after the call wrote
/// it. The split and its getitem are views (of the list, which is a view of
/// its source), so their reader is the hazard: moved with them, or, when it
/// cannot move (the output), the buffer is cloned.
#[test]
fn split_of_the_old_value_after_the_call_moves_with_its_readers() {
    for direct in [false, true] {
        let mut b = B::new();
        let MmBuf { a, w, buf, .. } = mm_buffer(&mut b);
        let (af, g1) = rms_v2_result(&mut b, buf, a, w);
        let sp = b.call(
            &split_with_sizes_op(),
            vec![n(buf), ints(&[2, 2, 4]), Value::Int(-1)],
        );
        let s0 = b.getitem(sp, 0);
        let r = (!direct).then(|| b.call(&mul_op(), vec![n(s0), n(s0)]));
        let g = b.output(&[g1, r.unwrap_or(s0)]);
        let p = planned(&g);
        let d = &p.report.decisions[0];
        if let Some(r) = r {
            assert_eq!(actions(&p), [Action::Reinplaced], "{}", dump(&g, &p));
            assert_eq!(moves(&p), [(sp, af), (s0, af), (r, af)]);
            assert_eq!(d.moved, ["split_with_sizes", "getitem_1", "mul"]);
            assert_eq!(inserted_aten(&p, "aten::clone.default"), 0);
            assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(buf)));

            // The plan the engine used to make: the split and its getitem
            // moved, their reader left after the call.
            let mut bad = p.clone();
            bad.edits
                .retain(|e| !matches!(e, Edit::Move { node, .. } if *node == r));
            let err = same_results(&g, &bad).unwrap_err();
            assert!(err.contains("differs"), "{err}");
        } else {
            assert_eq!(actions(&p), [Action::Cloned], "{}", dump(&g, &p));
            assert_eq!(d.clones[0].reader.as_deref(), Some("output"));
            assert!(moves(&p).is_empty());
            assert_eq!(inserted_aten(&p, "aten::clone.default"), 1);
            assert!(matches!(replaced_with(&p, g1), Some(ValueRef::New(_))));
        }
    }
}

/// Bug 3: a strided, offset buffer (a slice of an mm) written whole by a
/// first call that must clone it (the mm is returned), then written through
/// `as_strided` view info by a second call. The clone must keep the slice's
/// layout (torch's `clone_preserve_strides`), or the second call's view
/// addresses other elements.
#[test]
fn clone_of_an_offset_buffer_keeps_its_layout_for_later_as_strided_views() {
    let layout = strided_meta(&[4, 6], &[8, 1], 2);
    let mut b = B::new();
    let (MmBuf { a, w, buf: mm, .. }, sl) = offset_slice_of_an_mm(&mut b, &layout);
    let (_, g1) = rms_v2_result(&mut b, sl, a, w);
    b.g.nodes[g1.idx()].meta = Some(layout.clone());
    // Elements 11..14 and 19..22 of the storage: rows 1-2, columns 3-5,
    // inside the slice.
    let af2 = rms_v2_as_strided(&mut b, g1, a, w, &[2, 3], &[8, 1], 11);
    let g2 = b.getitem(af2, 1);
    b.g.nodes[g2.idx()].meta = Some(layout);
    let g = b.output(&[g2, mm]);
    let p = planned(&g);
    assert_eq!(
        actions(&p),
        [Action::Cloned, Action::Reinplaced],
        "{}",
        dump(&g, &p)
    );
    let d1 = &p.report.decisions[0];
    assert_eq!(d1.clones[0].reader.as_deref(), Some("output"));
    assert_eq!(d1.clones[0].bytes, Some(4 * 6 * 4));
    // as_strided(sl, [32], [1], 0) -> clone -> as_strided back to the
    // slice's layout; then the second call's view on that.
    assert_eq!(
        inserted_atens(&p),
        [
            "aten::as_strided.default",
            "aten::clone.default",
            "aten::as_strided.default",
            "aten::as_strided.default",
        ]
    );
    let inserts: Vec<(&NewId, &Callee, &Vec<PlanArg>)> = p
        .edits
        .iter()
        .filter_map(|e| match e {
            Edit::Insert {
                id, callee, args, ..
            } => Some((id, callee, args)),
            _ => None,
        })
        .collect();
    assert_eq!(
        inserts[0].2,
        &vec![
            PlanArg::Ref(ValueRef::Old(sl)),
            PlanArg::IntList(vec![32]),
            PlanArg::IntList(vec![1]),
            PlanArg::Int(0),
        ]
    );
    assert_eq!(
        inserts[1].2,
        &vec![PlanArg::Ref(ValueRef::New(*inserts[0].0))]
    );
    assert_eq!(
        inserts[2].2,
        &vec![
            PlanArg::Ref(ValueRef::New(*inserts[1].0)),
            PlanArg::IntList(vec![4, 6]),
            PlanArg::IntList(vec![8, 1]),
            PlanArg::Int(2),
        ]
    );
    let clone_val = ValueRef::New(*inserts[2].0);
    assert_eq!(replaced_with(&p, g1), Some(clone_val));
    assert_eq!(replaced_with(&p, g2), Some(clone_val));
    // inserts[3] is the first call; [4] the second call's view, [5] the call.
    assert_eq!(inserts[3].2[0], PlanArg::Ref(clone_val));
    assert_eq!(inserts[4].2[0], PlanArg::Ref(clone_val));
    assert_eq!(inserts[5].2[0], PlanArg::Ref(ValueRef::New(*inserts[4].0)));

    // The plan the engine used to make: a plain (contiguous) clone of the
    // slice. Same structure, other values.
    let mut bad = p.clone();
    for e in &mut bad.edits {
        if let Edit::Insert {
            id, callee, args, ..
        } = e
        {
            match id.0 {
                0 => {
                    *callee = Callee::Aten("aten::clone.default");
                    *args = vec![PlanArg::Ref(ValueRef::Old(sl))];
                }
                1 | 2 => {
                    *callee = Callee::Aten("aten::alias.default");
                    args.truncate(1);
                }
                _ => {}
            }
        }
    }
    check_structure(&g, &bad).unwrap();
    let err = same_results(&g, &bad).unwrap_err();
    assert!(err.contains("differs"), "{err}");
}

/// The same buffer, written by one call through its own `as_strided` view
/// info: cloned with the layout kept, then the view regenerated on it.
#[test]
fn offset_buffer_with_as_strided_view_info_cloned_with_its_layout() {
    let layout = strided_meta(&[4, 6], &[8, 1], 2);
    let mut b = B::new();
    let (MmBuf { a, w, .. }, sl) = offset_slice_of_an_mm(&mut b, &layout);
    let af = rms_v2_as_strided(&mut b, sl, a, w, &[2, 3], &[8, 1], 11);
    let g1 = b.getitem(af, 1);
    b.g.nodes[g1.idx()].meta = Some(layout);
    let g = b.output(&[g1, sl]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned], "{}", dump(&g, &p));
    assert_eq!(
        inserted_atens(&p),
        [
            "aten::as_strided.default",
            "aten::clone.default",
            "aten::as_strided.default",
            "aten::as_strided.default",
        ]
    );
}

/// A write into an empty slice (`x[:, 3:3]`) changes no element: the old
/// value of the buffer read after the call needs no clone, in either form.
#[test]
fn write_into_an_empty_slice_needs_no_clone() {
    for v2 in [false, true] {
        let mut b = B::new();
        let EmptyWrite { x, w, mm, .. } = empty_write(&mut b);
        let af = if v2 {
            b.v2(
                &rms_op(),
                vec![
                    ("_out_base_index", Value::Int(0)),
                    ("_out_slice_dim", Value::Int(1)),
                    ("_out_slice_start", Value::Int(3)),
                    ("_out_slice_end", Value::Int(3)),
                    ("x", n(x)),
                    ("w", n(w)),
                    ("_all_bases", nodes(&[mm])),
                ],
            )
        } else {
            let sl = b.call_meta(
                &slice_op(),
                vec![n(mm), Value::Int(1), Value::Int(3), Value::Int(3)],
                Some(strided_meta(&[4, 0], &[8, 1], 3)),
            );
            b.v1(&rms_op(), vec![("out", n(sl)), ("x", n(x)), ("w", n(w))])
        };
        let g1 = b.getitem(af, 1);
        // `mm` (the old value) is read after the call, with the new one.
        let g = b.output(&[g1, mm]);
        let p = planned(&g);
        assert_eq!(
            actions(&p),
            [Action::Reinplaced],
            "v2={v2}: {}",
            dump(&g, &p)
        );
        assert_eq!(inserted_aten(&p, "aten::clone.default"), 0, "v2={v2}");
    }
}

/// The v2 form under `torch.compile(dynamic=True)` cuts an empty slice
/// `kv[:, k:k]` with SymInt bounds: the start a SymInt node, the end that
/// node plus 0 (or the very same node). Equal bounds make the view empty
/// whatever their value: no clone. Bounds that merely may be equal (two
/// SymInt nodes, or the start plus 1) still clone.
#[test]
fn write_into_a_slice_with_equal_symbolic_bounds_needs_no_clone() {
    let sym_size = sym_size_op();
    for (end_kind, empty) in [
        ("plus_zero", true),
        ("same", true),
        ("zero_plus", true),
        ("minus_zero", true),
        ("other", false),
        ("plus_one", false),
    ] {
        let mut b = B::new();
        let EmptyWrite { a, m, x, w, mm } = empty_write(&mut b);
        // start = 4 at run time (the size of dim 0).
        let start = b.call(&sym_size, vec![n(mm), Value::Int(0)]);
        let arith = |b: &mut B, name: &str, args: Vec<Value>| {
            let t = b.target(&format!("_operator.{name}"), TargetKind::Other, None);
            b.push(OpCode::CallFunction, name, t, args, vec![], None)
        };
        let end = match end_kind {
            "plus_zero" => arith(&mut b, "add", vec![n(start), Value::Int(0)]),
            "zero_plus" => arith(&mut b, "add", vec![Value::Int(0), n(start)]),
            "minus_zero" => arith(&mut b, "sub", vec![n(start), Value::Int(0)]),
            "same" => start,
            "other" => b.call(&sym_size, vec![n(mm), Value::Int(1)]),
            _ => arith(&mut b, "add", vec![n(start), Value::Int(1)]),
        };
        let af = b.v2(
            &rms_op(),
            vec![
                ("_out_base_index", Value::Int(0)),
                ("_out_slice_dim", Value::Int(1)),
                ("_out_slice_start", n(start)),
                ("_out_slice_end", n(end)),
                ("x", n(if empty { x } else { a })),
                ("w", n(if empty { w } else { m })),
                ("_all_bases", nodes(&[mm])),
            ],
        );
        let g1 = b.getitem(af, 1);
        // `mm` (the old value) is read after the call, with the new one.
        let g = b.output(&[g1, mm]);
        let p = planned(&g);
        let what = format!("{end_kind}: {}", dump(&g, &p));
        if empty {
            // The reference interpreter runs it: `planned` compared values.
            assert!(common::interp::run_original(&g).is_ok(), "{what}");
            assert_eq!(actions(&p), [Action::Reinplaced], "{what}");
            assert_eq!(inserted_aten(&p, "aten::clone.default"), 0, "{what}");
        } else {
            assert_eq!(actions(&p), [Action::Cloned], "{what}");
        }
    }
}

/// An empty view (static size 0) of a graph input the graph never writes
/// back, expanded (a view that may overlap itself): writing it changes no
/// element, so it is written in place like Inductor does, not cloned.
#[test]
fn write_into_an_empty_overlapping_view_of_an_input_is_in_place() {
    let expand = expand_op();
    let mut b = B::new();
    let x = b.input("x", Some(meta(&[4, 8])));
    let y = b.input("y", Some(meta(&[2, 4, 0])));
    let w = b.input("w", Some(meta(&[0])));
    let sl = b.call_meta(
        &slice_op(),
        vec![n(x), Value::Int(1), Value::Int(0), Value::Int(0)],
        Some(strided_meta(&[4, 0], &[8, 1], 0)),
    );
    let ex = b.call_meta(
        &expand,
        vec![n(sl), ints(&[2, 4, 0])],
        Some(strided_meta(&[2, 4, 0], &[0, 8, 1], 0)),
    );
    let af = b.v1(&rms_op(), vec![("out", n(ex)), ("x", n(y)), ("w", n(w))]);
    let g1 = b.getitem(af, 1);
    let g = b.output(&[g1, x]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced], "{}", dump(&g, &p));
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 0);
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(ex)));
}

/// v1 under `torch.compile(dynamic=True)`: the written slice of an mm has a
/// symbolic storage offset (its start times a symbolic stride), and the mm's
/// old value is read after the call. The clone copies the mm (offset 0) with
/// its run-time layout and cuts the slice from the copy again, which gives it
/// exactly the slice's size, stride and offset. It used to be left: "its
/// storage offset is symbolic".
#[test]
fn v1_clone_of_a_view_with_a_symbolic_offset_cuts_the_view_again() {
    let mut b = B::new();
    let (mm, [x, w]) = symbolic_mm(&mut b, 8);
    let sl = b.call_meta(
        &slice_op(),
        vec![n(mm), Value::Int(1), Value::Int(8), Value::Int(16)],
        Some(symbolic_meta(2, None)),
    );
    let af = b.v1(&rms_op(), vec![("out", n(sl)), ("x", n(x)), ("w", n(w))]);
    let g1 = b.getitem(af, 1);
    let sc = b.call(
        &slice_scatter_op(),
        vec![n(mm), n(g1), Value::Int(1), Value::Int(8), Value::Int(16)],
    );
    let g = b.output(&[sc, mm]);
    // The reference interpreter runs it: `planned` compares the values.
    assert!(common::interp::run_original(&g).is_ok());
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned], "{}", dump(&g, &p));
    let calls: Vec<(&Callee, &Vec<PlanArg>)> = p
        .edits
        .iter()
        .filter_map(|e| match e {
            Edit::Insert { callee, args, .. } => Some((callee, args)),
            _ => None,
        })
        .collect();
    let atens: Vec<&str> = inserted_atens(&p)
        .into_iter()
        .filter(|c| !c.starts_with("aten::sym_"))
        .collect();
    assert_eq!(
        atens,
        [
            "aten::as_strided.default",
            "aten::clone.default",
            "aten::as_strided.default",
            "aten::slice.Tensor",
        ]
    );
    // The copy is of the mm, the slice cut with the graph's own arguments.
    let flat = calls
        .iter()
        .find(|c| c.0 == &Callee::Aten("aten::as_strided.default"))
        .unwrap();
    assert_eq!(flat.1[0], PlanArg::Ref(ValueRef::Old(mm)));
    let cut = calls
        .iter()
        .find(|c| c.0 == &Callee::Aten("aten::slice.Tensor"))
        .unwrap();
    assert_eq!(
        &cut.1[1..],
        &[PlanArg::Int(1), PlanArg::Int(8), PlanArg::Int(16)]
    );
    assert_eq!(inserted_aten(&p, "aten::sym_size.int"), 2);
}

/// vLLM's case: only the token count is symbolic. The mm is `[s0, 24]` with
/// stride `[24, 1]`, and its old value is read after a v1 call writes all of
/// it: the clone reads `s0` at run time and nothing else (no `sym_stride`
/// at all: torch 2.11's Inductor cannot lower one of a static dimension),
/// and its required storage is `(s0 - 1) * 24 + 24`.
#[test]
fn a_clone_with_a_symbolic_token_count_reads_only_the_symbolic_dimension_at_run_time() {
    let mut b = B::new();
    let a = b.input("a", Some(meta(&[4, 8])));
    let m = b.input("m", Some(meta(&[8, 24])));
    let x = b.input("x", Some(meta(&[4, 24])));
    let w = b.input("w", Some(meta(&[24])));
    let tokens = mixed_meta(
        vec![Dim::Symbolic("s0".into()), Dim::Static(24)],
        vec![Dim::Static(24), Dim::Static(1)],
        Dim::Static(0),
    );
    let mm = b.call_meta(&mm_op(), vec![n(a), n(m)], Some(tokens));
    let af = b.v1(&rms_op(), vec![("out", n(mm)), ("x", n(x)), ("w", n(w))]);
    let g1 = b.getitem(af, 1);
    let g = b.output(&[g1, mm]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned], "{}", dump(&g, &p));
    assert_eq!(
        inserted_aten(&p, "aten::sym_size.int"),
        1,
        "{}",
        dump(&g, &p)
    );
    assert_eq!(
        inserted_aten(&p, "aten::sym_stride.int"),
        0,
        "{}",
        dump(&g, &p)
    );
    // The flat copy's view first, then the copy viewed back with the mm's
    // layout.
    let view = p
        .edits
        .iter()
        .filter_map(|e| match e {
            Edit::Insert {
                callee: Callee::Aten("aten::as_strided.default"),
                args,
                ..
            } => Some(args),
            _ => None,
        })
        .next_back()
        .expect("an as_strided");
    let PlanArg::List(size) = &view[1] else {
        unreachable!()
    };
    assert!(
        matches!(size[..], [PlanArg::Ref(ValueRef::New(_)), PlanArg::Int(24)]),
        "{size:?}"
    );
    assert_eq!(
        view[2],
        PlanArg::List(vec![PlanArg::Int(24), PlanArg::Int(1)])
    );
    assert_eq!(view[3], PlanArg::Int(0));
    // (s0 - 1) * 24, then + 24 (the offset plus one plus the static terms).
    assert_eq!(inserted_operators(&p), ["sub", "mul", "add"]);
}

/// A written getitem of `split_with_sizes` whose offset is symbolic: the
/// split itself holds a list, not a tensor, so the copy is made of the
/// split's source and both the split and the getitem are applied again to
/// it. (It used to copy the split node with its source's layout: an
/// `as_strided` of a list, found by the full-compile random campaign.)
#[test]
fn a_split_item_with_a_symbolic_offset_is_cut_again_from_a_copy_of_the_split_source() {
    let mut b = B::new();
    let (mm, [x, w]) = symbolic_mm(&mut b, 4);
    // `mm` is [4, 24]: the pieces add up to its width, as torch requires.
    let split = b.call_meta(
        &split_with_sizes_op(),
        vec![n(mm), ints(&[4, 4, 16]), Value::Int(1)],
        None,
    );
    let item = b.getitem(split, 1);
    b.g.nodes[item.idx()].meta = Some(symbolic_meta(2, None));
    let af = b.v1(&rms_op(), vec![("out", n(item)), ("x", n(x)), ("w", n(w))]);
    let g1 = b.getitem(af, 1);
    let g = b.output(&[g1, mm]);
    common::interp::run_original(&g).unwrap();
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned], "{}", dump(&g, &p));
    let flat = p
        .edits
        .iter()
        .find_map(|e| match e {
            Edit::Insert {
                callee: Callee::Aten("aten::as_strided.default"),
                args,
                ..
            } => Some(args.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(flat[0], PlanArg::Ref(ValueRef::Old(mm)), "{}", dump(&g, &p));
    let atens: Vec<&str> = inserted_atens(&p)
        .into_iter()
        .filter(|c| !c.starts_with("aten::sym_"))
        .collect();
    assert_eq!(
        atens,
        [
            "aten::as_strided.default",
            "aten::clone.default",
            "aten::as_strided.default",
            "aten::split_with_sizes.default",
        ]
    );
}

/// The same slice cut from a view whose own offset is symbolic, of a buffer
/// that is not a view: nothing to cut it from again, the node is left.
#[test]
fn symbolic_offset_without_a_static_view_source_is_left() {
    let mut b = B::new();
    let a = b.input("a", Some(symbolic_meta(2, None)));
    let x = b.input("x", Some(meta(&[4, 8])));
    let w = b.input("w", Some(meta(&[8])));
    let sl = b.call_meta(
        &slice_op(),
        vec![n(a), Value::Int(1), Value::Int(8), Value::Int(16)],
        Some(symbolic_meta(2, None)),
    );
    let af = b.v1(&rms_op(), vec![("out", n(sl)), ("x", n(x)), ("w", n(w))]);
    let g1 = b.getitem(af, 1);
    let g = b.output(&[g1, sl]);
    let p = plan(&g).unwrap();
    assert_eq!(actions(&p), [Action::Left]);
    let reason = p.report.decisions[0].reason.as_deref().unwrap();
    assert!(reason.contains("storage offset is symbolic"), "{reason}");
}

/// The v1 split-qkv rotary with a later reader of `v` (getitem 2 of the
/// split), taken before or after the call: `v` is disjoint from the q and k
/// regions the call writes, so its reader sees no change and q/k stay
/// re-inplaced, without a clone or a move, although the readers (a `mul`
/// that also reads the new value, and the output) cannot move. The same
/// later read of q's old value still forces a clone.
#[test]
fn later_read_of_the_untouched_v_of_a_split_qkv_keeps_q_and_k_reinplaced() {
    for (late, read) in [(false, 2), (true, 2), (false, 0)] {
        let mut b = B::new();
        let qkv = split_qkv(&mut b);
        qkv.with_column_layouts(&mut b);
        let Qkv {
            mm, split, q, k, ..
        } = qkv;
        let early = (!late && read == 2).then(|| b.getitem(split, 2));
        let RotScatters { g1, g2, s2, .. } = rot_v1_scattered(&mut b, &qkv, (4, 8));
        let v = match (early, read) {
            (Some(v), _) => v,
            (None, 2) => b.getitem(split, 2),
            (None, _) => q,
        };
        let r = b.call(&mul_op(), vec![n(v), n(s2)]);
        let g = b.output(&[s2, r, v]);
        let p = planned(&g);
        let d = &p.report.decisions[0];
        let what = format!("late={late} read={read}\n{}", dump(&g, &p));
        if read == 2 {
            assert_eq!(actions(&p), [Action::Reinplaced], "{what}");
            assert!(d.clones.is_empty() && d.moved.is_empty(), "{what}");
            assert!(moves(&p).is_empty(), "{what}");
            assert_eq!(d.scatters_removed, 2, "{what}");
            assert_eq!(inserted_aten(&p, "aten::clone.default"), 0);
            assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(q)));
            assert_eq!(replaced_with(&p, g2), Some(ValueRef::Old(k)));
            assert_eq!(replaced_with(&p, s2), Some(ValueRef::Old(mm)));
            let calls = inserted_calls(&p);
            assert_eq!(calls[0].1[0], PlanArg::Ref(ValueRef::Old(q)));
            assert_eq!(calls[0].1[1], PlanArg::Ref(ValueRef::Old(k)));
        } else {
            assert_eq!(actions(&p), [Action::Cloned], "{what}");
            // `mul` also reads the new value (s2): it cannot move.
            assert_eq!(d.clones[0].reader.as_deref(), Some("mul"), "{what}");
        }
    }
}

/// A slice of an mm, written whole by a call (v1 `out=` or v2 base), with
/// the mm returned, so the buffer must be cloned; no node has metadata. The
/// call's result is then read through `tail`: an `as_strided` of it (or, with
/// `through_slice`, of a slice of it), or a `mul` in its place.
fn strided_clone_without_meta(v2: bool, through_slice: bool, strided: bool) -> (Graph, NodeId) {
    let mut b = B::new();
    let a = b.input("a", Some(meta(&[4, 8])));
    let m = b.input("m", Some(meta(&[8, 8])));
    let w = b.input("w", Some(meta(&[8])));
    let mm = b.call(&mm_op(), vec![n(a), n(m)]);
    // Columns 2..8: strides [8, 1], offset 2.
    let sl = b.call(
        &slice_op(),
        vec![n(mm), Value::Int(1), Value::Int(2), Value::Int(8)],
    );
    let af = if v2 {
        rms_v2(&mut b, sl, a, w)
    } else {
        b.v1(&rms_op(), vec![("out", n(sl)), ("x", n(a)), ("w", n(w))])
    };
    let g1 = b.getitem(af, 1);
    let src = if through_slice {
        b.call(
            &slice_op(),
            vec![n(g1), Value::Int(0), Value::Int(1), Value::Int(4)],
        )
    } else {
        g1
    };
    // Rows 1-2, columns 3-5 of the slice, in its storage.
    let tail = if strided {
        b.call(
            &as_strided_op(),
            vec![n(src), ints(&[2, 3]), ints(&[8, 1]), Value::Int(11)],
        )
    } else {
        b.call(&mul_op(), vec![n(src), n(src)])
    };
    (b.output(&[tail, mm]), af)
}

/// Bug 4: without metadata, a buffer cloned from a strided, offset view (a
/// slice). A plain (contiguous) clone would not keep the slice's strides and
/// offset, so an `as_strided` of the result (or a kernel reading raw
/// strides) would read other elements. A clone must reproduce the exact
/// layout, which takes the buffer's metadata: without it the node is left
/// alone, whether or not the graph addresses memory by stride.
#[test]
fn buffer_without_metadata_is_left_rather_than_cloned_with_a_guessed_layout() {
    for (v2, through_slice, strided) in [
        (true, false, true),
        (false, false, true),
        (true, true, true),
        (false, true, true),
        (true, false, false),
        (false, true, false),
    ] {
        let what = format!("v2={v2} through_slice={through_slice} strided={strided}");
        let (g, af) = strided_clone_without_meta(v2, through_slice, strided);
        let p = planned(&g);
        assert_eq!(actions(&p), [Action::Left], "{what}\n{}", dump(&g, &p));
        let d = &p.report.decisions[0];
        let reason = d.reason.as_deref().unwrap();
        assert!(reason.contains("exact layout"), "{what}: {reason}");
        assert!(reason.contains("no tensor metadata"), "{what}: {reason}");
        assert!(d.clones.is_empty() && d.moved.is_empty(), "{what}");
        assert!(!erased(&p, af), "{what}");
        assert!(p.edits.is_empty(), "{what}: {:?}", p.edits);
    }
}

/// Bug 5: a `copy_` write-back whose source is the input's own original
/// memory: a view of it taken before the call (`v = x[:, 0:8]`; the call
/// writes x; `copy_(x, v)`), or x itself (`copy_(x, x)`). The write-back
/// reads x's old value, so the call must not write x: its buffer is
/// cloned, the reader named being the write-back itself (the new value is
/// read before it only). x then keeps its old value and the write-back,
/// a no-op, is removed.
#[test]
fn write_back_of_the_inputs_own_old_value_is_cloned() {
    for through_view in [true, false] {
        let mut b = B::new();
        let InputBuf { x, y, w } = input_buffer(&mut b);
        let v = if through_view {
            b.call_meta(
                &slice_op(),
                vec![n(x), Value::Int(1), Value::Int(0), Value::Int(8)],
                Some(meta(&[4, 8])),
            )
        } else {
            x
        };
        let (_, g1) = rms_v2_result(&mut b, x, y, w);
        // The new value is used before the write-back only.
        let r = b.call(&mul_op(), vec![n(g1), n(g1)]);
        let copy = b.call(&copy_op(), vec![n(x), n(v)]);
        let g = b.output(&[r]);
        let p = planned(&g);
        let what = format!("through_view={through_view}\n{}", dump(&g, &p));
        assert_eq!(actions(&p), [Action::Cloned], "{what}");
        let d = &p.report.decisions[0];
        assert!(d.moved.is_empty(), "{what}");
        let note = &d.clones[0];
        assert_eq!(note.arg, "_all_bases[0]", "{what}");
        assert_eq!(note.reader.as_deref(), Some("copy"), "{what}");
        assert_eq!(note.bytes, Some(4 * 8 * 4), "{what}");
        assert_eq!(inserted_atens(&p), EXACT_CLONE, "{what}");
        let calls = inserted_calls(&p);
        assert_eq!(calls.len(), 1, "{what}");
        assert_eq!(
            calls[0].1[0],
            PlanArg::Ref(ValueRef::New(NewId(2))),
            "{what}"
        );
        assert_eq!(replaced_with(&p, g1), Some(ValueRef::New(NewId(2))));
        assert!(
            note.reason.contains("reads the old value"),
            "{}",
            note.reason
        );
        // x keeps its old value, so the write-back is a no-op: removed.
        assert!(erased(&p, copy), "{what}");
        assert_eq!(p.report.writebacks_removed, 1, "{what}");

        // A plan whose call writes x itself (as the engine's used to, the
        // write-back then copying the overwritten x) is caught.
        let mut bad = p.clone();
        for e in &mut bad.edits {
            // The copy in the middle of the exact clone.
            if let Edit::Insert {
                id: NewId(1),
                callee,
                ..
            } = e
            {
                *callee = Callee::Aten("aten::alias.default");
            }
        }
        check_structure(&g, &bad).unwrap();
        let err = same_results(&g, &bad).unwrap_err();
        assert!(err.contains("differs"), "{what}: {err}");
    }
}

/// An in-place call already in the graph (what a first round emits) that
/// writes a graph input and another, unrelated buffer does not make the two
/// share memory: the input's `copy_` write-back from that other buffer is a
/// plain copy between distinct memory and needs no temporary. (It once
/// got a `clone` + `copy_` on every round: the second plan of an applied
/// plan was not empty.) When the other buffer is a view of the input, the
/// two do share memory and the copy still goes through a temporary.
#[test]
fn in_place_call_writing_an_input_and_a_buffer_keeps_them_apart() {
    for view_of_input in [false, true] {
        let mut b = B::new();
        let w = b.input("w", Some(meta(&[8])));
        let x = b.input("x", Some(meta(&[4, 8])));
        let buf = if view_of_input {
            b.call_meta(
                &as_strided_op(),
                vec![n(x), ints(&[4, 8]), ints(&[8, 1]), Value::Int(0)],
                Some(meta(&[4, 8])),
            )
        } else {
            b.empty(&[4, 8])
        };
        b.call(&rot_op(), vec![n(buf), n(x), n(w)]);
        let tmp = b.call_meta(&mul_op(), vec![n(buf), n(buf)], Some(meta(&[4, 8])));
        let src = if view_of_input {
            // x's elements in another order.
            b.call_meta(
                &as_strided_op(),
                vec![n(x), ints(&[4, 8]), ints(&[1, 4]), Value::Int(0)],
                Some(TensorMeta {
                    strides: Some(fxrewrite::ir::static_dims(&[1, 4])),
                    ..meta(&[4, 8])
                }),
            )
        } else {
            buf
        };
        b.call(&copy_op(), vec![n(x), n(src)]);
        let g = b.output(&[tmp]);
        let p = planned(&g);
        let what = format!("view_of_input={view_of_input}\n{}", dump(&g, &p));
        if view_of_input {
            assert_eq!(inserted_aten(&p, "aten::clone.default"), 1, "{what}");
        } else {
            assert!(p.edits.is_empty(), "{what}");
        }
    }
}
