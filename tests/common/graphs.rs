//! The graph shapes the engine tests start from again and again: the inputs
//! and buffer a test writes into, and the v1 split-qkv rotary. A test builds
//! one with these and adds what it is about, so that its own lines say what
//! differs; the nodes come in the order (hence with the ids and FX names)
//! the tests always gave them.

use fxrewrite::ir::{NodeId, Value};

use super::builder::{ints, meta, n, nodes, rms_v2, strided_meta, B};
use super::ops::{foreach_op, mm_op, rms_op, rot_op, slice_scatter_op, split_with_sizes_op};

/// A written buffer that is an intermediate: inputs `a` `[4, 8]`, `m`
/// `[8, 8]`, `w` `[8]`, and `buf = mm(a, m)` `[4, 8]`, so that its old value
/// can be read after a call writes it (the call reads `a` and `w`).
pub struct MmBuf {
    pub a: NodeId,
    pub m: NodeId,
    pub w: NodeId,
    pub buf: NodeId,
}

pub fn mm_buffer(b: &mut B) -> MmBuf {
    let a = b.input("a", Some(meta(&[4, 8])));
    let m = b.input("m", Some(meta(&[8, 8])));
    let w = b.input("w", Some(meta(&[8])));
    let buf = b.call_meta(&mm_op(), vec![n(a), n(m)], Some(meta(&[4, 8])));
    MmBuf { a, m, w, buf }
}

/// A fresh buffer nothing else reads: inputs `x` `[4, 8]`, `w` `[8]`, and
/// `buf = empty([4, 8])`, the simplest memory a call may write in place.
pub struct EmptyBuf {
    pub x: NodeId,
    pub w: NodeId,
    pub buf: NodeId,
}

pub fn empty_buffer(b: &mut B) -> EmptyBuf {
    let x = b.input("x", Some(meta(&[4, 8])));
    let w = b.input("w", Some(meta(&[8])));
    let buf = b.empty(&[4, 8]);
    EmptyBuf { x, w, buf }
}

/// A written graph input: inputs `x` `[4, 8]` (the one written), `y`
/// `[4, 8]` and `w` `[8]` (what the call reads), for the tests of inputs
/// and their `copy_` write-backs.
pub struct InputBuf {
    pub x: NodeId,
    pub y: NodeId,
    pub w: NodeId,
}

pub fn input_buffer(b: &mut B) -> InputBuf {
    let x = b.input("x", Some(meta(&[4, 8])));
    let y = b.input("y", Some(meta(&[4, 8])));
    let w = b.input("w", Some(meta(&[8])));
    InputBuf { x, y, w }
}

/// `rms_v2(base, x, w)` and its result (getitem 1): a v2 call writing `base`
/// whole, as `(af, new value)`.
pub fn rms_v2_result(b: &mut B, base: NodeId, x: NodeId, w: NodeId) -> (NodeId, NodeId) {
    let af = rms_v2(b, base, x, w);
    (af, b.getitem(af, 1))
}

/// `rms` as a v2 call writing `base` through `as_strided` view info (size,
/// stride, storage offset of the written view), reading `x` and `w`.
pub fn rms_v2_as_strided(
    b: &mut B,
    base: NodeId,
    x: NodeId,
    w: NodeId,
    size: &[i64],
    stride: &[i64],
    offset: i64,
) -> NodeId {
    b.v2(
        &rms_op(),
        vec![
            ("_out_base_index", Value::Int(0)),
            ("_out_size", ints(size)),
            ("_out_stride", ints(stride)),
            ("_out_storage_offset", Value::Int(offset)),
            ("x", n(x)),
            ("w", n(w)),
            ("_all_bases", nodes(&[base])),
        ],
    )
}

/// `foreach` as a v2 call writing two row slices of one `base`, `[0, mid)`
/// and `[mid, end)` of dim 0: a written list whose views the engine must
/// regenerate from the node's own kwargs.
pub fn foreach_v2_two_row_slices(b: &mut B, base: NodeId, w: NodeId, mid: i64, end: i64) -> NodeId {
    b.v2(
        &foreach_op(),
        vec![
            ("_xs_length", Value::Int(2)),
            ("_xs_0_base_index", Value::Int(0)),
            ("_xs_0_slice_dim", Value::Int(0)),
            ("_xs_0_slice_start", Value::Int(0)),
            ("_xs_0_slice_end", Value::Int(mid)),
            ("_xs_1_base_index", Value::Int(0)),
            ("_xs_1_slice_dim", Value::Int(0)),
            ("_xs_1_slice_start", Value::Int(mid)),
            ("_xs_1_slice_end", Value::Int(end)),
            ("w", n(w)),
            ("_all_bases", nodes(&[base])),
        ],
    )
}

/// vLLM's attention prologue, static shapes: inputs `a` `[3, 8]`, `wqkv`
/// `[8, 16]`, `cos` `[3, 4]`; `mm = a @ wqkv` `[3, 16]` split along the last
/// dim into `q` (columns 0..4), `k` (4..8) and `v` (8..16, not taken here).
pub struct Qkv {
    pub a: NodeId,
    pub wq: NodeId,
    pub cos: NodeId,
    pub mm: NodeId,
    pub split: NodeId,
    pub q: NodeId,
    pub k: NodeId,
}

pub fn split_qkv(b: &mut B) -> Qkv {
    let a = b.input("a", Some(meta(&[3, 8])));
    let wq = b.input("wqkv", Some(meta(&[8, 16])));
    let cos = b.input("cos", Some(meta(&[3, 4])));
    let mm = b.call_meta(&mm_op(), vec![n(a), n(wq)], Some(meta(&[3, 16])));
    let split = b.call(
        &split_with_sizes_op(),
        vec![n(mm), ints(&[4, 4, 8]), Value::Int(-1)],
    );
    let q = b.getitem(split, 0);
    let k = b.getitem(split, 1);
    Qkv {
        a,
        wq,
        cos,
        mm,
        split,
        q,
        k,
    }
}

impl Qkv {
    /// Gives `q` and `k` the layouts they have in `mm` (columns of a row of
    /// 16), for the tests that need the engine to see where they lie.
    pub fn with_column_layouts(&self, b: &mut B) {
        b.g.nodes[self.q.idx()].meta = Some(strided_meta(&[3, 4], &[16, 1], 0));
        b.g.nodes[self.k.idx()].meta = Some(strided_meta(&[3, 4], &[16, 1], 4));
    }
}

/// The v1 rotary on `q` and `k` and the two `slice_scatter`s that write
/// their new values back into `mm`: `q`'s to columns 0..4, `k`'s to
/// `k_columns` (4..8 makes both pure write-backs).
pub struct RotScatters {
    pub af: NodeId,
    pub g1: NodeId,
    pub g2: NodeId,
    pub s1: NodeId,
    pub s2: NodeId,
}

pub fn rot_v1_scattered(b: &mut B, qkv: &Qkv, k_columns: (i64, i64)) -> RotScatters {
    let af = b.v1(
        &rot_op(),
        vec![("q", n(qkv.q)), ("k", n(qkv.k)), ("cos", n(qkv.cos))],
    );
    let g1 = b.getitem(af, 1);
    let g2 = b.getitem(af, 2);
    let s1 = b.call_meta(
        &slice_scatter_op(),
        vec![
            n(qkv.mm),
            n(g1),
            Value::Int(1),
            Value::Int(0),
            Value::Int(4),
        ],
        Some(meta(&[3, 16])),
    );
    let s2 = b.call_meta(
        &slice_scatter_op(),
        vec![
            n(s1),
            n(g2),
            Value::Int(1),
            Value::Int(k_columns.0),
            Value::Int(k_columns.1),
        ],
        Some(meta(&[3, 16])),
    );
    RotScatters { af, g1, g2, s1, s2 }
}
