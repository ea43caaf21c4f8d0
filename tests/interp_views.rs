//! The reference interpreter's views (`common::interp`) alias their base's
//! storage as torch's do: a write through a view is seen by the base, and
//! the strides of `view`, `expand` and `as_strided` are torch's. The value
//! checks of the engine tests are only as good as these kernels.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::builder::*;
use common::interp::run_original;
use common::ops::*;
use fxrewrite::ir::{NodeId, Value};

/// The first input's first `n` elements as the interpreter fills them
/// (element `j` is `3 j + 1`).
fn xs(n: i64) -> Vec<i64> {
    (0..n).map(|j| 3 * j + 1).collect()
}

/// The second input's (`100 + 3 j + 1`).
fn ys(n: i64) -> Vec<i64> {
    (0..n).map(|j| 100 + 3 * j + 1).collect()
}

/// What a `write_through` graph leaves: `x`'s contents, and the view's size
/// and values.
type Written = (Vec<i64>, (Vec<i64>, Vec<i64>));

/// `copy_(view, y)` where `view` is `make(x)`: the graph's inputs after it,
/// and its one output (the view).
fn write_through(
    x_shape: &[i64],
    y_shape: &[i64],
    make: impl Fn(&mut B, NodeId) -> NodeId,
) -> Result<Written, String> {
    let mut b = B::new();
    let x = b.input("x", Some(meta(x_shape)));
    let y = b.input("y", Some(meta(y_shape)));
    let v = make(&mut b, x);
    let c = b.call(&copy_op(), vec![n(v), n(y)]);
    let g = b.output(&[c]);
    let out = run_original(&g)?;
    Ok((out.inputs[0].clone(), out.outputs[0].clone()))
}

#[test]
fn a_write_through_a_view_of_new_dims_is_seen_by_the_base() {
    let (x, (size, vals)) = write_through(&[4, 8], &[2, 16], |b, x| {
        b.call(&view_op(), vec![n(x), ints(&[2, -1])])
    })
    .unwrap();
    assert_eq!(size, [2, 16]);
    assert_eq!(vals, ys(32));
    assert_eq!(x, ys(32));
}

/// A column slice `[4, 4]` of `[4, 8]` (strides `[8, 1]`, offset 4) viewed
/// as `[4, 2, 2]`: torch's strides `[8, 2, 1]`, so the write lands in the
/// right half of every row and nowhere else.
#[test]
fn a_view_of_a_column_slice_keeps_the_row_stride() {
    let (x, _) = write_through(&[4, 8], &[4, 2, 2], |b, x| {
        let sl = b.call(
            &slice_op(),
            vec![n(x), Value::Int(1), Value::Int(4), Value::Int(8)],
        );
        b.call(&view_op(), vec![n(sl), ints(&[4, 2, 2])])
    })
    .unwrap();
    let (old, new) = (xs(32), ys(16));
    let want: Vec<i64> = (0..32)
        .map(|j| {
            if j % 8 >= 4 {
                new[(j / 8) * 4 + j % 8 - 4]
            } else {
                old[j]
            }
        })
        .collect();
    assert_eq!(x, want);
}

/// Torch refuses to `view` the column slice flat (no one stride walks it);
/// `reshape` copies instead, so its write does not reach the base.
#[test]
fn a_flat_view_of_a_column_slice_is_refused_and_reshape_copies() {
    let slice = |b: &mut B, x: NodeId| {
        b.call(
            &slice_op(),
            vec![n(x), Value::Int(1), Value::Int(4), Value::Int(8)],
        )
    };
    let err = write_through(&[4, 8], &[16], |b, x| {
        let sl = slice(b, x);
        b.call(&view_op(), vec![n(sl), ints(&[16])])
    })
    .unwrap_err();
    assert!(err.contains("view of size [4, 4]"), "{err}");
    let (x, (_, vals)) = write_through(&[4, 8], &[16], |b, x| {
        let sl = slice(b, x);
        b.call(&reshape_op(), vec![n(sl), ints(&[16])])
    })
    .unwrap();
    assert_eq!(vals, ys(16));
    assert_eq!(x, xs(32));
}

/// `expand` of a row `[1, 8]` to `[3, 8]`: every row of the view is the one
/// row of storage (stride 0), so the last row written is what the base
/// keeps, and the view reads it three times.
#[test]
fn expand_broadcasts_one_storage_row() {
    let (x, (size, vals)) = write_through(&[1, 8], &[3, 8], |b, x| {
        b.call_kw(&expand_op(), vec![n(x), ints(&[3, -1])], vec![])
    })
    .unwrap();
    assert_eq!(size, [3, 8]);
    let last_row = ys(24)[16..].to_vec();
    assert_eq!(x, last_row);
    assert_eq!(vals, last_row.repeat(3));
}

/// `as_strided` addresses the storage, not its source view: a view of a
/// slice at offset 8 with storage offset 2 starts at element 2.
#[test]
fn as_strided_offsets_are_storage_absolute() {
    let mut b = B::new();
    let x = b.input("x", Some(meta(&[4, 8])));
    let sl = b.call(
        &slice_op(),
        vec![n(x), Value::Int(0), Value::Int(1), Value::Int(4)],
    );
    let st = b.call(
        &as_strided_op(),
        vec![n(sl), ints(&[2, 2]), ints(&[8, 1]), Value::Int(2)],
    );
    let g = b.output(&[st]);
    let out = run_original(&g).unwrap();
    let x = xs(32);
    assert_eq!(out.outputs[0].1, [x[2], x[3], x[10], x[11]]);
}

/// A slice with a step walks every `step`-th element, and `permute` swaps
/// strides: both still views of `x`.
#[test]
fn stepped_slices_and_permutes_are_views() {
    let (x, _) = write_through(&[4, 8], &[4, 4], |b, x| {
        let sl = b.call(
            &slice_op(),
            vec![
                n(x),
                Value::Int(1),
                Value::Int(0),
                Value::Int(8),
                Value::Int(2),
            ],
        );
        b.call(&permute_op(), vec![n(sl), ints(&[1, 0])])
    })
    .unwrap();
    let (old, new) = (xs(32), ys(16));
    // The permuted view's element (i, r) is x[r, 2 i].
    let want: Vec<i64> = (0..32)
        .map(|j| {
            let (r, c) = (j / 8, j % 8);
            if c % 2 == 0 {
                new[(c / 2) * 4 + r]
            } else {
                old[j]
            }
        })
        .collect();
    assert_eq!(x, want);
}

/// An operator the interpreter has no kernel for is an error naming it, so
/// `same_results` cannot pass a graph it did not run.
#[test]
fn an_operator_without_a_kernel_is_named() {
    let mut b = B::new();
    let x = b.input("x", Some(meta(&[4, 8])));
    let s = b.call(&softmax_op(), vec![n(x), Value::Int(1), Value::Bool(false)]);
    let g = b.output(&[s]);
    let err = run_original(&g).unwrap_err();
    assert!(err.contains("aten::_softmax.default"), "{err}");
}
