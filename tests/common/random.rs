//! The one random graph generator of the tests: a proptest strategy of
//! [`Step`]s, each adding a piece of a post-grad graph (inputs, views,
//! v1 / v2 calls of mutating operators, scatters, write-backs, readers of
//! old values), with real layouts and, on request, tensor metadata.

use std::collections::{HashMap, HashSet};

use super::builder::*;
use super::graphs::foreach_v2_two_row_slices;
use super::ops::*;
use fxrewrite::ir::{Graph, NodeId, TargetKind, TensorMeta, Value};
use proptest::prelude::*;

/// One piece of a random graph; indices pick earlier tensors modulo their
/// number.
#[derive(Clone, Debug)]
pub enum Step {
    Input,
    Empty,
    Binary(u8, u8, u8),
    Slice(u8, u8, u8),
    Select(u8, u8),
    Split(u8),
    V2Rms {
        base: u8,
        x: u8,
        view: u8,
    },
    V1Rms {
        out: u8,
        x: u8,
        scatter: bool,
    },
    V1Rot {
        q: u8,
        k: u8,
        scatter: bool,
    },
    AddRms {
        v2: bool,
        x: u8,
        res: u8,
    },
    ForeachV1(u8, u8),
    Out(u8),
    CopyBack(u8, u8),
    Unknown(u8),
    Read(u8),
    /// A pure reader of a tensor the latest call wrote (its old value):
    /// the move-a-reader path.
    ReadOld(u8),
    AsStrided(u8, u8),
    V2Foreach(u8, u8, bool),
    V2Opt(u8),
}

/// One random case of the property tests: the steps of a graph, the
/// outputs' seed, whether nodes carry metadata, the alias records' seed.
pub fn case() -> impl Strategy<Value = (Vec<Step>, u64, bool, u64)> {
    (
        prop::collection::vec(step(), 0..14),
        any::<u64>(),
        any::<bool>(),
        any::<u64>(),
    )
}

pub fn step() -> impl Strategy<Value = Step> {
    let i = any::<u8>;
    prop_oneof![
        1 => Just(Step::Input),
        1 => Just(Step::Empty),
        2 => (i(), i(), i()).prop_map(|(a, b, c)| Step::Binary(a, b, c)),
        2 => (i(), i(), i()).prop_map(|(a, b, c)| Step::Slice(a, b, c)),
        1 => (i(), i()).prop_map(|(a, b)| Step::Select(a, b)),
        1 => i().prop_map(Step::Split),
        3 => (i(), i(), i()).prop_map(|(base, x, view)| Step::V2Rms { base, x, view }),
        3 => (i(), i(), any::<bool>()).prop_map(|(out, x, scatter)| Step::V1Rms {
            out,
            x,
            scatter
        }),
        2 => (i(), i(), any::<bool>()).prop_map(|(q, k, scatter)| Step::V1Rot { q, k, scatter }),
        1 => (any::<bool>(), i(), i()).prop_map(|(v2, x, res)| Step::AddRms { v2, x, res }),
        1 => (i(), i()).prop_map(|(a, b)| Step::ForeachV1(a, b)),
        1 => i().prop_map(Step::Out),
        2 => (i(), i()).prop_map(|(a, b)| Step::CopyBack(a, b)),
        1 => i().prop_map(Step::Unknown),
        2 => i().prop_map(Step::Read),
        6 => i().prop_map(Step::ReadOld),
        1 => (i(), i()).prop_map(|(a, b)| Step::AsStrided(a, b)),
        1 => (i(), i(), any::<bool>()).prop_map(|(a, b, c)| Step::V2Foreach(a, b, c)),
        1 => i().prop_map(Step::V2Opt),
    ]
}

/// Size, stride and storage offset.
type Layout = (Vec<i64>, Vec<i64>, i64);

/// How a tensor was cut from another, for the matching scatter.
#[derive(Clone, Copy, Debug)]
enum Cut {
    Slice {
        dim: i64,
        start: i64,
        end: i64,
    },
    Select {
        index: i64,
    },
    /// `as_strided` inside the source's layout: never scattered.
    Strided,
}

/// A tensor of the graph being built, with its real layout.
#[derive(Clone, Debug)]
struct T {
    id: NodeId,
    size: Vec<i64>,
    stride: Vec<i64>,
    offset: i64,
    cut: Option<(NodeId, Cut)>,
    /// The graph input whose memory (or a version of it) this is.
    root: Option<NodeId>,
    /// How this tensor's layout came from a call's result (itself or a
    /// view of it): 0 not at all, 1 a result of a call that wrote a
    /// strided or offset tensor, 2 a result of a call that wrote such a
    /// result (or a view of one). See `strided_info_ok`.
    restamp: u8,
}

fn contiguous(size: &[i64]) -> Vec<i64> {
    meta(size).stride().unwrap()
}

pub struct Gen {
    b: B,
    ts: Vec<T>,
    inputs: Vec<NodeId>,
    with_meta: bool,
    /// The latest whole new value of each graph input.
    latest: HashMap<NodeId, NodeId>,
    /// Inputs to write back at the end, with the value to write when it
    /// is not the input's latest.
    writebacks: Vec<(NodeId, Option<NodeId>)>,
    /// The weights input every call reads (never written).
    w: NodeId,
}

impl Gen {
    fn pick(&self, i: u8) -> T {
        self.ts[usize::from(i) % self.ts.len()].clone()
    }

    fn meta_of(&self, size: &[i64], stride: &[i64], offset: i64) -> Option<TensorMeta> {
        self.with_meta
            .then(|| TensorMeta::static_strided("float32", 4, size, stride, offset))
    }

    fn set_meta(&mut self, id: NodeId, size: &[i64], stride: &[i64], offset: i64) {
        self.b.g.nodes[id.idx()].meta = self.meta_of(size, stride, offset);
    }

    /// A fresh contiguous tensor `id` of `size`.
    fn fresh(&mut self, id: NodeId, size: &[i64]) {
        let stride = contiguous(size);
        self.set_meta(id, size, &stride, 0);
        self.ts.push(T {
            id,
            size: size.to_vec(),
            stride,
            offset: 0,
            cut: None,
            root: None,
            restamp: 0,
        });
    }

    /// Whether `as_strided` view info (v2) on `t` is generated. Without
    /// metadata, not on a tensor whose layout came from a call's result
    /// on a strided or offset tensor: a call left alone with such view
    /// info addresses its base by stride, and the engine does not count
    /// that as needing a layout-preserving clone of the earlier call's
    /// buffer (see the file notes).
    fn strided_info_ok(&self, t: &T) -> bool {
        self.with_meta || t.restamp == 0
    }

    /// Whether an `as_strided` node on `t` is generated. Without
    /// metadata, not two calls away from a strided or offset buffer: the
    /// engine's check for a layout-preserving clone does not follow the
    /// result through a later call that writes it (see the file notes).
    fn strided_node_ok(&self, t: &T) -> bool {
        self.with_meta || t.restamp < 2
    }

    fn plain_fresh(&self, id: NodeId) -> bool {
        matches!(
            self.b.g.target_of(id).name.as_str(),
            "aten::empty.memory_format"
                | "aten::mm.default"
                | "aten::add.Tensor"
                | "aten::mul.Tensor"
        )
    }

    fn t_of(&self, id: NodeId) -> T {
        self.ts.iter().rev().find(|t| t.id == id).unwrap().clone()
    }

    /// Marks the last tensor as a new value of `of`: of the same graph
    /// input, and that input's latest value when `of` was.
    fn version(&mut self, of: &T) {
        let id = self.ts.last().unwrap().id;
        self.ts.last_mut().unwrap().root = of.root;
        if let Some(r) = of.root {
            if of.cut.is_none() && self.latest.get(&r) == Some(&of.id) {
                self.latest.insert(r, id);
            }
        }
    }

    /// A tensor `id` with the layout of `like` (a v2 base clone).
    fn like(&mut self, id: NodeId, like: &T) {
        self.set_meta(id, &like.size, &like.stride, like.offset);
        let dense = like.offset == 0 && like.stride == contiguous(&like.size);
        let restamp = match like.restamp {
            0 if dense => 0,
            0 => 1,
            _ => 2,
        };
        self.ts.push(T {
            id,
            cut: None,
            restamp,
            ..like.clone()
        });
        self.version(like);
    }

    fn view(&mut self, id: NodeId, src: &T, cut: Cut) {
        let (mut size, mut stride, mut offset) = (src.size.clone(), src.stride.clone(), src.offset);
        match cut {
            Cut::Slice { dim, start, end } => {
                let d =
                    usize::try_from(dim.rem_euclid(i64::try_from(size.len()).unwrap())).unwrap();
                offset += start * stride[d];
                size[d] = end - start;
            }
            Cut::Select { index } => {
                offset += index * stride[0];
                size.remove(0);
                stride.remove(0);
            }
            Cut::Strided => unreachable!("as_strided views are made by `strided_view`"),
        }
        self.push_view(id, src, cut, (size, stride, offset));
    }

    /// A view `id` of `src` with the given layout.
    fn push_view(&mut self, id: NodeId, src: &T, cut: Cut, layout: Layout) {
        let (size, stride, offset) = layout;
        self.set_meta(id, &size, &stride, offset);
        self.ts.push(T {
            id,
            size,
            stride,
            offset,
            cut: Some((src.id, cut)),
            root: src.root,
            restamp: src.restamp,
        });
    }

    /// An `as_strided` layout of at most 2 x 3 elements inside `src`'s
    /// own (same strides, a shifted offset), as a view of `src` addresses
    /// memory; `None` for a 0-d `src`.
    fn strided_sub(src: &T, o: u8) -> Option<Layout> {
        if src.size.is_empty() || src.size.len() > 2 {
            return None;
        }
        let want = [2, 3];
        let skip = usize::from(src.size.len() == 1);
        let mut offset = src.offset;
        let mut size = Vec::new();
        let mut shift = i64::from(o);
        for (d, (&s, &st)) in src.size.iter().zip(&src.stride).enumerate() {
            let k = want[d + skip].min(s);
            offset += (shift % (s - k + 1)) * st;
            shift /= 3;
            size.push(k);
        }
        Some((size, src.stride.clone(), offset))
    }

    fn scatter_back(&mut self, base: NodeId, cut: Cut, new: NodeId) -> NodeId {
        match cut {
            Cut::Slice { dim, start, end } => self.b.call(
                &slice_scatter_op(),
                vec![
                    n(base),
                    n(new),
                    Value::Int(dim),
                    Value::Int(start),
                    Value::Int(end),
                ],
            ),
            Cut::Select { index } => self.b.call(
                &select_scatter_op(),
                vec![n(base), n(new), Value::Int(0), Value::Int(index)],
            ),
            Cut::Strided => unreachable!("as_strided views are not scattered"),
        }
    }

    /// The new value of a v1-written `t`: scattered back into its base
    /// when it was cut from one and `scatter` is set.
    fn written_result(&mut self, t: &T, new: NodeId, scatter: bool) {
        match (t.cut, scatter) {
            (Some((base, cut)), true) if !matches!(cut, Cut::Strided) => {
                let s = self.scatter_back(base, cut, new);
                let bt = self.t_of(base);
                self.fresh(s, &bt.size);
                self.version(&bt);
            }
            // torch's v1 clones with `clone_preserve_strides`: the new
            // value has the written tensor's layout.
            _ => self.like(new, t),
        }
    }

    fn apply(&mut self, s: &Step) {
        match *s {
            Step::Input => {
                let name = format!("in{}", self.inputs.len());
                let x = self.b.input(&name, None);
                self.inputs.push(x);
                self.fresh(x, &[4, 8]);
                self.ts.last_mut().unwrap().root = Some(x);
                self.latest.insert(x, x);
            }
            Step::Empty => {
                let e = self.b.empty(&[4, 8]);
                self.fresh(e, &[4, 8]);
            }
            Step::Binary(k, a, c) => {
                let (a, c) = (self.pick(a), self.pick(c).id);
                let op = match k % 3 {
                    0 => mm_op(),
                    1 => add_op(),
                    _ => mul_op(),
                };
                let r = self.b.call(&op, vec![n(a.id), n(c)]);
                self.fresh(r, &a.size);
            }
            Step::Slice(a, st, len) => {
                let src = self.pick(a);
                if src.size.is_empty() {
                    return;
                }
                let rank = src.size.len();
                let d = usize::from(st) % rank;
                let size = src.size[d];
                let start = i64::from(st / 2) % size;
                let end = (start + 1 + i64::from(len) % size).min(size);
                // Without metadata, say the last dim as -1 now and then.
                let dim = if !self.with_meta && d + 1 == rank && len % 2 == 0 {
                    -1
                } else {
                    i64::try_from(d).unwrap()
                };
                let v = self.b.call(
                    &slice_op(),
                    vec![
                        n(src.id),
                        Value::Int(dim),
                        Value::Int(start),
                        Value::Int(end),
                    ],
                );
                self.view(v, &src, Cut::Slice { dim, start, end });
            }
            Step::Select(a, idx) => {
                let src = self.pick(a);
                if src.size.len() < 2 {
                    return;
                }
                let index = i64::from(idx) % src.size[0];
                let v = self.b.call(
                    &select_op(),
                    vec![n(src.id), Value::Int(0), Value::Int(index)],
                );
                self.view(v, &src, Cut::Select { index });
            }
            Step::Split(a) => {
                let src = self.pick(a);
                // Also of an old value after a call wrote it.
                if src.size.last() != Some(&8) {
                    return;
                }
                let sp = self.b.call(
                    &split_with_sizes_op(),
                    vec![n(src.id), ints(&[2, 2, 4]), Value::Int(-1)],
                );
                let last = i64::try_from(src.size.len()).unwrap() - 1;
                for (i, (start, end)) in [(0, 2), (2, 4), (4, 8)].into_iter().enumerate() {
                    let gi = self.b.getitem(sp, i64::try_from(i).unwrap());
                    let dim = if self.with_meta { last } else { -1 };
                    self.view(gi, &src, Cut::Slice { dim, start, end });
                }
            }
            Step::V2Rms { base, x, view } => {
                let (base, x) = (self.pick(base), self.pick(x).id);
                let w = self.w;
                let mut kwargs = vec![
                    ("_out_base_index", Value::Int(0)),
                    ("x", n(x)),
                    ("w", n(w)),
                    ("_all_bases", nodes(&[base.id])),
                ];
                match view % 5 {
                    1 => kwargs.push(("_out_alias", Value::Bool(true))),
                    2 if !base.size.is_empty() => kwargs.extend([
                        ("_out_slice_dim", Value::Int(0)),
                        ("_out_slice_start", Value::Int(i64::from(view % 3))),
                        ("_out_slice_end", Value::Int(3)),
                    ]),
                    // as_strided view info inside the base's layout, of
                    // any base (strided, offset, an earlier call's result).
                    3 if self.strided_info_ok(&base) => {
                        if let Some((size, stride, offset)) = Self::strided_sub(&base, view / 5) {
                            kwargs.extend([
                                ("_out_size", ints(&size)),
                                ("_out_stride", ints(&stride)),
                                ("_out_storage_offset", Value::Int(offset)),
                            ]);
                        }
                    }
                    // Overlapping rows of a dense [4, 8] base.
                    4 if self.plain_fresh(base.id) && base.size == [4, 8] => kwargs.extend([
                        ("_out_size", ints(&[2, 3])),
                        ("_out_stride", ints(&[4, 1])),
                        ("_out_storage_offset", Value::Int(1)),
                    ]),
                    _ => {}
                }
                let af = self.b.v2(&rms_op(), kwargs);
                let g = self.b.getitem(af, 1);
                self.like(g, &base);
            }
            Step::V1Rms { out, x, scatter } => {
                let (t, x) = (self.pick(out), self.pick(x).id);
                let w = self.w;
                let af = self
                    .b
                    .v1(&rms_op(), vec![("out", n(t.id)), ("x", n(x)), ("w", n(w))]);
                let g = self.b.getitem(af, 1);
                self.written_result(&t, g, scatter);
            }
            Step::V1Rot { q, k, scatter } => {
                let (q, k) = (self.pick(q), self.pick(k));
                let cos = self.w;
                let af = self.b.v1(
                    &rot_op(),
                    vec![("q", n(q.id)), ("k", n(k.id)), ("cos", n(cos))],
                );
                let g1 = self.b.getitem(af, 1);
                let g2 = self.b.getitem(af, 2);
                // Scatter q back, then k into that when they share a base.
                match (q.cut, k.cut, scatter) {
                    (Some((bq, cq)), Some((bk, ck)), true)
                        if bq == bk
                            && !matches!(cq, Cut::Strided)
                            && !matches!(ck, Cut::Strided) =>
                    {
                        let s1 = self.scatter_back(bq, cq, g1);
                        let bt = self.t_of(bq);
                        self.fresh(s1, &bt.size);
                        let s2 = self.scatter_back(s1, ck, g2);
                        self.ts.pop();
                        self.fresh(s2, &bt.size);
                        self.version(&bt);
                    }
                    _ => {
                        self.written_result(&q, g1, scatter);
                        self.written_result(&k, g2, scatter);
                    }
                }
            }
            Step::AddRms { v2, x, res } => {
                let (x, res) = (self.pick(x), self.pick(res));
                let w = self.w;
                let af = if v2 {
                    self.b.v2(
                        &add_rms_op(),
                        vec![
                            ("_x_base_index", Value::Int(0)),
                            ("_res_base_index", Value::Int(1)),
                            ("w", n(w)),
                            ("_all_bases", nodes(&[x.id, res.id])),
                        ],
                    )
                } else {
                    self.b.v1(
                        &add_rms_op(),
                        vec![("x", n(x.id)), ("res", n(res.id)), ("w", n(w))],
                    )
                };
                let r = self.b.getitem(af, 0);
                self.fresh(r, &x.size);
                let g1 = self.b.getitem(af, 1);
                let g2 = self.b.getitem(af, 2);
                // Both forms clone with `clone_preserve_strides`.
                self.like(g1, &x);
                self.like(g2, &res);
            }
            Step::ForeachV1(a, c) => {
                let (a, c) = (self.pick(a), self.pick(c));
                let w = self.w;
                let af = self.b.v1(
                    &foreach_op(),
                    vec![("xs", nodes(&[a.id, c.id])), ("w", n(w))],
                );
                let list = self.b.getitem(af, 1);
                for (i, t) in [a, c].iter().enumerate() {
                    let g = self.b.getitem(list, i64::try_from(i).unwrap());
                    self.like(g, t);
                }
            }
            Step::Out(a) => {
                let x = self.pick(a).id;
                let af = self.b.v2(
                    &mk_op(),
                    vec![
                        ("x", n(x)),
                        ("_out_size", ints(&[4, 8])),
                        ("_out_stride", ints(&[8, 1])),
                        ("_out_dtype", Value::Dtype("float32".into())),
                        ("_out_device", Value::Device("cpu".into())),
                        ("_all_bases", Value::List(vec![])),
                    ],
                );
                self.fresh(af, &[4, 8]);
            }
            Step::CopyBack(a, src) => {
                // Torch's epilogue: written back at the end, with the
                // input's latest value, or now and then with another
                // tensor of its shape (`x.copy_(y)` in the program).
                let dst = self.inputs[usize::from(a) % self.inputs.len()];
                // Any tensor of its shape, views of the input's own
                // original memory (`copy_(x, x)`) included.
                let value = (src % 3 == 0)
                    .then(|| self.pick(src / 3))
                    .filter(|t| t.size == [4, 8])
                    .map(|t| t.id);
                if !self.writebacks.iter().any(|(x, _)| *x == dst) {
                    self.writebacks.push((dst, value));
                }
            }
            Step::Unknown(a) => {
                let base = self.pick(a);
                let w = self.w;
                let af = self.b.v2(
                    &rms_op(),
                    vec![
                        ("_out_base_index", Value::Int(0)),
                        ("x", n(w)),
                        ("w", n(w)),
                        ("_all_bases", nodes(&[base.id])),
                        ("_foo", Value::None),
                    ],
                );
                let g = self.b.getitem(af, 1);
                self.like(g, &base);
            }
            Step::AsStrided(a, o) => {
                // Inside the source's layout, of any source.
                let src = self.pick(a);
                if !self.strided_node_ok(&src) {
                    return;
                }
                let Some(layout) = Self::strided_sub(&src, o) else {
                    return;
                };
                let v = self.b.call(
                    &as_strided_op(),
                    vec![
                        n(src.id),
                        ints(&layout.0),
                        ints(&layout.1),
                        Value::Int(layout.2),
                    ],
                );
                self.push_view(v, &src, Cut::Strided, layout);
            }
            Step::V2Foreach(a, c, two_bases) => {
                let (a, c) = (self.pick(a), self.pick(c));
                let w = self.w;
                if two_bases {
                    let af = self.b.v2(
                        &foreach_op(),
                        vec![
                            ("_xs_length", Value::Int(2)),
                            ("_xs_0_base_index", Value::Int(0)),
                            ("_xs_1_base_index", Value::Int(1)),
                            ("w", n(w)),
                            ("_all_bases", nodes(&[a.id, c.id])),
                        ],
                    );
                    let g1 = self.b.getitem(af, 1);
                    self.like(g1, &a);
                    let g2 = self.b.getitem(af, 2);
                    self.like(g2, &c);
                } else {
                    if a.size.first().is_none_or(|&s| s < 2) {
                        return;
                    }
                    let af = foreach_v2_two_row_slices(&mut self.b, a.id, w, 1, 2);
                    let g1 = self.b.getitem(af, 1);
                    self.like(g1, &a);
                }
            }
            Step::V2Opt(a) => {
                let base = self.pick(a);
                let w = self.w;
                let af = self.b.v2(
                    &opt_op(),
                    vec![
                        ("_x_base_index", Value::Int(0)),
                        ("_res_base_index", Value::None),
                        ("w", n(w)),
                        ("_all_bases", nodes(&[base.id])),
                    ],
                );
                let g = self.b.getitem(af, 1);
                self.like(g, &base);
            }
            Step::Read(a) => {
                // A pure reader, typically of an old value.
                let t = self.pick(a);
                let r = self.b.call(&mul_op(), vec![n(t.id), n(t.id)]);
                self.fresh(r, &t.size);
            }
            Step::ReadOld(a) => {
                // The operands of the most recent call.
                let last_call = (0..self.b.g.len())
                    .rev()
                    .map(|i| NodeId(u32::try_from(i).unwrap()))
                    .find(|&i| {
                        matches!(
                            self.b.g.target_of(i).kind,
                            TargetKind::AutoFunctionalized(_)
                        )
                    });
                let mut written: HashSet<NodeId> = HashSet::new();
                if let Some(c) = last_call {
                    self.b.g.node(c).for_each_operand(|o| {
                        written.insert(o);
                    });
                }
                let olds: Vec<T> = self
                    .ts
                    .iter()
                    .filter(|t| written.contains(&t.id))
                    .cloned()
                    .collect();
                let t = if olds.is_empty() {
                    self.pick(a)
                } else {
                    olds[usize::from(a) % olds.len()].clone()
                };
                let r = self.b.call(&mul_op(), vec![n(t.id), n(t.id)]);
                self.fresh(r, &t.size);
            }
        }
    }
}

/// Storage identity in the metadata, as torch's fake tensors have it:
/// views share their source's storage, everything else is fresh.
fn set_storage_keys(g: &mut Graph) {
    let mut keys: Vec<u64> = Vec::with_capacity(g.len());
    for i in 0..g.len() {
        let id = NodeId(u32::try_from(i).unwrap());
        let node = g.node(id);
        let first = node.args.first().and_then(Value::as_node);
        let t = g.target_of(id);
        let src = match t.name.as_str() {
            "aten::slice.Tensor" | "aten::select.int" | "aten::as_strided.default" => first,
            "operator.getitem" => {
                first.filter(|&s| g.target_of(s).name == "aten::split_with_sizes.default")
            }
            _ => None,
        };
        let src = match (src, t.name.as_str()) {
            (Some(s), "operator.getitem") => g.node(s).args.first().and_then(Value::as_node),
            (s, _) => s,
        };
        let key = src.map_or(u64::from(id.0), |s| keys[s.idx()]);
        keys.push(key);
        if let Some(m) = g.nodes[i].meta.as_mut() {
            m.storage = Some(key);
        }
    }
}

/// Builds a graph from the steps; `outputs` picks which tensors the
/// output returns (bit i: the i-th tensor, counted from the end).
pub fn build(steps: &[Step], outputs: u64, with_meta: bool) -> Graph {
    let mut g = Gen {
        b: B::new(),
        ts: Vec::new(),
        inputs: Vec::new(),
        with_meta,
        latest: HashMap::new(),
        writebacks: Vec::new(),
        w: NodeId(0),
    };
    let wm = g.meta_of(&[8], &[1], 0);
    g.w = g.b.input("w", wm);
    g.apply(&Step::Input);
    for s in steps {
        g.apply(s);
    }
    for (x, value) in g.writebacks.clone() {
        let value = value.unwrap_or(g.latest[&x]);
        if value != x {
            g.b.call(&copy_op(), vec![n(x), n(value)]);
        }
    }
    if with_meta {
        set_storage_keys(&mut g.b.g);
    }
    // Any tensor may be returned, older values of written-back inputs
    // included.
    let outs: Vec<NodeId> =
        g.ts.iter()
            .rev()
            .enumerate()
            .filter(|(i, _)| *i < 64 && outputs >> i & 1 == 1)
            .map(|(_, t)| t.id)
            .collect();
    g.b.output(&outs)
}

/// Gives auto_functionalized nodes of `g` a record of alias groups, as
/// `fxrewrite.pre_pass` makes them, drawn from `seed`: for each node (about
/// three in four), a random partition of its tensor slots into up to three
/// groups. Any partition is a program the reference interpreter can run
/// (`interp.rs`: the slots of one group on one storage share one copy), so
/// the engine is checked against it whatever the record says: sharing kept
/// within a group, split between groups.
pub fn add_alias_records(g: &mut Graph, seed: u64) {
    use fxrewrite::forms::call::ALIAS_GROUPS;
    use fxrewrite::forms::{parse, FormCall};
    let arrival = {
        let roles = fxrewrite::analysis::alias::classify(g);
        fxrewrite::analysis::alias::arrival_storages(g, &roles)
    };
    let mut state = seed | 1;
    let mut next = move || {
        // xorshift64: a fixed, seedable sequence.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..g.len() {
        let id = NodeId(u32::try_from(i).unwrap());
        let Some((_, Ok(FormCall::Mutation(call)))) = parse(g, id) else {
            continue;
        };
        if next() % 4 == 0 {
            continue;
        }
        let v1 = call.form == fxrewrite::Form::V1;
        let mut labels: Vec<String> = if v1 {
            call.buffers.iter().map(|b| b.label.clone()).collect()
        } else {
            call.written.iter().map(|w| w.label.clone()).collect()
        };
        labels.extend(call.read_nodes.iter().map(|(l, _)| l.clone()));
        let k = 1 + next() % 3;
        // Mostly records the pre pass can make: a group lies on one storage
        // of the graph as it arrives (the pre pass groups by storage, and
        // Inductor's cleanups only merge storages after it). One call in
        // eight gets a record that ignores storages, which the engine must
        // refuse rather than trust.
        let realistic = next() % 8 != 0;
        let mut groups: Vec<((usize, u64), Vec<Value>)> = Vec::new();
        for l in labels {
            // The written arguments of one v2 base shared it in the program.
            let base = (!v1)
                .then(|| call.written.iter().find(|w| w.label == l).map(|w| w.buffer))
                .flatten();
            let gi = match base {
                Some(b) => (seed ^ b as u64) % k,
                None => next() % k,
            };
            let storage = match call.slot_node(&l) {
                Some(n) if realistic => arrival[n.idx()],
                _ => usize::MAX,
            };
            match groups.iter_mut().find(|(key, _)| *key == (storage, gi)) {
                Some((_, g)) => g.push(Value::Str(l)),
                None => groups.push(((storage, gi), vec![Value::Str(l)])),
            }
        }
        let groups = groups.into_iter().map(|(_, g)| Value::List(g)).collect();
        g.nodes[i]
            .kwargs
            .push((ALIAS_GROUPS.to_string(), Value::List(groups)));
    }
}
