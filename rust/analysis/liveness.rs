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
