//! Holding back exactly. A call whose arguments share memory that no record
//! of the pre pass attributes cannot be rewritten (the kernel may need the
//! sharing, or the sharing may be a deleted clone's). Leaving only that call
//! is not enough: the calls around it, rewritten in place on the same
//! storage, make Inductor decompose the left call in a graph it would never
//! have seen, and the result then differs from what Inductor alone computes
//! (issue 30: 5 of 11 such programs). So the whole graph is held back: no
//! edit at all, and the compiled program is exactly the one Inductor alone
//! compiles. With `fxrewrite.install()` every call carries a record and this
//! never happens.

use crate::plan::{Action, LeftCause, Plan};

/// `plan` itself when no call was left for unattributed sharing; otherwise
/// no edit at all, every call left, each naming the call that held it back.
pub(super) fn whole_graph_if_unattributed(plan: Plan) -> Plan {
    let Some(first) = plan
        .report
        .decisions
        .iter()
        .find(|d| d.cause == Some(LeftCause::UnattributedSharing))
    else {
        return plan;
    };
    let why = format!(
        "held back with the whole graph: `{}` ({}) is left for memory its arguments share that no \
         record attributes, and rewriting the calls around it would change what Inductor computes \
         for it; `fxrewrite.install()` records the sharing",
        first.node, first.op
    );
    let mut report = plan.report;
    for d in &mut report.decisions {
        if d.action != Action::Left {
            d.action = Action::Left;
            d.moved.clear();
            d.clones.clear();
            d.scatters_removed = 0;
            d.reason = Some(why.clone());
            d.cause = Some(LeftCause::UnattributedSharing);
        }
    }
    report.writebacks_removed = 0;
    report.realized = 0;
    Plan {
        edits: Vec::new(),
        new_nodes: 0,
        report,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::plan_of;
    use crate::analysis::test_graph::B;
    use crate::plan::{Action, LeftCause};

    /// A clean v2 `scale_` of a fresh tensor, then `rms(out=t, x=t)` on
    /// another fresh `t`, with the pre pass's record `groups` (none: no
    /// record) for the second call.
    fn clean_call_then_shared(groups: Option<&[&[&str]]>) -> crate::ir::Graph {
        let mut b = B::new();
        let x = b.input("x");
        let u = b.fresh("u", x);
        let af0 = b.scale_v2("af0", u);
        let nu = b.getitem("nu", af0, 1);
        let t = b.fresh("t", x);
        let nt = b.rms_on_one_memory("af", t, groups);
        b.output(&[nu, nt])
    }

    #[test]
    fn an_unattributed_call_holds_back_every_call_of_the_graph() {
        let p = plan_of(&clean_call_then_shared(None));
        assert!(p.edits.is_empty(), "{:?}", p.edits);
        assert_eq!(p.new_nodes, 0);
        assert_eq!(p.report.decisions.len(), 2);
        for d in &p.report.decisions {
            assert_eq!(d.action, Action::Left, "{d:?}");
            assert_eq!(d.cause, Some(LeftCause::UnattributedSharing));
        }
        let clean = &p.report.decisions[0];
        let reason = clean.reason.as_deref().unwrap();
        assert!(
            reason.starts_with("held back with the whole graph: `af`"),
            "{reason}"
        );
    }

    #[test]
    fn with_a_record_both_calls_are_rewritten() {
        let p = plan_of(&clean_call_then_shared(Some(&[&["x", "out"]])));
        assert!(!p.edits.is_empty());
        for d in &p.report.decisions {
            assert_eq!(d.action, Action::Reinplaced, "{d:?}");
        }
    }
}
