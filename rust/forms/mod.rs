//! The forms an auto_functionalized node comes in, one parser per file, all
//! registered in [`registry`].
//!
//! A form is a value with a stable name (it appears in reports and in the
//! cache key) and a parser: a pure function from a node to a typed call
//! description ([`FormCall`]), or the reason the node cannot be read. A
//! parser answers `None` for a node of another form, so exactly one form
//! claims any node whatever the registry's order. Forms know nothing of the
//! engine: the engine plans what they parse. Adding a form touches its own
//! file and the list below, nothing else.

pub mod call;
pub mod out_buffers_v2;
pub mod reinplace_v1;
pub mod reinplace_v2;

use crate::ir::{Graph, NodeId};
pub use call::FormCall;

/// One form of auto_functionalized node.
pub trait Form: Sync {
    /// Stable name, used in reports.
    fn name(&self) -> &'static str;
    /// `None` when `node` is not of this form; otherwise the parsed call, or
    /// why it cannot be rewritten (the node is then left to Inductor).
    fn parse(&self, graph: &Graph, node: NodeId) -> Option<Result<FormCall, String>>;
}

/// Every form.
#[must_use]
pub fn registry() -> &'static [&'static dyn Form] {
    &[
        &out_buffers_v2::OutBuffersV2,
        &reinplace_v2::ReinplaceV2,
        &reinplace_v1::ReinplaceV1,
    ]
}

/// The names of all registered forms, for cache keys and `--help`.
#[must_use]
pub fn form_names() -> Vec<&'static str> {
    registry().iter().map(|f| f.name()).collect()
}

/// The form that claims `node` and what it parsed, or `None` when no form
/// does (not an auto_functionalized node of a known kind).
#[must_use]
pub fn parse(graph: &Graph, node: NodeId) -> Option<(&'static str, Result<FormCall, String>)> {
    let mut found = registry()
        .iter()
        .filter_map(|f| f.parse(graph, node).map(|r| (f.name(), r)));
    let first = found.next();
    debug_assert!(found.next().is_none(), "two forms claim one node");
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_distinct() {
        let names = form_names();
        assert_eq!(names, ["out_buffers_v2", "reinplace_v2", "reinplace_v1"]);
    }
}
