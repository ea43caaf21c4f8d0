//! [`CloneReason`]: why a written buffer gets a copy instead of being
//! written in place, and the text each reason gets in the report
//! ([`CloneReason::note`], written once). The checks that find them are in
//! `checks.rs`; the sharing of a call's slots (`sharing.rs`) and the
//! emission read them. A module of its own so that none of those depend on
//! one another through it.

use crate::ir::{Graph, NodeId};
use crate::plan::CloneNote;

/// Why a written buffer gets a copy instead of being written in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum CloneReason {
    /// The written view may overlap itself (an `expand`, a zero stride):
    /// written in place, one element would be written through several.
    OverlappingView,
    /// An in-place operator already in the graph writes the same memory;
    /// the engine does not order against it.
    WrittenByAnotherOperator,
    /// The buffer is the result of an operator Inductor's reinplace pass
    /// later makes write graph input `input` in place, and the graph's
    /// write-back `copy` then overwrites that input before `reader` reads
    /// the buffer ([`super::Model::scatter_into_overwritten_input`]).
    ScatterIntoOverwrittenInput {
        scatter: NodeId,
        input: NodeId,
        copy: NodeId,
        reader: NodeId,
    },
    /// The buffer shares memory in the graph as it arrives with slot
    /// `other` (a read argument when `read`), which it did not share in the
    /// program (`sharing.rs`).
    SplitSharing { other: String, read: bool },
    /// The buffer's storage class holds several graph inputs.
    AliasesSeveralInputs,
    /// The buffer is graph input `input`, which the graph does not write
    /// back after the call: the caller's tensor must not change.
    InputNotWrittenBack { input: NodeId },
    /// `reader` reads what the call leaves in a graph input after the
    /// graph's write-back has overwritten it.
    ReadAfterWriteBack { reader: NodeId },
    /// `reader` reads the old value after the call and cannot be moved
    /// ahead of it.
    OldValueRead { reader: NodeId },
}

impl CloneReason {
    /// The report's note for written argument `arg` (of `bytes`), copied
    /// for this reason.
    pub(super) fn note(&self, graph: &Graph, arg: &str, bytes: Option<u64>) -> CloneNote {
        let name = |n: NodeId| graph.node(n).name.as_str();
        let (reason, reader) = match self {
            Self::OverlappingView => (
                "the written view may overlap itself (expand or zero stride)".to_string(),
                None,
            ),
            Self::WrittenByAnotherOperator => (
                "the buffer is also written by another in-place operator".to_string(),
                None,
            ),
            Self::ScatterIntoOverwrittenInput {
                scatter,
                input,
                copy,
                reader,
            } => (
                format!(
                    "`{}` writes graph input `{}` in place once Inductor's reinplace pass has \
                     run, and the graph's write-back `{}` overwrites that input with another \
                     value before `{}` reads this buffer",
                    name(*scatter),
                    name(*input),
                    name(*copy),
                    name(*reader)
                ),
                None,
            ),
            Self::SplitSharing { other, read } => (
                format!(
                    "{} `{other}` shares memory with it in the graph as it arrives, but did not \
                     in the program (a clone Inductor's remove_noop_ops deleted, pytorch#198031)",
                    if *read { "read argument" } else { "written" }
                ),
                None,
            ),
            Self::AliasesSeveralInputs => {
                ("the buffer aliases several graph inputs".to_string(), None)
            }
            Self::InputNotWrittenBack { input } => (
                format!(
                    "graph input `{}` is not written back by the graph, so the caller's tensor \
                     must not change",
                    name(*input)
                ),
                None,
            ),
            Self::ReadAfterWriteBack { reader } => (
                format!(
                    "after the graph writes the input back, `{}` reads the old value after the call",
                    name(*reader)
                ),
                Some(*reader),
            ),
            Self::OldValueRead { reader } => (
                format!("node `{}` reads the old value after the call", name(*reader)),
                Some(*reader),
            ),
        };
        let reader = reader.map(|r| graph.node(r));
        CloneNote {
            arg: arg.to_string(),
            reason,
            reader: reader.map(|r| r.name.clone()),
            reader_source: reader.and_then(|r| r.source.clone()),
            bytes,
            bytes_expr: None,
            bytes_at_trace: None,
        }
    }
}
