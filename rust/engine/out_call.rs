//! Out= calls (`out_buffers_v2`): an operator whose written arguments are
//! write-only outputs gets fresh buffers of the recorded layouts, so it
//! needs none of the safety analysis of `mutation.rs`.

use crate::analysis::alias::Role;
use crate::forms::call::OutCall;
use crate::ir::NodeId;
use crate::plan::{Action, Callee, MetaSource, NewId, PlanArg, ValueRef};

use super::bindings::Bind;
use super::emit::{positional_where_allowed, returns_meta};
use super::{Emitter, LeftReason, Outcome};

impl Emitter<'_, '_> {
    /// Plans an out= call: fresh buffers, no safety analysis needed.
    pub fn rewrite_out_call(&mut self, call: &OutCall, rule: &'static str) -> Outcome {
        let af = call.node;
        let users: Vec<NodeId> = self.facts.uses.users(af).to_vec();
        if call.n_returns != 1 {
            for &u in &users {
                match self.facts.roles[u.idx()] {
                    Role::AfResult { index, .. } if index < call.n_returns => {}
                    _ if self.facts.ordering_only_use(u, af) => {}
                    _ => return Outcome::Left(LeftReason::UnexpectedResultUse { user: u }),
                }
            }
        }
        let mut bufs = Vec::new();
        let mut args = Vec::new();
        for (name, kwarg_only, keys) in &call.args {
            let pa = match keys {
                Some(k) => {
                    let b = self.fresh_buffer(af, k);
                    bufs.push(b);
                    PlanArg::Ref(ValueRef::New(b))
                }
                None => PlanArg::FromKwarg {
                    node: af,
                    key: name.clone(),
                },
            };
            args.push((name.clone(), *kwarg_only, pa));
        }
        let (args, kwargs) = positional_where_allowed(args);
        let meta = returns_meta(af, call.n_returns, None);
        let call_id = self
            .plan
            .insert(af, Callee::Target(call.op), args, kwargs, meta);
        let value_of = |i: usize| {
            call.return_buffers
                .get(i)
                .copied()
                .flatten()
                .and_then(|w| bufs.get(w))
                .map(|b| ValueRef::New(*b))
        };
        if call.n_returns == 1 {
            let v = value_of(0).unwrap_or(ValueRef::New(call_id));
            self.plan.replace(af, v);
            self.bindings.bind_results(af, vec![Bind::Tensor]);
        } else {
            for u in users {
                let Role::AfResult { index, .. } = self.facts.roles[u.idx()] else {
                    continue;
                };
                let v = match value_of(index) {
                    Some(v) => v,
                    None => self.getitem_of(af, call_id, index),
                };
                self.plan.replace(u, v);
                self.plan.erase(u);
            }
            // Ordering-only users (`control_deps`) now depend on a buffer the
            // call writes.
            if let Some(&b) = bufs.first() {
                self.order_users_after(af, ValueRef::New(b));
            }
            self.bindings
                .bind_results(af, vec![Bind::Fresh; call.n_returns]);
        }
        self.plan.erase(af);
        let op = self.facts.op_name(call.op);
        let decision = self
            .facts
            .node_report(af, op, call.form, rule, Action::Reinplaced);
        self.plan.decide(decision);
        Outcome::Rewritten
    }

    /// A fresh buffer for an output argument, of the size, stride, dtype
    /// and device the node records under `keys`.
    fn fresh_buffer(&mut self, af: NodeId, keys: &[String; 4]) -> NewId {
        let kw = |s: &String| PlanArg::FromKwarg {
            node: af,
            key: s.clone(),
        };
        self.plan.insert(
            af,
            Callee::Aten("aten::empty_strided.default"),
            vec![kw(&keys[0]), kw(&keys[1])],
            vec![
                ("dtype".into(), kw(&keys[2])),
                ("device".into(), kw(&keys[3])),
            ],
            MetaSource::Compute,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{call_args, erased, inserted, only_decision, plan_of};
    use super::*;
    use crate::analysis::test_graph::{scale_out, B};
    use crate::ir::Value;
    use crate::plan::Action;
    use crate::plan::Edit;

    #[test]
    fn an_out_call_writes_a_fresh_buffer_of_the_recorded_layout() {
        let mut b = B::new();
        let x = b.input("x");
        let af = b.af(
            "af",
            true,
            &scale_out(),
            vec![
                ("s", Value::Float(2.0)),
                ("_x_size", Value::List(vec![Value::Int(4)])),
                ("_x_stride", Value::List(vec![Value::Int(1)])),
                ("_x_dtype", Value::Dtype("float32".into())),
                ("_x_device", Value::Device("cpu".into())),
                ("_all_bases", Value::List(vec![])),
            ],
        );
        let g = b.output(&[x]);
        let p = plan_of(&g);
        let d = only_decision(&p);
        assert_eq!((d.action, d.rule), (Action::Reinplaced, "out_buffers_v2"));
        assert_eq!(
            inserted(&g, &p),
            ["aten::empty_strided.default", "m::scale.out"]
        );
        let kw = |k: &str| PlanArg::FromKwarg {
            node: af,
            key: k.into(),
        };
        let Some(Edit::Insert { args, kwargs, .. }) = p.edits.first() else {
            panic!("the buffer");
        };
        assert_eq!(args[..], [kw("_x_size"), kw("_x_stride")]);
        assert_eq!(
            kwargs[..],
            [
                ("dtype".to_string(), kw("_x_dtype")),
                ("device".to_string(), kw("_x_device"))
            ]
        );
        assert_eq!(
            call_args(&p, "m::scale.out", &g),
            [PlanArg::Ref(ValueRef::New(NewId(0))), kw("s")]
        );
        assert_eq!(erased(&p), [af]);
    }
}
