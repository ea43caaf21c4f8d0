//! The engine's output: a [`Plan`] of ordered graph edits and a [`Report`]
//! that says what was rewritten, what was cloned and why, and what was left
//! alone and why.
//!
//! A plan refers to the original graph's nodes by [`NodeId`] and to nodes it
//! creates by [`NewId`]. Applying it in order is all the caller has to do:
//! replacements are already resolved (a replacement value is never itself
//! replaced), and every erased node has no users left once the edits before it
//! are applied.

pub mod apply;

use serde::{Deserialize, Serialize};

use crate::ir::{NodeId, TargetId};

/// Index of a node created by the plan, in creation order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct NewId(pub u32);

/// A value the plan uses: an original node or a node the plan created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum ValueRef {
    /// A node of the original graph.
    Old(NodeId),
    /// A node created by an earlier [`Edit::Insert`].
    New(NewId),
}

/// The callable of a node the plan inserts.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Callee {
    /// An interned target of the graph (the mutating operator itself).
    Target(TargetId),
    /// An `aten` overload by qualified name (`aten::clone.default`).
    Aten(&'static str),
    /// `operator.getitem`.
    Getitem,
    /// A Python `operator` function on integers or SymInts (`add`, `sub`,
    /// `mul`): run-time sizes of symbolic shapes.
    Operator(&'static str),
}

/// An argument of an inserted node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum PlanArg {
    /// A node value.
    Ref(ValueRef),
    /// The Python object held by keyword argument `key` of original node
    /// `node`, passed through unchanged (dtypes, devices, SymInts, lists).
    FromKwarg {
        /// The original node.
        node: NodeId,
        /// The keyword.
        key: String,
    },
    /// The Python object held by positional argument `index` of original
    /// node `node`, passed through unchanged (a view's dtype, a constant).
    FromArg {
        /// The original node.
        node: NodeId,
        /// The argument's position.
        index: usize,
    },
    /// An integer.
    Int(i64),
    /// A list of integers.
    IntList(Vec<i64>),
    /// `None`.
    None,
    /// A list of arguments.
    List(Vec<PlanArg>),
}

/// Where an inserted node's `meta['val']` comes from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum MetaSource {
    /// Element `index` of the auto_functionalized node's `meta['val']`
    /// (`None` index: the whole value).
    AfOutput {
        /// The auto_functionalized node.
        node: NodeId,
        /// Tuple index, or `None` for the value itself.
        index: Option<usize>,
    },
    /// A slice `start..end` of the auto_functionalized node's `meta['val']`
    /// tuple, as a tuple (an operator with several returns).
    AfOutputs {
        /// The auto_functionalized node.
        node: NodeId,
        /// First index.
        start: usize,
        /// One past the last index.
        end: usize,
    },
    /// Run the callee on the inputs' fake values (views, clones, buffers).
    Compute,
    /// The operator returns nothing.
    Nothing,
}

/// One edit of the graph.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Edit {
    /// Move an existing node to just before `before` (a reader of an old value
    /// moved ahead of the mutation instead of cloning).
    Move {
        /// The node moved.
        node: NodeId,
        /// The node it now precedes.
        before: NodeId,
    },
    /// Create a node just before `before`.
    Insert {
        /// The id later edits use for it.
        id: NewId,
        /// The node it precedes.
        before: NodeId,
        /// What it calls.
        callee: Callee,
        /// Positional arguments.
        args: Vec<PlanArg>,
        /// Keyword arguments.
        kwargs: Vec<(String, PlanArg)>,
        /// Where its `meta['val']` comes from.
        meta: MetaSource,
        /// The original node whose `stack_trace` it inherits.
        origin: NodeId,
    },
    /// Replace every use of `node` with `with`.
    Replace {
        /// The node whose uses move.
        node: NodeId,
        /// The value they move to (never itself replaced).
        with: ValueRef,
    },
    /// Erase a node that has no users left.
    Erase {
        /// The node erased.
        node: NodeId,
    },
    /// Make Inductor compute `node` in a buffer of its own where it stands,
    /// instead of lazily inside the kernels of its users (which may run
    /// after a mutation it must precede). On a live graph this sets
    /// `meta["inductor_realize_to_strides"]`, on the node itself or, for a
    /// node Inductor replaces before lowering (a view scatter), on an
    /// `aten.alias` of it the applier inserts just after it
    /// (`apply::REPLACED_BEFORE_LOWERING`); it changes no value.
    Realize {
        /// The node to materialise.
        node: NodeId,
    },
    /// [`Edit::Realize`] for a node the plan inserted (a plain `clone` given
    /// to a call in several slots: Inductor, given one lazy value in two
    /// written slots, computes it into two buffers).
    RealizeNew {
        /// The inserted node to materialise.
        id: NewId,
    },
}

/// What happened to one auto_functionalized node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Rewritten into an in-place call with no copy.
    Reinplaced,
    /// Rewritten, with a clone of at least one written argument.
    Cloned,
    /// Left untouched for Inductor's own passes.
    Left,
}

impl Action {
    /// Every action, in declaration order.
    pub const ALL: [Action; 3] = [Action::Reinplaced, Action::Cloned, Action::Left];

    /// The name reports use (`"reinplaced"`), as serialized.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Reinplaced => "reinplaced",
            Action::Cloned => "cloned",
            Action::Left => "left",
        }
    }
}

/// Why a node was left alone, in the kinds a caller acts on differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeftCause {
    /// The engine cannot rewrite it safely; the reason says why.
    Unsupported,
    /// Its arguments share memory and no record of the pre pass says whether
    /// the program shared it: `fxrewrite.install()` records it.
    UnattributedSharing,
    /// The caller asked for its operator to be left to Inductor
    /// (`Pass(leave=...)`, `FXREWRITE_LEAVE`): not an error in strict mode.
    Requested,
}

impl LeftCause {
    /// Every cause, in declaration order.
    pub const ALL: [LeftCause; 3] = [
        LeftCause::Unsupported,
        LeftCause::UnattributedSharing,
        LeftCause::Requested,
    ];

    /// The name reports use (`"unattributed_sharing"`), as serialized.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            LeftCause::Unsupported => "unsupported",
            LeftCause::UnattributedSharing => "unattributed_sharing",
            LeftCause::Requested => "requested",
        }
    }
}

/// The names a report's enumerations take, by field (`form`, `action`,
/// `cause`): what `fxrewrite.report`'s `Literal` types must list
/// (`_core.REPORT_VOCABULARY`, checked by `tests/test_report_vocabulary.py`).
#[must_use]
pub fn report_vocabulary() -> [(&'static str, Vec<&'static str>); 3] {
    [
        (
            "form",
            crate::forms::Form::ALL.iter().map(|f| f.as_str()).collect(),
        ),
        ("action", Action::ALL.iter().map(|a| a.as_str()).collect()),
        ("cause", LeftCause::ALL.iter().map(|c| c.as_str()).collect()),
    ]
}

/// One clone the plan keeps, and why it is needed.
///
/// The fields are declared here only: Python's `CloneNote` (its
/// constructor, attributes, `to_dict`, pickling) is made from this type's
/// serde names and order (`rust/python/report.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloneNote {
    /// The written argument (`out`, `xs[1]`, or a v2 base `_all_bases[0]`).
    pub arg: String,
    /// Why the buffer cannot be written in place.
    pub reason: String,
    /// The node that reads the old value, when that is the reason.
    pub reader: Option<String>,
    /// The reader's source line from `meta['stack_trace']`, when known.
    pub reader_source: Option<String>,
    /// Bytes copied by the clone, when the shape is static.
    pub bytes: Option<u64>,
    /// Where the shape is symbolic: the bytes as an expression of the
    /// graph's symbols (`"256*s0"`). The engine sees only static sizes, so
    /// only the pass fills it, from the live graph; never in a saved plan.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_expr: Option<String>,
    /// [`Self::bytes_expr`] at the sizes the graph was traced with (its
    /// shape environment's hints), filled with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_at_trace: Option<u64>,
}

/// The decision for one auto_functionalized node.
///
/// Declared here only, like [`CloneNote`]: Python's `Decision` is made from
/// this type's serde names and order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeReport {
    /// The node's name.
    pub node: String,
    /// The mutating operator (`mylib::rms_norm.default`).
    pub op: String,
    /// The node's form (`"v1"` or `"v2"` in JSON).
    pub form: crate::forms::Form,
    /// The name of the rule that read it (`crate::forms::Rule`), or `none`
    /// when none did or the caller asked to leave its operator.
    #[serde(deserialize_with = "crate::forms::deserialize_rule")]
    pub rule: crate::forms::RuleName,
    /// The outcome.
    pub action: Action,
    /// Readers of old values moved before the call instead of cloning.
    #[serde(default)]
    pub moved: Vec<String>,
    /// Clones kept.
    #[serde(default)]
    pub clones: Vec<CloneNote>,
    /// Scatter nodes made unnecessary (v1 write-back elimination).
    #[serde(default)]
    pub scatters_removed: usize,
    /// Why the node was left alone, for [`Action::Left`].
    pub reason: Option<String>,
    /// The kind of that reason, for [`Action::Left`].
    pub cause: Option<LeftCause>,
    /// The node's own source line, when known.
    pub source: Option<String>,
}

/// Everything the engine decided about one graph.
///
/// Declared here only: `Plan.report`'s keys in Python are these fields, in
/// this order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Nodes in the graph.
    pub nodes: usize,
    /// One entry per auto_functionalized node, in graph order.
    pub decisions: Vec<NodeReport>,
    /// Input write-backs (`copy_(input, value)`) that became self-copies and
    /// were removed.
    pub writebacks_removed: usize,
    /// Nodes marked to be computed where they stand ([`Edit::Realize`],
    /// [`Edit::RealizeNew`]): readers of memory an in-place call after them
    /// writes, computations an in-place call writes through a view, and
    /// plain clones a call gets.
    pub realized: usize,
}

impl Report {
    /// Number of nodes left alone.
    #[must_use]
    pub fn left(&self) -> usize {
        self.decisions
            .iter()
            .filter(|d| d.action == Action::Left)
            .count()
    }

    /// The error strict mode raises: the first node left alone, if any,
    /// other than those the caller asked to leave.
    #[must_use]
    pub fn strict_error(&self) -> Option<crate::Error> {
        self.decisions
            .iter()
            .find(|d| d.action == Action::Left && d.cause != Some(LeftCause::Requested))
            .map(|d| crate::Error::Unsupported {
                node: d.node.clone(),
                op: d.op.clone(),
                reason: d.reason.clone().unwrap_or_default(),
            })
    }

    /// Number of clones kept.
    #[must_use]
    pub fn clones(&self) -> usize {
        self.decisions.iter().map(|d| d.clones.len()).sum()
    }
}

/// The edits for one graph plus the report explaining them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Plan {
    /// Edits, to be applied in order.
    pub edits: Vec<Edit>,
    /// Number of nodes the edits create.
    pub new_nodes: u32,
    /// What was decided and why.
    pub report: Report,
}

impl Plan {
    /// The nodes the plan marks to be computed where they stand
    /// ([`Edit::Realize`]), in plan order.
    pub fn realized_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.edits.iter().filter_map(|e| match e {
            Edit::Realize { node } => Some(*node),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forms::Form;

    /// The names `as_str` gives are the serialized ones, for every variant
    /// (`ALL` lists them all: a new variant fails to compile in `as_str`
    /// until named, and here until listed).
    #[test]
    fn the_vocabulary_is_what_reports_serialize() {
        let json = |v: serde_json::Value| v.as_str().map(str::to_owned);
        for f in Form::ALL {
            assert_eq!(
                json(serde_json::to_value(f).unwrap()).as_deref(),
                Some(f.as_str())
            );
        }
        for a in Action::ALL {
            assert_eq!(
                json(serde_json::to_value(a).unwrap()).as_deref(),
                Some(a.as_str())
            );
        }
        for c in LeftCause::ALL {
            assert_eq!(
                json(serde_json::to_value(c).unwrap()).as_deref(),
                Some(c.as_str())
            );
        }
        // And reads back each name it writes, refusing any other.
        fn read<T: serde::de::DeserializeOwned>(name: &str) -> Option<T> {
            serde_json::from_value(serde_json::Value::String(name.to_string())).ok()
        }
        for (name, action) in ["reinplaced", "cloned", "left"]
            .into_iter()
            .zip(Action::ALL)
        {
            assert_eq!(read(name), Some(action));
        }
        for c in LeftCause::ALL {
            assert_eq!(read(c.as_str()), Some(c));
        }
        for f in Form::ALL {
            assert_eq!(read(f.as_str()), Some(f));
        }
        assert_eq!(read::<Form>("v3"), None);
        assert_eq!(read::<Action>("Left"), None);
        assert_eq!(read::<LeftCause>(""), None);
        let vocabulary = report_vocabulary();
        assert_eq!(vocabulary[1].1, ["reinplaced", "cloned", "left"]);
        assert_eq!(vocabulary[2].1.len(), LeftCause::ALL.len());
    }

    /// A report's entries read back from the JSON the engine writes (the
    /// Python constructors read their arguments the same way), and a name
    /// no rule has is refused.
    #[test]
    fn entries_read_back_what_they_write() {
        let note = CloneNote {
            arg: "xs[1]".into(),
            reason: "read later".into(),
            reader: Some("mul".into()),
            reader_source: None,
            bytes: Some(64),
            bytes_expr: None,
            bytes_at_trace: None,
        };
        let decision = NodeReport {
            node: "auto_functionalized".into(),
            op: "ns::op.default".into(),
            form: Form::V2,
            rule: crate::forms::NO_RULE,
            action: Action::Cloned,
            moved: vec!["add".into()],
            clones: vec![note],
            scatters_removed: 1,
            reason: None,
            cause: Some(LeftCause::Requested),
            source: Some("m.py:3".into()),
        };
        let json = serde_json::to_string(&decision).unwrap();
        assert_eq!(serde_json::from_str::<NodeReport>(&json).unwrap(), decision);
        let other_rule = json.replace("\"rule\":\"none\"", "\"rule\":\"reinplace_v3\"");
        assert_ne!(other_rule, json);
        let error = serde_json::from_str::<NodeReport>(&other_rule).unwrap_err();
        assert!(error.to_string().contains("reinplace_v3"), "{error}");
        let unknown = json.replacen('{', "{\"colour\":1,", 1);
        assert!(serde_json::from_str::<NodeReport>(&unknown).is_err());
    }
}
