//! The builder of the bench graphs: the targets the model uses, interned
//! once, and tensors tracked with their metadata (layout and storage key), on
//! top of the shared graph builder of `tests/common/builder.rs`.

use fxrewrite::ir::{Node, NodeId, OpCode, Target, TargetId, TargetKind, TensorMeta, Value};

use super::testkit::builder::{ints, B};
use super::testkit::ops;
use super::{Form, MoeConfig};

/// The targets the generator uses, interned once.
pub(super) struct Targets {
    pub(super) getitem: TargetId,
    pub(super) af: TargetId,
    pub(super) output: TargetId,
    pub(super) embedding: TargetId,
    pub(super) index_select: TargetId,
    pub(super) permute: TargetId,
    pub(super) mm: TargetId,
    pub(super) split_with_sizes: TargetId,
    pub(super) slice_scatter: TargetId,
    pub(super) select: TargetId,
    pub(super) slice: TargetId,
    pub(super) reshape: TargetId,
    pub(super) sum: TargetId,
    pub(super) mul: TargetId,
    pub(super) softmax: TargetId,
    pub(super) topk: TargetId,
    pub(super) div: TargetId,
    pub(super) eq: TargetId,
    pub(super) empty: TargetId,
    pub(super) add: TargetId,
    pub(super) copy: TargetId,
    pub(super) fused_add_rms_norm: TargetId,
    pub(super) rotary: TargetId,
    pub(super) kv_write: TargetId,
    pub(super) silu_and_mul: TargetId,
}

impl Targets {
    /// Interns every target in a fixed order: the order fixes the target ids,
    /// and so the bytes of the generated graph.
    pub(super) fn intern(b: &mut B, form: Form) -> Self {
        let embedding = b.op(&ops::embedding_op());
        let index_select = b.op(&ops::index_select_op());
        let permute = b.op(&ops::permute_op());
        let mm = b.op(&ops::mm_op());
        let split_with_sizes = b.op(&ops::split_with_sizes_op());
        let slice_scatter = b.op(&ops::slice_scatter_op());
        let select = b.op(&ops::select_op());
        let slice = b.op(&ops::slice_op());
        let reshape = b.op(&ops::reshape_op());
        let sum = b.op(&ops::sum_op());
        let mul = b.op(&ops::mul_op());
        let softmax = b.op(&ops::softmax_op());
        let topk = b.op(&ops::topk_op());
        let div = b.op(&ops::div_op());
        let eq = b.op(&ops::eq_op());
        let empty = b.op(&ops::empty_op());
        let add = b.op(&ops::add_op());
        let copy = b.op(&ops::copy_op());
        let fused_add_rms_norm = b.op(&ops::fused_add_rms_norm_op());
        let rotary = b.op(&ops::rotary_op());
        let kv_write = b.op(&ops::kv_write_op());
        let silu_and_mul = b.op(&ops::silu_and_mul_op());
        let getitem = b.target("operator.getitem", TargetKind::Getitem, None);
        let af = match form {
            Form::V1 => b.target("higher_order.auto_functionalized", Form::V1.kind(), None),
            Form::V2 => b.target("higher_order.auto_functionalized_v2", Form::V2.kind(), None),
        };
        let output = b.target("output", TargetKind::Other, None);
        Self {
            getitem,
            af,
            output,
            embedding,
            index_select,
            permute,
            mm,
            split_with_sizes,
            slice_scatter,
            select,
            slice,
            reshape,
            sum,
            mul,
            softmax,
            topk,
            div,
            eq,
            empty,
            add,
            copy,
            fused_add_rms_norm,
            rotary,
            kv_write,
            silu_and_mul,
        }
    }
}

// ----- metadata --------------------------------------------------------------

pub(super) const DEVICE: &str = "cuda:0";

fn contiguous_strides(shape: &[i64]) -> Vec<i64> {
    let mut st = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * shape[i + 1].max(1);
    }
    st
}

fn dtype_size(dtype: &str) -> u32 {
    match dtype {
        "bool" => 1,
        "bfloat16" | "float16" => 2,
        "int64" | "float64" => 8,
        _ => 4,
    }
}

/// A strided layout: shape, strides and storage offset.
#[derive(Clone, Debug)]
pub(super) struct Layout {
    pub(super) shape: Vec<i64>,
    pub(super) stride: Vec<i64>,
    pub(super) offset: i64,
}

impl Layout {
    pub(super) fn contiguous(shape: &[i64]) -> Self {
        Self {
            shape: shape.to_vec(),
            stride: contiguous_strides(shape),
            offset: 0,
        }
    }
}

// ----- the builder -----------------------------------------------------------

/// A node under construction: its id and the metadata of its value.
#[derive(Clone, Debug)]
pub(super) struct Tv {
    pub(super) id: NodeId,
    pub(super) meta: Option<TensorMeta>,
}

impl Tv {
    pub(super) fn v(&self) -> Value {
        Value::Node(self.id)
    }

    pub(super) fn meta(&self) -> &TensorMeta {
        // Every tensor the builder reads has metadata; a missing one is a
        // generator bug that only weakens the engine's proofs.
        static EMPTY: std::sync::OnceLock<TensorMeta> = std::sync::OnceLock::new();
        self.meta
            .as_ref()
            .unwrap_or_else(|| EMPTY.get_or_init(TensorMeta::default))
    }

    pub(super) fn shape(&self) -> Vec<i64> {
        self.meta().shape().unwrap_or_default()
    }
}

pub(super) struct Builder<'c> {
    pub(super) cfg: &'c MoeConfig,
    /// The graph and its FX-style namer.
    pub(super) b: B,
    pub(super) t: Targets,
    next_storage: u64,
}

impl<'c> Builder<'c> {
    pub(super) fn new(cfg: &'c MoeConfig) -> Self {
        let mut b = B::new();
        b.g.nodes.reserve(cfg.node_count());
        let t = Targets::intern(&mut b, cfg.form);
        Self {
            cfg,
            b,
            t,
            next_storage: 0x7f00_0000_1000,
        }
    }

    pub(super) fn fresh_storage(&mut self) -> u64 {
        self.next_storage += 0x40;
        self.next_storage
    }

    pub(super) fn tensor_meta(
        &mut self,
        dtype: &str,
        layout: Layout,
        storage: Option<u64>,
    ) -> TensorMeta {
        let storage = storage.unwrap_or_else(|| self.fresh_storage());
        TensorMeta {
            storage: Some(storage),
            device: DEVICE.into(),
            ..TensorMeta::static_strided(
                dtype,
                dtype_size(dtype),
                &layout.shape,
                &layout.stride,
                layout.offset,
            )
        }
    }

    /// A fresh contiguous tensor's metadata.
    pub(super) fn fresh(&mut self, dtype: &str, shape: &[i64]) -> Option<TensorMeta> {
        Some(self.tensor_meta(dtype, Layout::contiguous(shape), None))
    }

    /// Metadata of a view of `base` with `layout`.
    pub(super) fn view_of(&mut self, base: &Tv, layout: Layout) -> Option<TensorMeta> {
        let m = base.meta().clone();
        Some(self.tensor_meta(&m.dtype, layout, m.storage))
    }

    pub(super) fn push(
        &mut self,
        op: OpCode,
        name: String,
        target: TargetId,
        args: Vec<Value>,
        kwargs: Vec<(String, Value)>,
        meta: Option<TensorMeta>,
    ) -> Tv {
        // No source lines: the pass encodes without them.
        let source = None;
        let id = self.b.g.add_node(Node {
            op,
            name,
            target,
            args,
            kwargs,
            meta: meta.clone(),
            source,
        });
        Tv { id, meta }
    }

    pub(super) fn placeholder(&mut self, dtype: &str, shape: &[i64]) -> Tv {
        let name = self.b.fresh_name("arg");
        // Placeholders are interned by name, one target each, as the encoder
        // does; pushed directly to keep construction linear.
        self.b.g.targets.push(Target {
            name: name.clone(),
            kind: TargetKind::Other,
            schema: None,
        });
        let target = TargetId(u32::try_from(self.b.g.targets.len() - 1).unwrap_or(u32::MAX));
        let meta = self.fresh(dtype, shape);
        self.push(OpCode::Placeholder, name, target, vec![], vec![], meta)
    }

    pub(super) fn call(
        &mut self,
        base: &'static str,
        target: TargetId,
        args: Vec<Value>,
        kwargs: Vec<(String, Value)>,
        meta: Option<TensorMeta>,
    ) -> Tv {
        let name = self.b.fresh_name(base);
        self.push(OpCode::CallFunction, name, target, args, kwargs, meta)
    }

    pub(super) fn getitem(&mut self, src: &Tv, index: i64, meta: Option<TensorMeta>) -> Tv {
        let t = self.t.getitem;
        self.call("getitem", t, vec![src.v(), Value::Int(index)], vec![], meta)
    }

    /// `permute(w, [1, 0])` of a 2-D tensor: the transposed weight of a linear.
    pub(super) fn transpose(&mut self, w: &Tv) -> Tv {
        let m = w.meta().clone();
        let (shape, stride) = (
            m.shape().unwrap_or_default(),
            m.stride().unwrap_or_default(),
        );
        let layout = Layout {
            shape: vec![shape[1], shape[0]],
            stride: vec![stride[1], stride[0]],
            offset: m.storage_offset().unwrap_or(0),
        };
        let meta = self.view_of(w, layout);
        let t = self.t.permute;
        self.call("permute", t, vec![w.v(), ints(&[1, 0])], vec![], meta)
    }

    pub(super) fn mm(&mut self, a: &Tv, b: &Tv) -> Tv {
        let (sa, sb) = (a.shape(), b.shape());
        let meta = self.fresh(&a.meta().dtype.clone(), &[sa[0], sb[1]]);
        let t = self.t.mm;
        self.call("mm", t, vec![a.v(), b.v()], vec![], meta)
    }

    /// `select(x, dim, index)`.
    pub(super) fn select(&mut self, x: &Tv, dim: usize, index: i64) -> Tv {
        let m = x.meta().clone();
        let (mut shape, mut stride) = (
            m.shape().unwrap_or_default(),
            m.stride().unwrap_or_default(),
        );
        let offset = m.storage_offset().unwrap_or(0) + index * stride[dim];
        shape.remove(dim);
        stride.remove(dim);
        let meta = self.view_of(
            x,
            Layout {
                shape,
                stride,
                offset,
            },
        );
        let t = self.t.select;
        self.call(
            "select",
            t,
            vec![x.v(), Value::Int(dim as i64), Value::Int(index)],
            vec![],
            meta,
        )
    }

    /// `split_with_sizes(x, sizes, -1)` of a 2-D tensor and getitems of the
    /// listed pieces (`None` for pieces the graph never reads).
    pub(super) fn split_last(
        &mut self,
        x: &Tv,
        sizes: &[i64],
        wanted: &[usize],
    ) -> Vec<Option<Tv>> {
        let t = self.t.split_with_sizes;
        let list = self.call(
            "split_with_sizes",
            t,
            vec![x.v(), ints(sizes), Value::Int(-1)],
            vec![],
            None,
        );
        let m = x.meta().clone();
        let (shape, stride) = (
            m.shape().unwrap_or_default(),
            m.stride().unwrap_or_default(),
        );
        let mut start = 0;
        let mut out = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            if wanted.contains(&i) {
                let layout = Layout {
                    shape: vec![shape[0], s],
                    stride: stride.clone(),
                    offset: m.storage_offset().unwrap_or(0) + start * stride[1],
                };
                let meta = self.view_of(x, layout);
                out.push(Some(self.getitem(&list, i as i64, meta)));
            } else {
                out.push(None);
            }
            start += s;
        }
        out
    }

    /// `slice(x, -1, start, end)` of a 2-D tensor.
    pub(super) fn slice_last(&mut self, x: &Tv, start: i64, end: i64) -> Tv {
        let m = x.meta().clone();
        let (shape, stride) = (
            m.shape().unwrap_or_default(),
            m.stride().unwrap_or_default(),
        );
        let layout = Layout {
            shape: vec![shape[0], end - start],
            stride: stride.clone(),
            offset: m.storage_offset().unwrap_or(0) + start * stride[1],
        };
        let meta = self.view_of(x, layout);
        let t = self.t.slice;
        self.call(
            "slice",
            t,
            vec![x.v(), Value::Int(-1), Value::Int(start), Value::Int(end)],
            vec![],
            meta,
        )
    }

    /// A fresh tensor with the layout of `like` (an auto_functionalized result).
    pub(super) fn fresh_like(&mut self, like: &Tv) -> Option<TensorMeta> {
        let m = like.meta().clone();
        let layout = Layout::contiguous(&m.shape().unwrap_or_default());
        Some(self.tensor_meta(&m.dtype, layout, None))
    }

    /// An auto_functionalized node of `op` writing the tensor arguments
    /// `written` (schema name, the tensor, its base and the slice of the base
    /// it is, for v2) and reading `read` (schema name, value), in schema
    /// order `order`. Returns the af node; results are read with getitem.
    pub(super) fn auto_functionalized(
        &mut self,
        op: TargetId,
        order: &[&str],
        written: &[Written<'_>],
        read: &[(&str, Value)],
    ) -> Tv {
        let af_target = self.t.af;
        let args = vec![Value::Target(op)];
        let mut kwargs: Vec<(String, Value)> = Vec::new();
        match self.cfg.form {
            Form::V1 => {
                for &name in order {
                    if let Some(w) = written.iter().find(|w| w.name == name) {
                        kwargs.push((name.into(), w.tensor.v()));
                    } else if let Some((_, v)) = read.iter().find(|(n, _)| *n == name) {
                        kwargs.push((name.into(), v.clone()));
                    }
                }
                let name = self.b.fresh_name("auto_functionalized");
                self.push(OpCode::CallFunction, name, af_target, args, kwargs, None)
            }
            Form::V2 => {
                for &name in order {
                    if let Some((_, v)) = read.iter().find(|(n, _)| *n == name) {
                        kwargs.push((name.into(), v.clone()));
                    }
                }
                let mut bases: Vec<NodeId> = Vec::new();
                for w in written {
                    let base = w.base.id;
                    let index = match bases.iter().position(|b| *b == base) {
                        Some(i) => i,
                        None => {
                            bases.push(base);
                            bases.len() - 1
                        }
                    };
                    kwargs.push((format!("_{}_base_index", w.name), Value::Int(index as i64)));
                    if let Some((dim, start, end)) = w.slice {
                        kwargs.push((format!("_{}_slice_dim", w.name), Value::Int(dim)));
                        kwargs.push((format!("_{}_slice_start", w.name), Value::Int(start)));
                        kwargs.push((format!("_{}_slice_end", w.name), Value::Int(end)));
                    }
                }
                kwargs.push((
                    "_all_bases".into(),
                    Value::List(bases.into_iter().map(Value::Node).collect()),
                ));
                let name = self.b.fresh_name("auto_functionalized_v2");
                self.push(OpCode::CallFunction, name, af_target, args, kwargs, None)
            }
        }
    }

    /// `fused_add_rms_norm(h, residual, weight, eps)`: the new hidden state
    /// and the new residual.
    pub(super) fn fused_add_rms_norm(&mut self, h: &Tv, residual: &Tv, weight: &Tv) -> (Tv, Tv) {
        let op = self.t.fused_add_rms_norm;
        let af = self.auto_functionalized(
            op,
            &["input", "residual", "weight", "eps"],
            &[
                Written::whole("input", h),
                Written::whole("residual", residual),
            ],
            &[("weight", weight.v()), ("eps", Value::Float(1e-6))],
        );
        let hm = self.fresh_like(h);
        let rm = self.fresh_like(residual);
        let h_new = self.getitem(&af, 1, hm);
        let r_new = self.getitem(&af, 2, rm);
        (h_new, r_new)
    }
}

/// A written argument of an auto_functionalized node.
pub(super) struct Written<'a> {
    name: &'static str,
    tensor: &'a Tv,
    base: &'a Tv,
    /// v2 slice view info `(dim, start, end)` of `tensor` in `base`.
    slice: Option<(i64, i64, i64)>,
}

impl<'a> Written<'a> {
    pub(super) fn whole(name: &'static str, t: &'a Tv) -> Self {
        Self {
            name,
            tensor: t,
            base: t,
            slice: None,
        }
    }

    pub(super) fn slice(
        name: &'static str,
        tensor: &'a Tv,
        base: &'a Tv,
        slice: (i64, i64, i64),
    ) -> Self {
        Self {
            name,
            tensor,
            base,
            slice: Some(slice),
        }
    }
}
