//! Synthetic post-grad graphs in the shape of real MoE decoder models, built
//! directly as [`fxrewrite::ir::Graph`], for the benches.
//!
//! One layer of the generated model, in graph order (the shape of a vLLM-style
//! Mixtral/DeepSeek decoder after AOT autograd, functionalization and
//! Inductor's pre-grad/joint passes, as `post_grad_custom_post_pass` sees it):
//!
//! 1. `mylib::fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual,
//!    Tensor weight, float eps) -> ()` on the hidden state and the residual
//!    buffer. The residual is a graph input, threaded through every norm and
//!    written back once at the end with `aten::copy_` (torch's input-mutation
//!    epilogue).
//! 2. `qkv = aten::mm(h, aten::permute(w_qkv))`, then the rotary embedding
//!    `mylib::rotary(Tensor(a!) q, Tensor(b!) k, Tensor cos, Tensor sin) -> ()`
//!    on the q and k slices of `qkv`:
//!    - v2: one `auto_functionalized_v2` with `_all_bases=[qkv]` and
//!      `_q_slice_dim/_start/_end`, `_k_slice_dim/_start/_end`;
//!    - v1: `split_with_sizes(qkv)` getitems q and k passed to
//!      `auto_functionalized`, the two new values written back into the base by
//!      two chained `slice_scatter`s;
//!
//!    then q, k and v regenerated from the new base with `slice(x, -1, ..)`.
//!    (Both layouts as torch 2.x emits them for this model; checked against
//!    `torch.compile` post-grad graphs of a one-layer version.)
//! 3. `mylib::kv_write(Tensor(a!) cache, Tensor k, Tensor v, Tensor slots) -> ()`
//!    on the layer's KV cache, a graph input written back with `copy_` at the
//!    end.
//! 4. Attention as a few aten ops on the new cache (`select`, `permute`,
//!    `reshape`, `sum`, `mm`, `mul`, `_softmax`, `mm`) and the output projection.
//! 5. A second `fused_add_rms_norm` (post-attention), the router (`mm`,
//!    `_softmax`, `topk`, renormalisation) and `experts` unrolled expert MLPs:
//!    gate weight from `eq`/`mul`/`sum` on the top-k ids, `select` of the
//!    stacked expert weights, `mm`, an `aten::empty` out buffer written by
//!    `mylib::silu_and_mul(Tensor(a!) out, Tensor x) -> ()`, `mm`, scaled and
//!    summed into the layer output.
//!
//! Every tensor node carries [`TensorMeta`] (dtype, rank, static shape,
//! strides, storage offset, device, and a storage key shared exactly by the
//! nodes that share memory, as the Python encoder reads it from fake tensors).
//!
//! API: [`MoeConfig`] for full control, [`moe_graph`] and [`sized`] for the
//! benches, [`bench_sizes`] for the sizes a run covers, [`check_plan`] for the
//! sanity check that every auto_functionalized node is re-inplaced without a
//! clone.

use std::collections::HashMap;

use fxrewrite::ir::schema::OpTags;
use fxrewrite::ir::{
    AliasInfo, ArgType, Graph, Node, NodeId, OpCode, OpSchema, SchemaArg, SchemaReturn, Target,
    TargetId, TargetKind, TensorMeta, Value,
};
use fxrewrite::plan::Action;

/// Which functionalization form the auto_functionalized nodes use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// `torch.ops.higher_order.auto_functionalized` (vLLM-style engines,
    /// `enable_auto_functionalized_v2=False`).
    V1,
    /// `torch.ops.higher_order.auto_functionalized_v2` (torch's default).
    V2,
}

impl Form {
    /// Both forms, V1 first.
    pub const ALL: [Form; 2] = [Form::V1, Form::V2];

    /// `v1` / `v2`, for bench ids.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Form::V1 => "v1",
            Form::V2 => "v2",
        }
    }
}

/// Shape parameters of the generated model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoeConfig {
    /// Decoder layers.
    pub layers: usize,
    /// Experts per MoE block (all unrolled).
    pub experts: usize,
    /// Experts each token is routed to.
    pub top_k: usize,
    /// Tokens in the batch.
    pub tokens: i64,
    /// Hidden size.
    pub hidden: i64,
    /// Width of q (heads x head dim).
    pub q_width: i64,
    /// Width of k and of v (kv heads x head dim).
    pub kv_width: i64,
    /// Rotary table width (half the head dim).
    pub rotary_width: i64,
    /// Intermediate size of one expert.
    pub ffn: i64,
    /// Slots in one layer's KV cache.
    pub cache_slots: i64,
    /// Vocabulary size.
    pub vocab: i64,
    /// Functionalization form.
    pub form: Form,
}

impl MoeConfig {
    /// A Mixtral-like shape (hidden 4096, 32 q heads and 8 kv heads of 128,
    /// 2048-wide experts, 256 tokens) with the given layer and expert counts;
    /// `top_k` is 2 for up to 8 experts and 8 above (DeepSeek-style).
    #[must_use]
    pub fn new(layers: usize, experts: usize, form: Form) -> Self {
        let experts = experts.max(1);
        Self {
            layers,
            experts,
            top_k: if experts <= 8 { 2.min(experts) } else { 8 },
            tokens: 256,
            hidden: 4096,
            q_width: 4096,
            kv_width: 1024,
            rotary_width: 64,
            ffn: 2048,
            cache_slots: 16384,
            vocab: 32000,
            form,
        }
    }

    /// Builds the graph.
    #[must_use]
    pub fn build(&self) -> Graph {
        Builder::new(self).build()
    }

    /// Nodes the graph will have, without building it.
    #[must_use]
    pub fn node_count(&self) -> usize {
        // Fixed part: 8 model inputs (ids, positions, slots, embedding, cos/sin
        // caches, residual, final norm weight), embedding, 2 index_select,
        // the final norm (3), the residual write-back and the output.
        let fixed = 8 + 1 + 2 + 3 + 1 + 1;
        fixed + self.layers * self.per_layer()
    }

    fn per_layer(&self) -> usize {
        // 7 weights + 1 cache input + 1 cache write-back.
        let inputs = 9;
        let norms = 2 * 3;
        let qkv = 2;
        let rotary = match self.form {
            // split, 2 getitems, af, 2 getitems, 2 slice_scatter, 3 slices
            Form::V1 => 11,
            // af, getitem, 3 slices
            Form::V2 => 5,
        };
        let kv = 2;
        let attention = 9 + 2; // + o_proj permute and mm
                               // permute, mm, softmax, topk + 2 getitems, sum, div
        let router = 8;
        // eq, mul, sum, select, permute, mm, empty, af, getitem, select,
        // permute, mm, mul, add (no add for the first expert)
        let expert = 14;
        inputs + norms + qkv + rotary + kv + attention + router + expert * self.experts - 1
    }
}

/// A graph with `layers` decoder layers of `experts` unrolled experts each, in
/// functionalization form `form` (see the module docs for its shape).
#[must_use]
pub fn moe_graph(layers: usize, experts: usize, form: Form) -> Graph {
    MoeConfig::new(layers, experts, form).build()
}

/// The configuration [`sized`] uses for about `target_nodes` nodes: the expert
/// count grows with the target (8, 32, 128, then 256), the layer count makes up
/// the rest. Lands within a few percent of 10^3, 10^4, 10^5 and 10^6.
#[must_use]
pub fn sized_config(target_nodes: usize, form: Form) -> MoeConfig {
    let experts = match target_nodes {
        0..=3_000 => 8,
        3_001..=30_000 => 32,
        30_001..=300_000 => 128,
        _ => 256,
    };
    let mut cfg = MoeConfig::new(1, experts, form);
    let per_layer = cfg.per_layer();
    let fixed = cfg.node_count() - per_layer;
    let layers = (target_nodes.saturating_sub(fixed) + per_layer / 2) / per_layer;
    cfg.layers = layers.max(1);
    cfg
}

/// A graph of about `target_nodes` nodes (see [`sized_config`]).
#[must_use]
pub fn sized(target_nodes: usize, form: Form) -> Graph {
    sized_config(target_nodes, form).build()
}

/// The graph sizes a bench run covers: 10^3, 10^4, 10^5, plus 10^6 when the
/// environment variable `FXREWRITE_BENCH_LARGE` is `1`.
#[must_use]
pub fn bench_sizes() -> Vec<usize> {
    let mut sizes = vec![1_000, 10_000, 100_000];
    if std::env::var("FXREWRITE_BENCH_LARGE").is_ok_and(|v| v == "1") {
        sizes.push(1_000_000);
    }
    sizes
}

/// One bench input: a generated graph, its form and the size it was built for.
pub struct Case {
    /// The functionalization form.
    pub form: Form,
    /// The target size (10^3, ...); the graph is within a few percent of it.
    pub target: usize,
    /// The graph.
    pub graph: Graph,
}

impl Case {
    /// Nodes in the graph, for `Throughput::Elements`.
    #[must_use]
    pub fn nodes(&self) -> u64 {
        self.graph.len() as u64
    }

    /// The bench id parameter: `v1/1000`.
    #[must_use]
    pub fn id(&self) -> String {
        format!("{}/{}", self.form.label(), self.target)
    }
}

/// Every (size, form) case of a run, sizes from [`bench_sizes`], built once.
#[must_use]
pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for target in bench_sizes() {
        for form in Form::ALL {
            out.push(Case {
                form,
                target,
                graph: sized(target, form),
            });
        }
    }
    out
}

/// The Criterion configuration of every bench: few samples and short
/// measurement windows, so that `cargo bench` (all three targets, default
/// sizes) stays within about three minutes on two cores. Command-line flags
/// (`--sample-size`, `--measurement-time`, `--quick`) still override it.
#[must_use]
pub fn config() -> criterion::Criterion {
    criterion::Criterion::default()
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_millis(1200))
        .nresamples(10_000)
        .without_plots()
}

/// What [`check_plan`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanCheck {
    /// Nodes in the graph.
    pub nodes: usize,
    /// auto_functionalized nodes in the graph.
    pub auto_functionalized: usize,
    /// Decisions in the report.
    pub decisions: usize,
    /// Decisions that re-inplaced without a clone.
    pub reinplaced: usize,
    /// Readers moved ahead of calls.
    pub moved: usize,
    /// `slice_scatter` write-backs removed (v1).
    pub scatters_removed: usize,
    /// Input write-backs removed.
    pub writebacks_removed: usize,
}

/// Plans `graph` and checks that every auto_functionalized node was
/// re-inplaced with no clone and none was left alone.
///
/// # Errors
/// A description of the first problem: a planning error, a node left alone or
/// cloned (with the engine's reason), or a count mismatch.
pub fn check_plan(graph: &Graph) -> Result<PlanCheck, String> {
    let af = graph
        .nodes
        .iter()
        .filter(|n| {
            matches!(
                graph.targets[n.target.idx()].kind,
                TargetKind::AutoFunctionalized | TargetKind::AutoFunctionalizedV2
            )
        })
        .count();
    let plan = fxrewrite::plan(graph).map_err(|e| format!("plan failed: {e}"))?;
    let r = &plan.report;
    for d in &r.decisions {
        match d.action {
            Action::Reinplaced => {}
            Action::Left => {
                return Err(format!(
                    "{} ({}) left: {}",
                    d.node,
                    d.op,
                    d.reason.clone().unwrap_or_default()
                ))
            }
            Action::Cloned => {
                let why: Vec<String> = d
                    .clones
                    .iter()
                    .map(|c| format!("{}: {}", c.arg, c.reason))
                    .collect();
                return Err(format!("{} ({}) cloned: {}", d.node, d.op, why.join("; ")));
            }
        }
    }
    if r.decisions.len() != af || r.clones() != 0 || r.left() != 0 {
        return Err(format!(
            "{} auto_functionalized nodes but {} decisions",
            af,
            r.decisions.len()
        ));
    }
    Ok(PlanCheck {
        nodes: graph.len(),
        auto_functionalized: af,
        decisions: r.decisions.len(),
        reinplaced: r
            .decisions
            .iter()
            .filter(|d| d.action == Action::Reinplaced)
            .count(),
        moved: r.decisions.iter().map(|d| d.moved.len()).sum(),
        scatters_removed: r.decisions.iter().map(|d| d.scatters_removed).sum(),
        writebacks_removed: r.writebacks_removed,
    })
}

// ----- schemas ---------------------------------------------------------------

fn arg(name: &str, ty: ArgType) -> SchemaArg {
    SchemaArg {
        name: name.into(),
        ty,
        alias: None,
        kwarg_only: false,
    }
}

fn kwarg(name: &str, ty: ArgType) -> SchemaArg {
    SchemaArg {
        name: name.into(),
        ty,
        alias: None,
        kwarg_only: true,
    }
}

fn aliased(name: &str, ty: ArgType, set: &str, is_write: bool) -> SchemaArg {
    SchemaArg {
        name: name.into(),
        ty,
        alias: Some(AliasInfo {
            set: set.into(),
            is_write,
        }),
        kwarg_only: false,
    }
}

fn ret(ty: ArgType) -> SchemaReturn {
    SchemaReturn { ty, alias: None }
}

fn ret_alias(ty: ArgType, set: &str, is_write: bool) -> SchemaReturn {
    SchemaReturn {
        ty,
        alias: Some(AliasInfo {
            set: set.into(),
            is_write,
        }),
    }
}

fn schema(args: Vec<SchemaArg>, returns: Vec<SchemaReturn>) -> OpSchema {
    OpSchema {
        args,
        returns,
        tags: OpTags::default(),
    }
}

use ArgType::{Other as O, Tensor as T};

/// The targets the generator uses, interned once.
struct Targets {
    getitem: TargetId,
    af: TargetId,
    output: TargetId,
    embedding: TargetId,
    index_select: TargetId,
    permute: TargetId,
    mm: TargetId,
    split_with_sizes: TargetId,
    slice_scatter: TargetId,
    select: TargetId,
    slice: TargetId,
    reshape: TargetId,
    sum: TargetId,
    mul: TargetId,
    softmax: TargetId,
    topk: TargetId,
    div: TargetId,
    eq: TargetId,
    empty: TargetId,
    add: TargetId,
    copy: TargetId,
    fused_add_rms_norm: TargetId,
    rotary: TargetId,
    kv_write: TargetId,
    silu_and_mul: TargetId,
}

impl Targets {
    fn intern(g: &mut Graph, form: Form) -> Self {
        let mut op = |name: &str, s: OpSchema| {
            g.add_target(Target {
                name: name.into(),
                kind: TargetKind::Operator,
                schema: Some(s),
            })
        };
        // Schemas as torch spells them (native_functions.yaml), alias
        // annotations included; list-returning views carry `*` on both sides,
        // as the Python encoder records `Tensor(a -> *)`.
        let embedding = op(
            "aten::embedding.default",
            schema(
                vec![
                    arg("weight", T),
                    arg("indices", T),
                    arg("padding_idx", O),
                    arg("scale_grad_by_freq", O),
                    arg("sparse", O),
                ],
                vec![ret(T)],
            ),
        );
        let index_select = op(
            "aten::index_select.default",
            schema(
                vec![arg("self", T), arg("dim", O), arg("index", T)],
                vec![ret(T)],
            ),
        );
        let permute = op(
            "aten::permute.default",
            schema(
                vec![aliased("self", T, "a", false), arg("dims", O)],
                vec![ret_alias(T, "a", false)],
            ),
        );
        let mm = op(
            "aten::mm.default",
            schema(vec![arg("self", T), arg("mat2", T)], vec![ret(T)]),
        );
        let split_with_sizes = op(
            "aten::split_with_sizes.default",
            schema(
                vec![
                    aliased("self", T, "*", false),
                    arg("split_sizes", O),
                    arg("dim", O),
                ],
                vec![ret_alias(ArgType::TensorList, "*", false)],
            ),
        );
        let slice_scatter = op(
            "aten::slice_scatter.default",
            schema(
                vec![
                    arg("self", T),
                    arg("src", T),
                    arg("dim", O),
                    arg("start", O),
                    arg("end", O),
                    arg("step", O),
                ],
                vec![ret(T)],
            ),
        );
        let select = op(
            "aten::select.int",
            schema(
                vec![
                    aliased("self", T, "a", false),
                    arg("dim", O),
                    arg("index", O),
                ],
                vec![ret_alias(T, "a", false)],
            ),
        );
        let slice = op(
            "aten::slice.Tensor",
            schema(
                vec![
                    aliased("self", T, "a", false),
                    arg("dim", O),
                    arg("start", O),
                    arg("end", O),
                    arg("step", O),
                ],
                vec![ret_alias(T, "a", false)],
            ),
        );
        let reshape = op(
            "aten::reshape.default",
            schema(
                vec![aliased("self", T, "a", false), arg("shape", O)],
                vec![ret_alias(T, "a", false)],
            ),
        );
        let sum = op(
            "aten::sum.dim_IntList",
            schema(
                vec![
                    arg("self", T),
                    arg("dim", O),
                    arg("keepdim", O),
                    kwarg("dtype", O),
                ],
                vec![ret(T)],
            ),
        );
        let mul = op(
            "aten::mul.Tensor",
            schema(vec![arg("self", T), arg("other", T)], vec![ret(T)]),
        );
        let softmax = op(
            "aten::_softmax.default",
            schema(
                vec![arg("self", T), arg("dim", O), arg("half_to_float", O)],
                vec![ret(T)],
            ),
        );
        let topk = op(
            "aten::topk.default",
            schema(
                vec![
                    arg("self", T),
                    arg("k", O),
                    arg("dim", O),
                    arg("largest", O),
                    arg("sorted", O),
                ],
                vec![ret(T), ret(T)],
            ),
        );
        let div = op(
            "aten::div.Tensor",
            schema(vec![arg("self", T), arg("other", T)], vec![ret(T)]),
        );
        let eq = op(
            "aten::eq.Scalar",
            schema(vec![arg("self", T), arg("other", O)], vec![ret(T)]),
        );
        let empty = op(
            "aten::empty.memory_format",
            schema(
                vec![
                    arg("size", O),
                    kwarg("dtype", O),
                    kwarg("layout", O),
                    kwarg("device", O),
                    kwarg("pin_memory", O),
                    kwarg("memory_format", O),
                ],
                vec![ret(T)],
            ),
        );
        let add = op(
            "aten::add.Tensor",
            schema(
                vec![arg("self", T), arg("other", T), kwarg("alpha", O)],
                vec![ret(T)],
            ),
        );
        let copy = op(
            "aten::copy_.default",
            schema(
                vec![
                    aliased("self", T, "a", true),
                    arg("src", T),
                    arg("non_blocking", O),
                ],
                vec![ret_alias(T, "a", true)],
            ),
        );
        let fused_add_rms_norm = op(
            "mylib::fused_add_rms_norm.default",
            schema(
                vec![
                    aliased("input", T, "a", true),
                    aliased("residual", T, "b", true),
                    arg("weight", T),
                    arg("eps", O),
                ],
                vec![],
            ),
        );
        let rotary = op(
            "mylib::rotary.default",
            schema(
                vec![
                    aliased("q", T, "a", true),
                    aliased("k", T, "b", true),
                    arg("cos", T),
                    arg("sin", T),
                ],
                vec![],
            ),
        );
        let kv_write = op(
            "mylib::kv_write.default",
            schema(
                vec![
                    aliased("cache", T, "a", true),
                    arg("k", T),
                    arg("v", T),
                    arg("slots", T),
                ],
                vec![],
            ),
        );
        let silu_and_mul = op(
            "mylib::silu_and_mul.default",
            schema(vec![aliased("out", T, "a", true), arg("x", T)], vec![]),
        );
        let getitem = g.add_target(Target {
            name: "operator.getitem".into(),
            kind: TargetKind::Getitem,
            schema: None,
        });
        let af = match form {
            Form::V1 => g.add_target(Target {
                name: "higher_order.auto_functionalized".into(),
                kind: TargetKind::AutoFunctionalized,
                schema: None,
            }),
            Form::V2 => g.add_target(Target {
                name: "higher_order.auto_functionalized_v2".into(),
                kind: TargetKind::AutoFunctionalizedV2,
                schema: None,
            }),
        };
        let output = g.add_target(Target {
            name: "output".into(),
            kind: TargetKind::Other,
            schema: None,
        });
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

const DEVICE: &str = "cuda:0";

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
struct Layout {
    shape: Vec<i64>,
    stride: Vec<i64>,
    offset: i64,
}

impl Layout {
    fn contiguous(shape: &[i64]) -> Self {
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
struct Tv {
    id: NodeId,
    meta: Option<TensorMeta>,
}

impl Tv {
    fn v(&self) -> Value {
        Value::Node(self.id)
    }

    fn meta(&self) -> &TensorMeta {
        // Every tensor the builder reads has metadata; a missing one is a
        // generator bug that only weakens the engine's proofs.
        static EMPTY: std::sync::OnceLock<TensorMeta> = std::sync::OnceLock::new();
        self.meta
            .as_ref()
            .unwrap_or_else(|| EMPTY.get_or_init(TensorMeta::default))
    }

    fn shape(&self) -> Vec<i64> {
        self.meta().shape.clone().unwrap_or_default()
    }
}

struct Builder<'c> {
    cfg: &'c MoeConfig,
    g: Graph,
    t: Targets,
    names: HashMap<&'static str, usize>,
    next_storage: u64,
}

fn ints(v: &[i64]) -> Value {
    Value::List(v.iter().map(|&i| Value::Int(i)).collect())
}

/// The weights of one layer.
struct LayerInputs {
    ln1: Tv,
    w_qkv: Tv,
    w_o: Tv,
    ln2: Tv,
    w_router: Tv,
    w13: Tv,
    w2: Tv,
    cache: Tv,
}

impl<'c> Builder<'c> {
    fn new(cfg: &'c MoeConfig) -> Self {
        let mut g = Graph::new();
        g.nodes.reserve(cfg.node_count());
        let t = Targets::intern(&mut g, cfg.form);
        Self {
            cfg,
            g,
            t,
            names: HashMap::new(),
            next_storage: 0x7f00_0000_1000,
        }
    }

    fn name(&mut self, base: &'static str) -> String {
        let n = self.names.entry(base).or_insert(0);
        let name = if *n == 0 {
            base.to_string()
        } else {
            format!("{base}_{n}")
        };
        *n += 1;
        name
    }

    fn fresh_storage(&mut self) -> u64 {
        self.next_storage += 0x40;
        self.next_storage
    }

    fn tensor_meta(&mut self, dtype: &str, layout: Layout, storage: Option<u64>) -> TensorMeta {
        let storage = storage.unwrap_or_else(|| self.fresh_storage());
        TensorMeta {
            dtype: dtype.into(),
            rank: u32::try_from(layout.shape.len()).unwrap_or(0),
            shape: Some(layout.shape),
            stride: Some(layout.stride),
            storage_offset: Some(layout.offset),
            itemsize: dtype_size(dtype),
            storage: Some(storage),
            device: DEVICE.into(),
        }
    }

    /// A fresh contiguous tensor's metadata.
    fn fresh(&mut self, dtype: &str, shape: &[i64]) -> Option<TensorMeta> {
        Some(self.tensor_meta(dtype, Layout::contiguous(shape), None))
    }

    /// Metadata of a view of `base` with `layout`.
    fn view_of(&mut self, base: &Tv, layout: Layout) -> Option<TensorMeta> {
        let m = base.meta().clone();
        Some(self.tensor_meta(&m.dtype, layout, m.storage))
    }

    fn push(
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
        let id = self.g.add_node(Node {
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

    fn placeholder(&mut self, dtype: &str, shape: &[i64]) -> Tv {
        let name = self.name("arg");
        // Placeholders are interned by name, one target each, as the encoder
        // does; pushed directly to keep construction linear.
        self.g.targets.push(Target {
            name: name.clone(),
            kind: TargetKind::Other,
            schema: None,
        });
        let target = TargetId(u32::try_from(self.g.targets.len() - 1).unwrap_or(u32::MAX));
        let meta = self.fresh(dtype, shape);
        self.push(OpCode::Placeholder, name, target, vec![], vec![], meta)
    }

    fn call(
        &mut self,
        base: &'static str,
        target: TargetId,
        args: Vec<Value>,
        kwargs: Vec<(String, Value)>,
        meta: Option<TensorMeta>,
    ) -> Tv {
        let name = self.name(base);
        self.push(OpCode::CallFunction, name, target, args, kwargs, meta)
    }

    fn getitem(&mut self, src: &Tv, index: i64, meta: Option<TensorMeta>) -> Tv {
        let t = self.t.getitem;
        self.call("getitem", t, vec![src.v(), Value::Int(index)], vec![], meta)
    }

    /// `permute(w, [1, 0])` of a 2-D tensor: the transposed weight of a linear.
    fn transpose(&mut self, w: &Tv) -> Tv {
        let m = w.meta().clone();
        let (shape, stride) = (
            m.shape.clone().unwrap_or_default(),
            m.stride.clone().unwrap_or_default(),
        );
        let layout = Layout {
            shape: vec![shape[1], shape[0]],
            stride: vec![stride[1], stride[0]],
            offset: m.storage_offset.unwrap_or(0),
        };
        let meta = self.view_of(w, layout);
        let t = self.t.permute;
        self.call("permute", t, vec![w.v(), ints(&[1, 0])], vec![], meta)
    }

    fn mm(&mut self, a: &Tv, b: &Tv) -> Tv {
        let (sa, sb) = (a.shape(), b.shape());
        let meta = self.fresh(&a.meta().dtype.clone(), &[sa[0], sb[1]]);
        let t = self.t.mm;
        self.call("mm", t, vec![a.v(), b.v()], vec![], meta)
    }

    /// `select(x, dim, index)`.
    fn select(&mut self, x: &Tv, dim: usize, index: i64) -> Tv {
        let m = x.meta().clone();
        let (mut shape, mut stride) = (
            m.shape.clone().unwrap_or_default(),
            m.stride.clone().unwrap_or_default(),
        );
        let offset = m.storage_offset.unwrap_or(0) + index * stride[dim];
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
    fn split_last(&mut self, x: &Tv, sizes: &[i64], wanted: &[usize]) -> Vec<Option<Tv>> {
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
            m.shape.clone().unwrap_or_default(),
            m.stride.clone().unwrap_or_default(),
        );
        let mut start = 0;
        let mut out = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            if wanted.contains(&i) {
                let layout = Layout {
                    shape: vec![shape[0], s],
                    stride: stride.clone(),
                    offset: m.storage_offset.unwrap_or(0) + start * stride[1],
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
    fn slice_last(&mut self, x: &Tv, start: i64, end: i64) -> Tv {
        let m = x.meta().clone();
        let (shape, stride) = (
            m.shape.clone().unwrap_or_default(),
            m.stride.clone().unwrap_or_default(),
        );
        let layout = Layout {
            shape: vec![shape[0], end - start],
            stride: stride.clone(),
            offset: m.storage_offset.unwrap_or(0) + start * stride[1],
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
    fn fresh_like(&mut self, like: &Tv) -> Option<TensorMeta> {
        let m = like.meta().clone();
        let layout = Layout::contiguous(&m.shape.clone().unwrap_or_default());
        Some(self.tensor_meta(&m.dtype, layout, None))
    }

    /// An auto_functionalized node of `op` writing the tensor arguments
    /// `written` (schema name, the tensor, its base and the slice of the base
    /// it is, for v2) and reading `read` (schema name, value), in schema
    /// order `order`. Returns the af node; results are read with getitem.
    fn auto_functionalized(
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
                let name = self.name("auto_functionalized");
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
                let name = self.name("auto_functionalized_v2");
                self.push(OpCode::CallFunction, name, af_target, args, kwargs, None)
            }
        }
    }

    /// `fused_add_rms_norm(h, residual, weight, eps)`: the new hidden state
    /// and the new residual.
    fn fused_add_rms_norm(&mut self, h: &Tv, residual: &Tv, weight: &Tv) -> (Tv, Tv) {
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

    fn build(mut self) -> Graph {
        let c = self.cfg.clone();
        let (tok, hid) = (c.tokens, c.hidden);
        let (qw, kvw) = (c.q_width, c.kv_width);
        let qkv_w = qw + 2 * kvw;
        let experts = i64::try_from(c.experts).unwrap_or(i64::MAX);
        let top_k = i64::try_from(c.top_k).unwrap_or(1);
        // Graph inputs: model inputs, then every parameter, then the buffers.
        let ids = self.placeholder("int64", &[tok]);
        let positions = self.placeholder("int64", &[tok]);
        let slots = self.placeholder("int64", &[tok]);
        let embed = self.placeholder("bfloat16", &[c.vocab, hid]);
        let cos_cache = self.placeholder("bfloat16", &[8192, c.rotary_width]);
        let sin_cache = self.placeholder("bfloat16", &[8192, c.rotary_width]);
        let residual_in = self.placeholder("bfloat16", &[tok, hid]);
        let final_ln = self.placeholder("bfloat16", &[hid]);
        let layers: Vec<LayerInputs> = (0..c.layers)
            .map(|_| LayerInputs {
                ln1: self.placeholder("bfloat16", &[hid]),
                w_qkv: self.placeholder("bfloat16", &[qkv_w, hid]),
                w_o: self.placeholder("bfloat16", &[hid, kvw]),
                ln2: self.placeholder("bfloat16", &[hid]),
                w_router: self.placeholder("bfloat16", &[experts, hid]),
                w13: self.placeholder("bfloat16", &[experts, 2 * c.ffn, hid]),
                w2: self.placeholder("bfloat16", &[experts, hid, c.ffn]),
                cache: self.placeholder("bfloat16", &[2, c.cache_slots, kvw]),
            })
            .collect();

        let meta = self.fresh("bfloat16", &[tok, hid]);
        let t = self.t.embedding;
        let mut h = self.call("embedding", t, vec![embed.v(), ids.v()], vec![], meta);
        let t = self.t.index_select;
        let meta = self.fresh("bfloat16", &[tok, c.rotary_width]);
        let cos = self.call(
            "index_select",
            t,
            vec![cos_cache.v(), Value::Int(0), positions.v()],
            vec![],
            meta,
        );
        let meta = self.fresh("bfloat16", &[tok, c.rotary_width]);
        let sin = self.call(
            "index_select",
            t,
            vec![sin_cache.v(), Value::Int(0), positions.v()],
            vec![],
            meta,
        );

        let mut residual = residual_in.clone();
        let mut new_caches = Vec::with_capacity(layers.len());
        for w in &layers {
            // Input norm.
            let (h1, r1) = self.fused_add_rms_norm(&h, &residual, &w.ln1);
            // qkv projection and rotary on the q/k slices.
            let wt = self.transpose(&w.w_qkv);
            let qkv = self.mm(&h1, &wt);
            let sizes = [qw, kvw, kvw];
            let op = self.t.rotary;
            let order = ["q", "k", "cos", "sin"];
            let read = [("cos", cos.v()), ("sin", sin.v())];
            let new_qkv = match c.form {
                Form::V1 => {
                    let parts = self.split_last(&qkv, &sizes, &[0, 1]);
                    let (Some(q), Some(k)) = (parts[0].clone(), parts[1].clone()) else {
                        break;
                    };
                    let af = self.auto_functionalized(
                        op,
                        &order,
                        &[Written::whole("q", &q), Written::whole("k", &k)],
                        &read,
                    );
                    let qm = self.fresh_like(&q);
                    let km = self.fresh_like(&k);
                    let q_new = self.getitem(&af, 1, qm);
                    let k_new = self.getitem(&af, 2, km);
                    let t = self.t.slice_scatter;
                    let meta = self.fresh_like(&qkv);
                    let s1 = self.call(
                        "slice_scatter",
                        t,
                        vec![
                            qkv.v(),
                            q_new.v(),
                            Value::Int(1),
                            Value::Int(0),
                            Value::Int(qw),
                        ],
                        vec![],
                        meta,
                    );
                    let meta = self.fresh_like(&qkv);
                    self.call(
                        "slice_scatter",
                        t,
                        vec![
                            s1.v(),
                            k_new.v(),
                            Value::Int(1),
                            Value::Int(qw),
                            Value::Int(qw + kvw),
                        ],
                        vec![],
                        meta,
                    )
                }
                Form::V2 => {
                    let af = self.auto_functionalized(
                        op,
                        &order,
                        &[
                            Written::slice("q", &qkv, &qkv, (1, 0, qw)),
                            Written::slice("k", &qkv, &qkv, (1, qw, qw + kvw)),
                        ],
                        &read,
                    );
                    let meta = self.fresh_like(&qkv);
                    self.getitem(&af, 1, meta)
                }
            };
            // Both forms regenerate the views of the new qkv with slices
            // along -1, as functionalization does.
            let k = self.slice_last(&new_qkv, qw, qw + kvw);
            let v = self.slice_last(&new_qkv, qw + kvw, qkv_w);
            // KV-cache write.
            let op = self.t.kv_write;
            let af = self.auto_functionalized(
                op,
                &["cache", "k", "v", "slots"],
                &[Written::whole("cache", &w.cache)],
                &[("k", k.v()), ("v", v.v()), ("slots", slots.v())],
            );
            let cm = self.fresh_like(&w.cache);
            let cache_new = self.getitem(&af, 1, cm);
            new_caches.push((w.cache.clone(), cache_new.clone()));
            let q = self.slice_last(&new_qkv, 0, qw);
            // Attention on the new cache.
            let kc = self.select(&cache_new, 0, 0);
            let vc = self.select(&cache_new, 0, 1);
            let kt = self.transpose(&kc);
            let qm = q.meta().clone();
            let qs = qm.stride.clone().unwrap_or_default();
            let groups = qw / kvw;
            let layout = Layout {
                shape: vec![tok, groups, kvw],
                stride: vec![qs[0], kvw * qs[1], qs[1]],
                offset: qm.storage_offset.unwrap_or(0),
            };
            let meta = self.view_of(&q, layout);
            let t = self.t.reshape;
            let qv = self.call(
                "reshape",
                t,
                vec![q.v(), ints(&[tok, groups, kvw])],
                vec![],
                meta,
            );
            let meta = self.fresh("bfloat16", &[tok, kvw]);
            let t = self.t.sum;
            let qsum = self.call("sum", t, vec![qv.v(), ints(&[1])], vec![], meta);
            let scores = self.mm(&qsum, &kt);
            let meta = self.fresh_like(&scores);
            let t = self.t.mul;
            let scaled = self.call(
                "mul",
                t,
                vec![scores.v(), Value::Float(0.088_388_347_648_318_44)],
                vec![],
                meta,
            );
            let meta = self.fresh_like(&scores);
            let t = self.t.softmax;
            let probs = self.call(
                "_softmax",
                t,
                vec![scaled.v(), Value::Int(-1), Value::Bool(false)],
                vec![],
                meta,
            );
            let attn = self.mm(&probs, &vc);
            let ot = self.transpose(&w.w_o);
            let o = self.mm(&attn, &ot);
            // Post-attention norm.
            let (h2, r2) = self.fused_add_rms_norm(&o, &r1, &w.ln2);
            residual = r2;
            // Router.
            let rt = self.transpose(&w.w_router);
            let logits = self.mm(&h2, &rt);
            let meta = self.fresh_like(&logits);
            let t = self.t.softmax;
            let rprobs = self.call(
                "_softmax",
                t,
                vec![logits.v(), Value::Int(1), Value::Bool(false)],
                vec![],
                meta,
            );
            let t = self.t.topk;
            let topk = self.call(
                "topk",
                t,
                vec![rprobs.v(), Value::Int(top_k), Value::Int(1)],
                vec![],
                None,
            );
            let meta = self.fresh("bfloat16", &[tok, top_k]);
            let vals = self.getitem(&topk, 0, meta);
            let meta = self.fresh("int64", &[tok, top_k]);
            let idx = self.getitem(&topk, 1, meta);
            let meta = self.fresh("bfloat16", &[tok, 1]);
            let t = self.t.sum;
            let den = self.call(
                "sum",
                t,
                vec![vals.v(), ints(&[1]), Value::Bool(true)],
                vec![],
                meta,
            );
            let meta = self.fresh("bfloat16", &[tok, top_k]);
            let t = self.t.div;
            let weights = self.call("div", t, vec![vals.v(), den.v()], vec![], meta);
            // Experts, unrolled.
            let mut acc: Option<Tv> = None;
            for e in 0..experts {
                let meta = self.fresh("bool", &[tok, top_k]);
                let t = self.t.eq;
                let mask = self.call("eq", t, vec![idx.v(), Value::Int(e)], vec![], meta);
                let meta = self.fresh("bfloat16", &[tok, top_k]);
                let t = self.t.mul;
                let gw = self.call("mul", t, vec![weights.v(), mask.v()], vec![], meta);
                let meta = self.fresh("bfloat16", &[tok, 1]);
                let t = self.t.sum;
                let gate = self.call(
                    "sum",
                    t,
                    vec![gw.v(), ints(&[1]), Value::Bool(true)],
                    vec![],
                    meta,
                );
                let w13 = self.select(&w.w13, 0, e);
                let w13t = self.transpose(&w13);
                let up = self.mm(&h2, &w13t);
                let meta = self.fresh("bfloat16", &[tok, c.ffn]);
                let t = self.t.empty;
                let out = self.call(
                    "empty",
                    t,
                    vec![ints(&[tok, c.ffn])],
                    vec![
                        ("dtype".into(), Value::Dtype("bfloat16".into())),
                        ("device".into(), Value::Device(DEVICE.into())),
                        ("pin_memory".into(), Value::Bool(false)),
                    ],
                    meta,
                );
                let op = self.t.silu_and_mul;
                let af = self.auto_functionalized(
                    op,
                    &["out", "x"],
                    &[Written::whole("out", &out)],
                    &[("x", up.v())],
                );
                let am = self.fresh_like(&out);
                let act = self.getitem(&af, 1, am);
                let w2 = self.select(&w.w2, 0, e);
                let w2t = self.transpose(&w2);
                let down = self.mm(&act, &w2t);
                let meta = self.fresh_like(&down);
                let t = self.t.mul;
                let scaled = self.call("mul", t, vec![down.v(), gate.v()], vec![], meta);
                acc = Some(match acc {
                    None => scaled,
                    Some(a) => {
                        let meta = self.fresh_like(&a);
                        let t = self.t.add;
                        self.call("add", t, vec![a.v(), scaled.v()], vec![], meta)
                    }
                });
            }
            h = acc.unwrap_or(h2);
        }
        // Final norm, input write-backs, output.
        let (h_out, r_out) = self.fused_add_rms_norm(&h, &residual, &final_ln);
        let t = self.t.copy;
        let meta = residual_in.meta.clone();
        self.call("copy_", t, vec![residual_in.v(), r_out.v()], vec![], meta);
        for (cache, new) in &new_caches {
            let meta = cache.meta.clone();
            self.call("copy_", t, vec![cache.v(), new.v()], vec![], meta);
        }
        let t = self.t.output;
        self.push(
            OpCode::Output,
            "output".into(),
            t,
            vec![Value::Tuple(vec![h_out.v()])],
            vec![],
            None,
        );
        self.g
    }
}

/// A written argument of an auto_functionalized node.
struct Written<'a> {
    name: &'static str,
    tensor: &'a Tv,
    base: &'a Tv,
    /// v2 slice view info `(dim, start, end)` of `tensor` in `base`.
    slice: Option<(i64, i64, i64)>,
}

impl<'a> Written<'a> {
    fn whole(name: &'static str, t: &'a Tv) -> Self {
        Self {
            name,
            tensor: t,
            base: t,
            slice: None,
        }
    }

    fn slice(name: &'static str, tensor: &'a Tv, base: &'a Tv, slice: (i64, i64, i64)) -> Self {
        Self {
            name,
            tensor,
            base,
            slice: Some(slice),
        }
    }
}
