//! The walk: every node in graph order joins its storage class and gets
//! the version of that memory it holds (`storage.rs`); an
//! auto_functionalized node is read by its form and planned
//! ([`Context::rewrite_mutation`], [`super::Emitter::rewrite_out_call`]), and its
//! results are then bound to what the plan made them (`Bind`, `bindings.rs`).

use crate::analysis::alias::{returns_an_alias, Role};
use crate::error::Result;
use crate::forms::{Form, FormCall};
use crate::ir::NodeId;
use crate::plan::{Action, NodeReport};

use super::bindings::Bind;
use super::{nid, Context, LeftReason, Outcome};

impl Context<'_> {
    /// Walks every node in graph order.
    ///
    /// # Errors
    /// [`crate::Error::Internal`] when planning a call breaks the engine's
    /// own invariants.
    pub(super) fn run(&mut self) -> Result<()> {
        for i in 0..self.facts.graph.len() {
            self.step(nid(i))?;
        }
        Ok(())
    }

    /// Walks node `id`, the next in graph order: joins its storage class,
    /// gives it its version and geometry link, and plans it when it is an
    /// auto_functionalized node.
    ///
    /// # Errors
    /// As [`Self::run`].
    pub(super) fn step(&mut self, id: NodeId) -> Result<()> {
        let i = id.idx();
        let role = self.facts.roles[i].clone();
        let mut storage_union = true;
        match role {
            Role::Input => self.classes.add_input(i, id),
            Role::View { src, step, .. } => {
                self.classes.union(id, src);
                self.versions.set(id, self.versions.of(src));
                self.links.view_of(id, src, step);
            }
            Role::Opaque => {
                let mut ops = Vec::new();
                self.facts.graph.node(id).for_each_operand(|o| ops.push(o));
                for o in ops {
                    self.classes.union(id, o);
                }
                let r = self.classes.find(id);
                self.versions.set(id, self.classes.latest(r));
            }
            Role::OtherMutation { written } => {
                // Writing arguments in place makes them share no memory
                // with each other: only the call's own value may alias
                // them, through a return annotated as an alias. A call
                // with no such return (every operator auto_functionalized
                // wraps, so every call this engine emits) joins no class;
                // joining its written arguments into one would make a
                // later `copy_(input, other_written)` look like a copy
                // inside the input's own memory.
                if returns_an_alias(self.facts.graph, id) {
                    for w in written {
                        self.classes.union(id, w);
                    }
                }
                let r = self.classes.find(id);
                self.versions.set(id, self.classes.latest(r));
            }
            Role::AutoFunctionalized => {
                self.plan_af(id)?;
                storage_union = false;
            }
            Role::AfResult { af, index } => {
                let bind = self.bindings.result(af, index);
                self.apply_bind(id, af, bind);
                storage_union = false;
            }
            Role::AfListItem { list, item } => {
                let bind = self.bindings.list_item(list, item);
                self.apply_bind(id, list, bind);
                storage_union = false;
            }
            Role::Scatter { .. } => {
                if let Some((base, event)) = self.bindings.scatter(id) {
                    self.classes.union(id, base);
                    self.versions.set(id, event);
                    self.links.same_as(id, base);
                    storage_union = false;
                }
            }
            Role::InputWriteBack { dst, src } => {
                self.plan_writeback(id, dst, src);
                storage_union = false;
            }
            Role::Fresh | Role::MetaOnly | Role::Output => {}
        }
        if storage_union {
            self.union_by_storage_key(id);
        }
        let r = self.classes.find(id);
        self.classes.add_member(r, id);
        Ok(())
    }

    fn union_by_storage_key(&mut self, id: NodeId) {
        let Some(key) = self
            .facts
            .graph
            .node(id)
            .meta
            .as_ref()
            .and_then(|m| m.storage)
        else {
            return;
        };
        if let Some(first) = self.classes.first_with_storage_key(key, id) {
            let r = self.classes.union(id, first);
            if !matches!(self.facts.roles[id.idx()], Role::View { .. }) {
                self.versions.set(id, self.classes.latest(r));
            }
        }
    }

    fn apply_bind(&mut self, id: NodeId, af: NodeId, bind: Option<Bind>) {
        match bind {
            Some(Bind::Buffer { node, event }) => {
                self.classes.union(id, node);
                self.versions.set(id, event);
                self.links.same_as(id, node);
            }
            Some(Bind::Alias { node, event }) => {
                self.classes.union(id, node);
                self.versions.set(id, event);
            }
            Some(Bind::Clone { key, of }) => match self.bindings.bind_clone(id, key, of) {
                Some(rep) => {
                    self.classes.union(id, rep);
                    self.links.same_as(id, rep);
                }
                None => self.links.set_root(id),
            },
            Some(Bind::Tensor) => {
                self.classes.union(id, af);
                let r = self.classes.find(id);
                self.versions.set(id, self.classes.latest(r));
                self.links.set_root(id);
            }
            Some(Bind::Fresh | Bind::List(_)) | None => self.links.set_root(id),
        }
    }

    fn plan_af(&mut self, id: NodeId) -> Result<()> {
        // `Role::AutoFunctionalized` is given to nodes of either form only:
        // another target here is the engine's own error, not a form to guess.
        let Some(form) = Form::of_kind(self.facts.graph.target_of(id).kind) else {
            return Err(crate::Error::Internal {
                node: Some(id.0),
                detail: "an auto_functionalized role on a node of neither form".into(),
            });
        };
        let op_name = match self.facts.graph.node(id).args.first() {
            Some(crate::ir::Value::Target(t)) => self.facts.graph.targets[t.idx()].name.clone(),
            _ => "<unknown>".into(),
        };
        let (rule, outcome) = match crate::forms::parse(self.facts.graph, id) {
            _ if self.facts.options.leaves(&op_name) => (
                crate::forms::NO_RULE,
                Outcome::Left(LeftReason::Requested {
                    op: op_name.clone(),
                }),
            ),
            Some((name, Ok(FormCall::Mutation(call)))) => {
                (name, self.rewrite_mutation(&call, name)?)
            }
            Some((name, Ok(FormCall::Out(call)))) => {
                (name, self.emitter().rewrite_out_call(&call, name))
            }
            Some((name, Err(reason))) => (name, Outcome::Left(LeftReason::Form(reason))),
            None => (crate::forms::NO_RULE, Outcome::Left(LeftReason::NoForm)),
        };
        if let Outcome::Left(reason) = outcome {
            let decision = NodeReport {
                reason: Some(reason.note(self.facts.graph)),
                cause: Some(reason.cause()),
                ..self
                    .facts
                    .node_report(id, op_name, form, rule, Action::Left)
            };
            self.plan.decide(decision);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{only_decision, plan_of};
    use super::*;
    use crate::analysis::test_graph::{n, neg, B};
    use crate::ir::Value;

    #[test]
    fn a_node_its_form_cannot_read_is_left_with_the_reason_and_no_edit() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let af = b.af(
            "af",
            true,
            &crate::analysis::test_graph::scale_(),
            vec![
                ("s", Value::Float(2.0)),
                ("_x_base_index", Value::Int(0)),
                ("_x_new_info", Value::Int(1)),
                ("_all_bases", Value::List(vec![n(t)])),
            ],
        );
        let g = b.output(&[af]);
        let p = plan_of(&g);
        let d = only_decision(&p);
        assert_eq!(d.action, Action::Left);
        assert_eq!(
            (d.node.as_str(), d.rule, d.form),
            ("af", "reinplace_v2", Form::V2)
        );
        assert_eq!(d.op, "m::scale_.default");
        assert!(d.reason.as_deref().unwrap().contains("newer torch"));
        assert!(p.edits.is_empty());
    }

    #[test]
    fn a_result_of_a_planned_call_is_its_buffer_at_a_newer_version() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let before = b.call("before", &neg(), vec![n(t)]);
        let af = b.scale_v2("af", t);
        let nt = b.getitem("nt", af, 1);
        let g = b.output(&[before, nt]);
        let mut cx = Context::new(&g);
        cx.run().unwrap();
        assert_eq!(cx.classes.find(nt), cx.classes.find(t));
        assert!(cx.versions.of(nt) > cx.versions.of(t));
        assert_eq!(cx.model().geometry(nt), cx.model().geometry(t));
        // The call's own slot is not a value: only its getitems are bound.
        assert_ne!(cx.classes.find(af), cx.classes.find(t));
    }

    #[test]
    fn a_result_bound_to_a_clone_is_not_the_buffer() {
        // `x` is an input the graph never writes back: the call gets a clone.
        let mut b = B::new();
        let x = b.input("x");
        let af = b.scale_v2("af", x);
        let nx = b.getitem("nx", af, 1);
        let g = b.output(&[nx]);
        let mut cx = Context::new(&g);
        cx.run().unwrap();
        assert_ne!(cx.classes.find(nx), cx.classes.find(x));
        assert_eq!(cx.bindings.same_layout(nx), Some(x));
    }
}
