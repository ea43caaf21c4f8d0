//! The generated model itself: one MoE decoder layer after another, in the
//! graph order the module docs of `benches/common/mod.rs` describe.

use fxrewrite::ir::{Graph, OpCode, Value};

use super::builder::{Builder, Layout, Tv, Written, DEVICE};
use super::testkit::builder::ints;
use super::Form;

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

impl Builder<'_> {
    /// Builds the whole graph.
    pub(super) fn build(mut self) -> Graph {
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
            let qs = qm.stride().unwrap_or_default();
            let groups = qw / kvw;
            let layout = Layout {
                shape: vec![tok, groups, kvw],
                stride: vec![qs[0], kvw * qs[1], qs[1]],
                offset: qm.storage_offset().unwrap_or(0),
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
        self.b.g
    }
}
