//! The one error type of the crate.
//!
//! Every failure the engine can report is a variant here, carrying the node and
//! operator it concerns where there is one. Each variant has one
//! [`ErrorKind`], its stable name; the binding layer maps each kind to exactly
//! one Python exception class and passes the node, operator and byte offset
//! on as attributes (`rust/python/errors.rs`).

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
    #[error(
        "unsupported .fxir format version {found} (this build reads versions 1 to {supported}; \
         a file of a newer version needs a newer fxrewrite)"
    )]
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
    /// A plan failed its own consistency check, or the binding could not
    /// carry out its part: a bug in fxrewrite, never the user's fault. The
    /// graph is left untouched.
    #[error("internal error{}: {detail} (please report this)", .node.map(|n| format!(" at node {n}")).unwrap_or_default())]
    Internal {
        /// The node whose rewrite failed, when one did.
        node: Option<u32>,
        /// What went wrong.
        detail: String,
    },
}

/// The kind of an [`Error`]: one per variant, except that both ways a
/// `.fxir` file cannot be read are kinds of their own ([`ErrorKind::Decode`],
/// [`ErrorKind::Version`]). Each kind is one Python exception class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// [`Error::InvalidGraph`].
    InvalidGraph,
    /// [`Error::Decode`].
    Decode,
    /// [`Error::Version`].
    Version,
    /// [`Error::Unsupported`].
    Unsupported,
    /// [`Error::Internal`].
    Internal,
}

impl ErrorKind {
    /// Every kind.
    pub const ALL: [ErrorKind; 5] = [
        ErrorKind::InvalidGraph,
        ErrorKind::Decode,
        ErrorKind::Version,
        ErrorKind::Unsupported,
        ErrorKind::Internal,
    ];

    /// The stable, machine-readable name (the Python exception's `kind`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidGraph => "invalid_graph",
            ErrorKind::Decode => "decode",
            ErrorKind::Version => "version",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Internal => "internal",
        }
    }
}

/// The node an [`Error`] concerns, as the variant knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorNode<'a> {
    /// Its index in the graph.
    Index(u32),
    /// Its name.
    Name(&'a str),
}

impl Error {
    /// The variant's kind.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidGraph { .. } => ErrorKind::InvalidGraph,
            Error::Decode { .. } => ErrorKind::Decode,
            Error::Version { .. } => ErrorKind::Version,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::Internal { .. } => ErrorKind::Internal,
        }
    }

    /// The node the error concerns, when there is one.
    #[must_use]
    pub fn node(&self) -> Option<ErrorNode<'_>> {
        match self {
            Error::InvalidGraph { node, .. } | Error::Internal { node, .. } => {
                node.map(ErrorNode::Index)
            }
            Error::Unsupported { node, .. } => Some(ErrorNode::Name(node)),
            Error::Decode { .. } | Error::Version { .. } => None,
        }
    }

    /// The mutating operator the error concerns, when there is one.
    #[must_use]
    pub fn op(&self) -> Option<&str> {
        match self {
            Error::Unsupported { op, .. } => Some(op),
            _ => None,
        }
    }

    /// The byte offset in a `.fxir` file where reading failed, when known.
    #[must_use]
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::Decode { offset, .. } => Some(*offset),
            _ => None,
        }
    }

    /// Shorthand for an [`Error::Internal`] that concerns no one node (the
    /// binding's own failures).
    #[cfg(any(test, feature = "python"))]
    pub(crate) fn internal(detail: impl Into<String>) -> Self {
        Error::Internal {
            node: None,
            detail: detail.into(),
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
                node: Some(2),
                detail: "d".into(),
            },
        ];
        let kinds: Vec<ErrorKind> = errs.iter().map(Error::kind).collect();
        assert_eq!(kinds, ErrorKind::ALL);
        let names: std::collections::BTreeSet<_> = kinds.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), errs.len());
        assert!(errs[0].to_string().contains("at node 3:"));
        assert!(errs[3]
            .to_string()
            .contains("auto_functionalized_1 (a::b): r"));
        assert!(errs[4].to_string().contains("at node 2:"));
    }

    #[test]
    fn node_op_and_offset_are_the_variants_own() {
        let unsupported = Error::Unsupported {
            node: "af".into(),
            op: "a::b".into(),
            reason: "r".into(),
        };
        assert_eq!(unsupported.node(), Some(ErrorNode::Name("af")));
        assert_eq!(unsupported.op(), Some("a::b"));
        assert_eq!(unsupported.offset(), None);
        let decode = Error::Decode {
            offset: 7,
            detail: "x".into(),
        };
        assert_eq!(
            (decode.node(), decode.op(), decode.offset()),
            (None, None, Some(7))
        );
        assert_eq!(Error::invalid(3, "x").node(), Some(ErrorNode::Index(3)));
        let internal = Error::internal("d");
        assert_eq!(internal.node(), None);
        assert_eq!(
            internal.to_string(),
            "internal error: d (please report this)"
        );
    }
}
