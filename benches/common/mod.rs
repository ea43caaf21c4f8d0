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

#[path = "../../tests/common/mod.rs"]
pub mod testkit;

mod builder;
mod model;

use fxrewrite::ir::{Graph, TargetKind};
use fxrewrite::plan::Action;

use builder::Builder;

/// Which form the auto_functionalized nodes use: V1 as vLLM-style engines
/// compile (`enable_auto_functionalized_v2=False`), V2 torch's default.
pub use fxrewrite::Form;

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
        format!("{}/{}", self.form.as_str(), self.target)
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
                TargetKind::AutoFunctionalized(_)
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
