//! The reasons a node is left to Inductor, as data: the engine's checks
//! return a [`LeftReason`], and the text the report gives it is written once,
//! in [`LeftReason::note`] (as [`super::clone_reason::CloneReason::note`] does for
//! clones). Its [`LeftCause`] follows from it ([`LeftReason::cause`]).

use crate::ir::{Graph, NodeId};
use crate::plan::LeftCause;

/// Why a call whose slots share memory is left when no record says which
/// sharing the program had.
pub(super) const NO_RECORD: &str = "fxrewrite cannot tell whether the program passed them so (then the \
kernel must see the sharing) or Inductor's remove_noop_ops made it by deleting a clone (then it must \
not; pytorch#198031), and the pre pass recorded nothing for this call; left to Inductor. \
`fxrewrite.install()` installs the pre pass that records it";

/// Why a node is left untouched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeftReason {
    /// The caller asked for operator `op` to be left
    /// (`Pass(leave=...)`, `FXREWRITE_LEAVE`).
    Requested {
        /// The operator, `ns::name.overload`.
        op: String,
    },
    /// The node's form could not read it; the form's own text.
    Form(String),
    /// No form reads this node.
    NoForm,
    /// `user` uses an out= call's result in a way the engine does not follow.
    UnexpectedResultUse {
        /// The user.
        user: NodeId,
    },
    /// `user` orders itself after a call that writes no buffer.
    OrdersAfterNoWrite {
        /// The `control_deps` node.
        user: NodeId,
    },
    /// `user` uses the auto_functionalized result itself, not its items.
    ResultUsedDirectly {
        /// The user.
        user: NodeId,
    },
    /// A getitem of the result reads index `index`, past its items.
    GetitemOutOfRange {
        /// The index read.
        index: usize,
    },
    /// `user` uses a written list itself, not its items.
    ListUsedDirectly {
        /// The user.
        user: NodeId,
    },
    /// Written argument `arg` needs a clone with its exact layout, which
    /// cannot be made, for reason `why`.
    NoExactClone {
        /// The written argument's label.
        arg: String,
        /// Why the clone cannot be made (`unit_clone.rs`, `layout.rs`).
        why: String,
    },
    /// Arguments `first` and `second` share memory in the graph as it
    /// arrives, and no record of the pre pass attributes the sharing.
    NoRecord {
        /// The first slot's label.
        first: String,
        /// The second slot's label.
        second: String,
    },
    /// The pre pass's record of alias groups does not name argument `arg`.
    UnrecordedArgument {
        /// The argument's label.
        arg: String,
    },
    /// The record puts the written arguments cut from `base` in different
    /// storages.
    BaseInSeveralGroups {
        /// The base, named by its written arguments.
        base: String,
    },
    /// Buffer `base` has no written argument.
    NoWrittenArgument {
        /// The buffer's label.
        base: String,
    },
    /// The record puts `first` and `second` in one group though they lie on
    /// different storages in the graph as it arrives.
    ImpossibleRecord {
        /// The first slot's label.
        first: String,
        /// The second slot's label.
        second: String,
    },
}

impl LeftReason {
    /// The kind of reason, as the report gives it.
    #[must_use]
    pub fn cause(&self) -> LeftCause {
        match self {
            Self::Requested { .. } => LeftCause::Requested,
            Self::NoRecord { .. }
            | Self::UnrecordedArgument { .. }
            | Self::BaseInSeveralGroups { .. }
            | Self::NoWrittenArgument { .. }
            | Self::ImpossibleRecord { .. } => LeftCause::UnattributedSharing,
            Self::Form(_)
            | Self::NoForm
            | Self::UnexpectedResultUse { .. }
            | Self::OrdersAfterNoWrite { .. }
            | Self::ResultUsedDirectly { .. }
            | Self::GetitemOutOfRange { .. }
            | Self::ListUsedDirectly { .. }
            | Self::NoExactClone { .. } => LeftCause::Unsupported,
        }
    }

    /// The report's text for this reason (node names read from `graph`).
    #[must_use]
    pub fn note(&self, graph: &Graph) -> String {
        let name = |n: NodeId| graph.node(n).name.as_str();
        match self {
            Self::Requested { op } => format!(
                "{op} is left to Inductor on request (Pass(leave=...) or FXREWRITE_LEAVE)"
            ),
            Self::Form(text) => text.clone(),
            Self::NoForm => "no form reads this node".to_string(),
            Self::UnexpectedResultUse { user } => format!(
                "node `{}` uses the result in an unexpected way",
                name(*user)
            ),
            Self::OrdersAfterNoWrite { user } => format!(
                "node `{}` orders itself after a call that writes no buffer",
                name(*user)
            ),
            Self::ResultUsedDirectly { user } => format!(
                "node `{}` uses the auto_functionalized result directly",
                name(*user)
            ),
            Self::GetitemOutOfRange { index } => format!("getitem index {index} out of range"),
            Self::ListUsedDirectly { user } => {
                format!("node `{}` uses a written list directly", name(*user))
            }
            Self::NoExactClone { arg, why } => {
                format!("{arg} needs a clone with its exact layout, but {why}")
            }
            Self::NoRecord { first, second } => format!(
                "arguments `{first}` and `{second}` share memory in the graph as it arrives; {NO_RECORD}"
            ),
            Self::UnrecordedArgument { arg } => format!(
                "the pre pass's record of alias groups does not name argument `{arg}`; left to Inductor"
            ),
            Self::BaseInSeveralGroups { base } => format!(
                "the pre pass recorded the arguments cut from {base} in different storages; left to Inductor"
            ),
            Self::NoWrittenArgument { base } => format!("{base} has no written argument"),
            Self::ImpossibleRecord { first, second } => format!(
                "the record of alias groups puts `{first}` and `{second}` in one group, but they lie \
                 on different storages in the graph as it arrives: not a record the pre pass \
                 makes; left to Inductor"
            ),
        }
    }
}
