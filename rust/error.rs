//! The one error type of the crate.
//!
//! Every failure the engine can report is a variant here, carrying the node and
//! operator it concerns where there is one. The binding layer maps each
//! variant to exactly one Python exception class (`rust/python/errors.rs`).

use thiserror::Error;

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in fxrewrite's Rust core.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// The graph breaks an IR invariant (operand after its user, unknown
    /// target index, missing output node, ...).
    #[error("invalid graph{}: {detail}", .node.map(|n| format!(" at node {n}")).unwrap_or_default())]
    InvalidGraph {
        /// The offending node index, when the problem is local to one node.
        node: Option<u32>,
        /// What is wrong.
        detail: String,
    },
    /// A `.fxir` file could not be decoded (truncated, corrupt, hostile).
    #[error("unreadable .fxir data at byte {offset}: {detail}")]
    Decode {
        /// Byte offset where decoding failed.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// A `.fxir` file of a format version this build does not read.
    #[error("unsupported .fxir format version {found} (this build reads version {supported})")]
    Version {
        /// The version found in the header.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// A node that strict mode requires to be rewritten could not be.
    #[error("cannot rewrite {node} ({op}): {reason}")]
    Unsupported {
        /// The node's name.
        node: String,
        /// The mutating operator.
        op: String,
        /// Why the node is left alone.
        reason: String,
    },
    /// A plan failed its own consistency check: a bug in fxrewrite, never the
    /// user's fault. The graph is left untouched.
    #[error("internal error at node {node}: {detail} (please report this)")]
    Internal {
        /// The node whose rewrite failed.
        node: u32,
        /// What went wrong.
        detail: String,
    },
}

impl Error {
    /// A stable, machine-readable name for the variant.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidGraph { .. } => "invalid_graph",
            Error::Decode { .. } => "decode",
            Error::Version { .. } => "version",
            Error::Unsupported { .. } => "unsupported",
            Error::Internal { .. } => "internal",
        }
    }

    /// Shorthand for an [`Error::InvalidGraph`] about one node.
    pub(crate) fn invalid(node: usize, detail: impl Into<String>) -> Self {
        Error::InvalidGraph {
            node: u32::try_from(node).ok(),
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_distinct_and_messages_name_the_node() {
        let errs = [
            Error::invalid(3, "x"),
            Error::Decode {
                offset: 1,
                detail: "x".into(),
            },
            Error::Version {
                found: 9,
                supported: 1,
            },
            Error::Unsupported {
                node: "auto_functionalized_1".into(),
                op: "a::b".into(),
                reason: "r".into(),
            },
            Error::Internal {
                node: 2,
                detail: "d".into(),
            },
        ];
        let kinds: std::collections::BTreeSet<_> = errs.iter().map(Error::kind).collect();
        assert_eq!(kinds.len(), errs.len());
        assert!(errs[0].to_string().contains("at node 3:"));
        assert!(errs[3]
            .to_string()
            .contains("auto_functionalized_1 (a::b): r"));
    }
}
