//! Who reads a value's memory, and when the last read happens.
//!
//! A value is read by every user that is not a view of it; the readers of a
//! view are readers of the viewed value too, because they see its memory.
//! Users that only look at metadata (`sym_size`) and the destination operand
//! of an input write-back do not read.

use super::alias::Role;
use super::uses::Uses;
use crate::ir::NodeId;

/// True when `user` passes `value`'s memory on as (part of) its own value
/// instead of, or as well as, reading it.
#[must_use]
pub fn forwards_memory(roles: &[Role], user: NodeId, value: NodeId) -> bool {
    match &roles[user.idx()] {
        Role::View { src, .. } => *src == value,
        Role::Opaque => true,
        _ => false,
    }
}

/// True when `user` reads the contents of `value`.
#[must_use]
pub fn reads(roles: &[Role], user: NodeId, value: NodeId) -> bool {
    match &roles[user.idx()] {
        Role::View { src, .. } => *src != value,
        Role::MetaOnly => false,
        Role::InputWriteBack { dst, src } => *src == value || *dst != value,
        _ => true,
    }
}

/// For every node, the largest graph index of a node that reads its memory
/// directly or through views; `None` when nothing reads it. Computed in one
/// backward pass, since users always come after what they use.
#[must_use]
pub fn last_reads(roles: &[Role], uses: &Uses) -> Vec<Option<u32>> {
    let n = roles.len();
    let mut last: Vec<Option<u32>> = vec![None; n];
    for i in (0..n).rev() {
        let id = NodeId(u32::try_from(i).unwrap_or(u32::MAX));
        let mut best: Option<u32> = None;
        for &u in uses.users(id) {
            if reads(roles, u, id) {
                best = best.max(Some(u.0));
            }
            if forwards_memory(roles, u, id) {
                best = best.max(last[u.idx()]);
            }
        }
        last[i] = best;
    }
    last
}

/// Calls `f(reader, via)` for every node that reads `value`'s memory, directly
/// or through a chain of views (`via` is the node it reads). Stops early and
/// returns `false` when `f` returns `false`.
pub fn for_each_reader(
    roles: &[Role],
    uses: &Uses,
    value: NodeId,
    f: &mut impl FnMut(NodeId, NodeId) -> bool,
) -> bool {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        for &u in uses.users(v) {
            if reads(roles, u, v) && !f(u, v) {
                return false;
            }
            if forwards_memory(roles, u, v) {
                stack.push(u);
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::alias::classify;
    use crate::analysis::test_graph::{copy_, n, neg, slice, sym_size, B};
    use crate::ir::Value;

    /// `x; t = neg(x); s = t[0:2]; r = neg(s); m = sym_size(t, 0);
    /// c = copy_(x, t); output(r)`.
    fn graph() -> (crate::ir::Graph, [NodeId; 6]) {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.call("t", &neg(), vec![n(x)]);
        let int = Value::Int;
        let s = b.call("s", &slice(), vec![n(t), int(0), int(0), int(2), int(1)]);
        let r = b.call("r", &neg(), vec![n(s)]);
        let m = b.call("m", &sym_size(), vec![n(t), int(0)]);
        let c = b.call("c", &copy_(), vec![n(x), n(t)]);
        (b.output(&[r]), [x, t, s, r, m, c])
    }

    #[test]
    fn views_forward_memory_and_metadata_or_write_back_targets_are_not_reads() {
        let (g, [x, t, s, r, m, c]) = graph();
        let roles = classify(&g);
        assert!(!reads(&roles, s, t) && forwards_memory(&roles, s, t));
        assert!(reads(&roles, r, s) && !forwards_memory(&roles, r, s));
        assert!(!reads(&roles, m, t));
        // The write-back reads its source, not the input it overwrites.
        assert!(reads(&roles, c, t));
        assert!(!reads(&roles, c, x));
    }

    #[test]
    fn the_last_read_of_a_value_counts_readers_through_its_views() {
        let (g, [x, t, s, r, m, _c]) = graph();
        let roles = classify(&g);
        let uses = Uses::build(&g);
        let last = last_reads(&roles, &uses);
        // `t`: read by `r` (through `s`) and by the write-back `c` (5).
        assert_eq!(last[t.idx()], Some(5));
        // `s` is read by `r` only; `r` by the output.
        assert_eq!(last[s.idx()], Some(r.0));
        assert_eq!(last[r.idx()], Some(6));
        // `x` is read by `t`; the write-back into it is no read.
        assert_eq!(last[x.idx()], Some(t.0));
        assert_eq!(last[m.idx()], None);
    }

    #[test]
    fn readers_are_found_through_views_and_the_walk_can_stop() {
        let (g, [_x, t, s, r, _m, c]) = graph();
        let roles = classify(&g);
        let uses = Uses::build(&g);
        let mut seen = Vec::new();
        assert!(for_each_reader(&roles, &uses, t, &mut |reader, via| {
            seen.push((reader, via));
            true
        }));
        seen.sort();
        assert_eq!(seen, [(r, s), (c, t)]);
        let mut calls = 0;
        assert!(!for_each_reader(&roles, &uses, t, &mut |_, _| {
            calls += 1;
            false
        }));
        assert_eq!(calls, 1);
    }
}
