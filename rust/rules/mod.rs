//! Rewrite rules: one file per rule, all registered in [`registry`].
//!
//! A rule is a value with a stable name (it appears in reports), a matcher
//! that says whether a node is its business, and a planner that turns the node
//! into edits through the shared [`Context`](crate::engine::Context). Adding a
//! rule touches its own file and the list below, nothing else.

pub mod call;
pub mod out_buffers_v2;
pub mod reinplace_v1;
pub mod reinplace_v2;

use crate::engine::Context;
use crate::ir::{Graph, NodeId};

/// What a rule's planner did with a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The node was rewritten; the context holds its edits and report.
    Rewritten,
    /// The node is left untouched, with the reason (reported, and an error in
    /// strict mode).
    Left(String),
}

/// A rewrite rule.
pub trait Rule: Sync {
    /// Stable name, used in reports.
    fn name(&self) -> &'static str;
    /// True when this rule handles `node`.
    fn matches(&self, graph: &Graph, node: NodeId) -> bool;
    /// Plans the rewrite of `node`. On [`Outcome::Left`] the rule has emitted
    /// no edits.
    fn plan(&self, cx: &mut Context<'_>, node: NodeId) -> Outcome;
}

/// Every rule, in the order they are tried. The first that matches a node
/// plans it.
#[must_use]
pub fn registry() -> &'static [&'static dyn Rule] {
    &[
        &out_buffers_v2::OutBuffersV2,
        &reinplace_v2::ReinplaceV2,
        &reinplace_v1::ReinplaceV1,
    ]
}

/// The names of all registered rules, for cache keys and `--help`.
#[must_use]
pub fn rule_names() -> Vec<&'static str> {
    registry().iter().map(|r| r.name()).collect()
}
