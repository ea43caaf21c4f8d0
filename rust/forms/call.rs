//! The form-independent descriptions of an auto_functionalized node that the
//! rules parse a node into, and that the engine plans from.

use crate::ir::{Graph, NodeId, OpSchema, TargetId, TargetKind, Value};

/// How a written argument is obtained from its buffer (v2 view info).
#[derive(Clone, Debug, PartialEq)]
pub enum ViewOfBuffer {
    /// The argument is the buffer itself.
    Whole,
    /// `aten.alias(buffer)`.
    Alias,
    /// `aten.slice(buffer, dim, start, end)`; the keys name the kwargs of the
    /// auto_functionalized node holding the three values.
    Slice {
        /// Keys of dim, start and end.
        keys: [String; 3],
    },
    /// `aten.as_strided(buffer, size, stride, storage_offset)`.
    AsStrided {
        /// Keys of size, stride and storage offset.
        keys: [String; 3],
    },
}

/// One memory buffer the call writes: a v1 written argument, or a v2 base.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// Label for reports (`out`, `xs[1]`, `_all_bases[0]`).
    pub label: String,
    /// The node holding the buffer's current value.
    pub node: NodeId,
}

/// One written schema argument (or list element) and the buffer it lives in.
#[derive(Clone, Debug, PartialEq)]
pub struct WrittenArg {
    /// Label for reports.
    pub label: String,
    /// Index into [`MutationCall::buffers`].
    pub buffer: usize,
    /// How the argument is cut out of the buffer.
    pub view: ViewOfBuffer,
}

/// One argument of the in-place call, in schema order.
#[derive(Clone, Debug, PartialEq)]
pub enum CallArg {
    /// Passed through from the auto_functionalized node's kwarg of that name.
    Kwarg(String),
    /// A written tensor: index into [`MutationCall::written`].
    Written(usize),
    /// A written tensor list, element by element (`None` elements stay None).
    WrittenList(Vec<Option<usize>>),
    /// `None` (an optional written argument that was not given).
    None,
}

/// What `getitem(af, i)` of the auto_functionalized node stands for.
#[derive(Clone, Debug, PartialEq)]
pub enum ResultSlot {
    /// Return `i` of the operator.
    Return(usize),
    /// The new value of a buffer (index into [`MutationCall::buffers`]).
    Buffer(usize),
    /// A v1 written list: one buffer per element (`None` for None elements).
    BufferList(Vec<Option<usize>>),
}

/// A parsed auto_functionalized node.
#[derive(Clone, Debug, PartialEq)]
pub struct MutationCall {
    /// The auto_functionalized node.
    pub node: NodeId,
    /// The mutating operator.
    pub op: TargetId,
    /// The node's form.
    pub form: super::Form,
    /// Buffers written.
    pub buffers: Vec<Buffer>,
    /// Written arguments.
    pub written: Vec<WrittenArg>,
    /// Arguments of the in-place call, in schema order, with whether each is
    /// keyword-only.
    pub call_args: Vec<(String, bool, CallArg)>,
    /// Result slots, by getitem index.
    pub results: Vec<ResultSlot>,
    /// For each operator return, the written argument it aliases
    /// (`-> Tensor(a!)`), if any.
    pub return_aliases: Vec<Option<usize>>,
    /// Nodes passed as read-only arguments, each with its slot label: the
    /// argument's name, `name[i]` for an element of a list (aliasing checks,
    /// and the slots of [`MutationCall::alias_groups`]).
    pub read_nodes: Vec<(String, NodeId)>,
    /// Which of the call's tensor slots shared memory in the program as
    /// written, before Inductor's cleanups (recorded by `fxrewrite.pre_pass`,
    /// see [`ALIAS_GROUPS`]): a partition of slot labels (written arguments'
    /// and read slots' labels). `None`: no record, and sharing seen in the
    /// graph cannot be attributed.
    pub alias_groups: Option<Vec<Vec<String>>>,
    /// The slots whose memory was, in the program as written, the whole
    /// result of a `clone` (recorded by `fxrewrite.pre_pass`, see
    /// [`FRESH_SLOTS`]): when `remove_noop_ops` deleted that clone, a copy
    /// made for them is a plain `clone` of the slot, with the layout
    /// eager's fresh clone had (storage offset 0), not a copy of the
    /// storage the slot now views.
    pub fresh_slots: Vec<String>,
}

impl MutationCall {
    /// The slot labels that name buffer `b` in alias-group records: a v1
    /// buffer's own label; for a v2 base, the labels of the written
    /// arguments cut from it (none when no written argument is).
    #[must_use]
    pub fn labels_naming_buffer(&self, b: usize) -> Vec<&str> {
        if self.form.buffers_are_bases() {
            self.written
                .iter()
                .filter(|w| w.buffer == b)
                .map(|w| w.label.as_str())
                .collect()
        } else {
            vec![self.buffers[b].label.as_str()]
        }
    }

    /// Every slot label of the call: its written arguments' (a v1 buffer's,
    /// a v2 written view's) and its read slots'.
    #[must_use]
    pub fn slot_labels(&self) -> Vec<&str> {
        let written: Vec<&str> = match self.form {
            super::Form::V1 => self.buffers.iter().map(|b| b.label.as_str()).collect(),
            super::Form::V2 => self.written.iter().map(|w| w.label.as_str()).collect(),
        };
        written
            .into_iter()
            .chain(self.read_nodes.iter().map(|(l, _)| l.as_str()))
            .collect()
    }

    /// The node a slot label of [`MutationCall::alias_groups`] names: a v1
    /// buffer, the base a v2 written argument is cut from, or a read slot.
    #[must_use]
    pub fn slot_node(&self, label: &str) -> Option<NodeId> {
        let written = match self.form {
            super::Form::V1 => self
                .buffers
                .iter()
                .find(|b| b.label == label)
                .map(|b| b.node),
            super::Form::V2 => self
                .written
                .iter()
                .find(|w| w.label == label)
                .map(|w| self.buffers[w.buffer].node),
        };
        written.or_else(|| {
            self.read_nodes
                .iter()
                .find(|(r, _)| r == label)
                .map(|&(_, n)| n)
        })
    }
}

/// A parsed out= call (`Tag.out` operator in the v2 form): fresh buffers.
#[derive(Clone, Debug, PartialEq)]
pub struct OutCall {
    /// The auto_functionalized node.
    pub node: NodeId,
    /// The node's form.
    pub form: super::Form,
    /// The operator.
    pub op: TargetId,
    /// Schema arguments: name, keyword-only, and for written ones the keys of
    /// size, stride, dtype and device.
    pub args: Vec<(String, bool, Option<[String; 4]>)>,
    /// For each return, the written argument (in written order) it aliases.
    pub return_buffers: Vec<Option<usize>>,
    /// Number of operator returns.
    pub n_returns: usize,
}

/// What a rule parses a node into.
#[derive(Clone, Debug, PartialEq)]
pub enum FormCall {
    /// A mutating call (v1 or v2): the shared safety analysis plans it.
    Mutation(MutationCall),
    /// An out= call: fresh buffers, no safety analysis.
    Out(OutCall),
}

/// The mutating operator of an auto_functionalized node and its schema, or
/// why it cannot be read.
///
/// # Errors
/// A reason string when the first argument is not a known operator.
pub fn mutable_op(graph: &Graph, node: NodeId) -> Result<(TargetId, &OpSchema), String> {
    let n = graph.node(node);
    let Some(Value::Target(t)) = n.args.first() else {
        return Err("first argument is not an operator".into());
    };
    let target = &graph.targets[t.idx()];
    match (target.kind, target.schema.as_ref()) {
        (TargetKind::Operator, Some(schema)) => Ok((*t, schema)),
        (TargetKind::HigherOrder, _) => Err(format!(
            "the mutating callee is the higher-order operator {} (for `invoke_subgraph`, a \
             nested_compile_region that mutates its argument): rewriting it in place would \
             mean rewriting its subgraph, so it is left to Inductor, which copies the mutated \
             arguments",
            target.name
        )),
        _ => Err(format!(
            "{} is not an operator overload with a schema",
            target.name
        )),
    }
}

/// Number of result slots that hold operator returns: auto_functionalized
/// returns `(None, ...)` for no returns, `(out, ...)` for one, `(*outs, ...)`
/// for several.
#[must_use]
pub fn return_slots(schema: &OpSchema) -> usize {
    schema.returns.len().max(1)
}

/// For each return, the schema index of the written argument it aliases
/// (`-> Tensor(a!)` of in-place and out= operators).
#[must_use]
pub fn return_alias_args(schema: &OpSchema) -> Vec<Option<usize>> {
    (0..schema.returns.len())
        .map(|i| schema.written_return_source(i))
        .collect()
}

/// The label of element `i` of list argument `name`: `name[i]`, as the
/// report and the pre pass's record of alias groups name a slot.
#[must_use]
pub fn slot_label(name: &str, i: impl std::fmt::Display) -> String {
    format!("{name}[{i}]")
}

/// Collects the node operands of read-only argument `name`, labelled by
/// slot: `name` for a node, `name[i]` for element `i` of a list.
pub fn collect_nodes(name: &str, v: &Value, out: &mut Vec<(String, NodeId)>) {
    match v {
        Value::List(items) | Value::Tuple(items) => {
            for (i, item) in items.iter().enumerate() {
                item.for_each_node(&mut |n| out.push((slot_label(name, i), n)));
            }
        }
        other => other.for_each_node(&mut |n| out.push((name.to_string(), n))),
    }
}

/// The keyword under which the encoder passes the alias groups that
/// `fxrewrite.pre_pass` recorded on an auto_functionalized node before
/// Inductor's `remove_noop_ops` ran: a list of lists of slot labels, one list
/// per set of slots that shared one storage in the program as written. It
/// exists only in the IR, never on the FX node.
pub const ALIAS_GROUPS: &str = "_fxrewrite_alias_groups";

/// The keyword of the record of earlier builds (read arguments aliased with
/// a written one, by name). Accepted in saved graphs and ignored: it cannot
/// tell two written arguments on one memory apart, so such a graph is
/// planned as if it had no record.
pub const LEGACY_USER_ALIASED_READS: &str = "_fxrewrite_user_aliased_reads";

/// The keyword under which the encoder passes the slots that
/// `fxrewrite.pre_pass` found to hold the whole result of a `clone` before
/// Inductor's `remove_noop_ops` ran (a list of slot labels). IR only.
pub const FRESH_SLOTS: &str = "_fxrewrite_fresh_slots";

/// True for the IR-only keywords the encoder adds to an auto_functionalized
/// node ([`ALIAS_GROUPS`], [`FRESH_SLOTS`], [`LEGACY_USER_ALIASED_READS`]).
#[must_use]
pub fn is_ir_only_kwarg(key: &str) -> bool {
    key == ALIAS_GROUPS || key == FRESH_SLOTS || key == LEGACY_USER_ALIASED_READS
}

/// The labels recorded under [`FRESH_SLOTS`]; empty when there is no
/// record or it is malformed (then no slot is taken for a clone's result).
#[must_use]
pub fn fresh_slots(graph: &Graph, node: NodeId) -> Vec<String> {
    let Some(Value::List(items) | Value::Tuple(items)) = graph.node(node).kwarg(FRESH_SLOTS) else {
        return Vec::new();
    };
    items
        .iter()
        .map(|v| match v {
            Value::Str(s) => Some(s.clone()),
            _ => None,
        })
        .collect::<Option<Vec<String>>>()
        .unwrap_or_default()
}

/// The groups recorded under [`ALIAS_GROUPS`]; `None` when there is no
/// record or it is malformed (then no sharing is attributed).
#[must_use]
pub fn alias_groups(graph: &Graph, node: NodeId) -> Option<Vec<Vec<String>>> {
    let Some(Value::List(groups) | Value::Tuple(groups)) = graph.node(node).kwarg(ALIAS_GROUPS)
    else {
        return None;
    };
    groups
        .iter()
        .map(|g| match g {
            Value::List(items) | Value::Tuple(items) => items
                .iter()
                .map(|v| match v {
                    Value::Str(s) => Some(s.clone()),
                    _ => None,
                })
                .collect::<Option<Vec<String>>>(),
            _ => None,
        })
        .collect()
}
