//! The compact graph IR: a flat, index-addressed copy of a `torch.fx.Graph`.
//!
//! Nodes live in one `Vec` in graph order and refer to each other by [`NodeId`]
//! (their index). Every operand of a node refers to an *earlier* node, except
//! the operands of the single `output` node, which is last. Targets are interned
//! once per distinct callable ([`Target`]), and each operator target carries its
//! schema facts ([`schema::OpSchema`]). Tensor metadata is optional everywhere:
//! it improves reports and lets the engine prove more, but a rewrite never
//! depends on it for correctness.
//!
//! The invariants above are checked once, by [`validate::validate`], on every
//! graph that comes from outside (Python or a file); the engine relies on them.

mod display;
pub mod io;
pub mod schema;
pub mod show;
pub mod validate;
pub mod wire;

use serde::Serialize;

pub use schema::{AliasInfo, ArgType, OpSchema, SchemaArg, SchemaReturn};

/// Index of a node in [`Graph::nodes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The index as a `usize`, for slicing.
    #[must_use]
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// Index of a target in [`Graph::targets`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct TargetId(pub u32);

impl TargetId {
    /// The index as a `usize`, for slicing.
    #[must_use]
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// The FX opcode of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum OpCode {
    /// A graph input.
    Placeholder,
    /// A module attribute (parameter, buffer, constant, submodule).
    GetAttr,
    /// A call of a free function or operator overload.
    CallFunction,
    /// A call of a method on the first argument.
    CallMethod,
    /// A call of a submodule.
    CallModule,
    /// The graph's single output node.
    Output,
}

impl OpCode {
    /// The stable code used by the encoders and the file format.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            OpCode::Placeholder => 0,
            OpCode::GetAttr => 1,
            OpCode::CallFunction => 2,
            OpCode::CallMethod => 3,
            OpCode::CallModule => 4,
            OpCode::Output => 5,
        }
    }

    /// Inverse of [`OpCode::code`].
    #[must_use]
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => OpCode::Placeholder,
            1 => OpCode::GetAttr,
            2 => OpCode::CallFunction,
            3 => OpCode::CallMethod,
            4 => OpCode::CallModule,
            5 => OpCode::Output,
            _ => return None,
        })
    }

    /// The FX spelling (`placeholder`, `call_function`, ...).
    #[must_use]
    pub fn fx_name(self) -> &'static str {
        match self {
            OpCode::Placeholder => "placeholder",
            OpCode::GetAttr => "get_attr",
            OpCode::CallFunction => "call_function",
            OpCode::CallMethod => "call_method",
            OpCode::CallModule => "call_module",
            OpCode::Output => "output",
        }
    }
}

/// The higher-order operators that functionalize a mutating call, one per
/// form of `crate::forms` (which maps each to its form by name), as named in
/// `torch.ops.higher_order`, with their stable kind codes (encoders, the
/// file format): the one place the IR names them. A new form adds its line
/// here; the reader, the writer, the display and the alias analysis read
/// this table.
pub const AUTO_FUNCTIONALIZED: [(&str, u8); 2] =
    [("auto_functionalized", 2), ("auto_functionalized_v2", 3)];

/// One of the [`AUTO_FUNCTIONALIZED`] operators, by its index there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct AfOperator(u8);

impl AfOperator {
    /// The operator named `name` in `torch.ops.higher_order`.
    #[must_use]
    pub fn named(name: &str) -> Option<AfOperator> {
        AUTO_FUNCTIONALIZED
            .iter()
            .position(|(n, _)| *n == name)
            .and_then(|i| u8::try_from(i).ok())
            .map(AfOperator)
    }

    /// Its name in `torch.ops.higher_order` (`auto_functionalized_v2`).
    #[must_use]
    pub fn name(self) -> &'static str {
        AUTO_FUNCTIONALIZED[usize::from(self.0)].0
    }

    fn code(self) -> u8 {
        AUTO_FUNCTIONALIZED[usize::from(self.0)].1
    }

    fn with_code(code: u8) -> Option<AfOperator> {
        AUTO_FUNCTIONALIZED
            .iter()
            .position(|(_, c)| *c == code)
            .and_then(|i| u8::try_from(i).ok())
            .map(AfOperator)
    }
}

/// What kind of callable a target is; decides how the engine reads a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum TargetKind {
    /// A `torch._ops.OpOverload`; its schema is in [`Target::schema`].
    Operator,
    /// `operator.getitem`.
    Getitem,
    /// An auto_functionalized operator (`torch.ops.higher_order.auto_functionalized`,
    /// `..._v2`): which one says the node's form (`crate::forms::Form::of_kind`).
    AutoFunctionalized(AfOperator),
    /// Any other higher-order operator.
    HigherOrder,
    /// Anything else: a Python callable, a method name, a module path, a
    /// placeholder's name. Treated as opaque and possibly aliasing.
    Other,
}

impl TargetKind {
    /// The stable code used by the encoders and the file format.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            TargetKind::Operator => 0,
            TargetKind::Getitem => 1,
            TargetKind::AutoFunctionalized(op) => op.code(),
            TargetKind::HigherOrder => 4,
            TargetKind::Other => 5,
        }
    }

    /// Inverse of [`TargetKind::code`].
    #[must_use]
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => TargetKind::Operator,
            1 => TargetKind::Getitem,
            4 => TargetKind::HigherOrder,
            5 => TargetKind::Other,
            _ => return AfOperator::with_code(code).map(TargetKind::AutoFunctionalized),
        })
    }

    /// The auto_functionalized operator named `name` in
    /// `torch.ops.higher_order`, as a kind.
    #[must_use]
    pub fn auto_functionalized(name: &str) -> Option<Self> {
        AfOperator::named(name).map(TargetKind::AutoFunctionalized)
    }

    /// Every kind: the fixed ones and one per auto_functionalized operator,
    /// each with its name in the encoders' tables.
    #[must_use]
    pub fn all() -> Vec<(&'static str, TargetKind)> {
        let mut kinds = vec![
            ("operator", TargetKind::Operator),
            ("getitem", TargetKind::Getitem),
            ("higher_order", TargetKind::HigherOrder),
            ("other", TargetKind::Other),
        ];
        kinds.extend(
            AUTO_FUNCTIONALIZED
                .iter()
                .filter_map(|(n, _)| Some((*n, TargetKind::auto_functionalized(n)?))),
        );
        kinds.sort_by_key(|(_, k)| k.code());
        kinds
    }
}

/// One distinct callable of the graph, interned.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Target {
    /// Qualified name: `aten::slice.Tensor`, `mylib::rms_norm.default`,
    /// `operator.getitem`, `higher_order.auto_functionalized_v2`, or the
    /// placeholder / attribute / method name for other opcodes.
    pub name: String,
    /// How the engine reads nodes with this target.
    pub kind: TargetKind,
    /// Operator schema facts, present for [`TargetKind::Operator`].
    pub schema: Option<OpSchema>,
}

/// A node argument: a constant, a node reference, or a container of them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Value {
    /// Python `None`.
    None,
    /// A Python bool.
    Bool(bool),
    /// A Python int (also concrete `SymInt`s).
    Int(i64),
    /// A Python float.
    Float(f64),
    /// A Python str.
    Str(String),
    /// A reference to an earlier node.
    Node(NodeId),
    /// A Python list.
    List(Vec<Value>),
    /// A Python tuple.
    Tuple(Vec<Value>),
    /// A `torch.dtype`, by name (`float32`).
    Dtype(String),
    /// A `torch.device`, as `str(device)` (`cpu`, `cuda:0`).
    Device(String),
    /// A `torch.layout`, by name.
    Layout(String),
    /// A `torch.memory_format`, by name.
    MemoryFormat(String),
    /// A callable passed as an argument (the operator of an
    /// auto_functionalized node).
    Target(TargetId),
    /// Anything else, kept as its `repr` for reports; the engine treats it as
    /// an opaque constant.
    Opaque(String),
}

impl Value {
    /// The node this value refers to, if it is a plain node reference.
    #[must_use]
    pub fn as_node(&self) -> Option<NodeId> {
        match self {
            Value::Node(n) => Some(*n),
            _ => None,
        }
    }

    /// The integer this value holds, if any.
    #[must_use]
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// A list of integers (a list or tuple of `Int`), if this value is one.
    #[must_use]
    pub fn as_int_list(&self) -> Option<Vec<i64>> {
        match self {
            Value::List(items) | Value::Tuple(items) => items.iter().map(Value::as_int).collect(),
            _ => None,
        }
    }

    /// Calls `f` on every node referenced anywhere inside this value.
    pub fn for_each_node(&self, f: &mut impl FnMut(NodeId)) {
        match self {
            Value::Node(n) => f(*n),
            Value::List(items) | Value::Tuple(items) => {
                for item in items {
                    item.for_each_node(f);
                }
            }
            _ => {}
        }
    }
}

/// One size, stride or storage offset of a tensor: a number, or a symbolic
/// expression (its `str`, as sympy prints it) known only at run time.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum Dim {
    /// A number the graph was specialized to.
    Static(i64),
    /// An expression of the graph's symbols (`s0`, `2*s0 + 1`).
    Symbolic(String),
}

impl Dim {
    /// The number, when static.
    #[must_use]
    pub fn as_static(&self) -> Option<i64> {
        match self {
            Dim::Static(v) => Some(*v),
            Dim::Symbolic(_) => None,
        }
    }
}

impl From<i64> for Dim {
    fn from(v: i64) -> Self {
        Dim::Static(v)
    }
}

/// Static dimensions from numbers.
#[must_use]
pub fn static_dims(v: &[i64]) -> Vec<Dim> {
    v.iter().copied().map(Dim::Static).collect()
}

/// The numbers of `dims`, when every one is static.
fn all_static(dims: &[Dim]) -> Option<Vec<i64>> {
    dims.iter().map(Dim::as_static).collect()
}

/// Tensor facts from `meta['val']`, where the graph had them. Each size,
/// stride and the storage offset is static or symbolic on its own: a graph
/// compiled for a symbolic token count has `[s0, 4096]` with stride
/// `[4096, 1]`, and only `s0` is read at run time.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TensorMeta {
    /// dtype name (`float32`), empty when unknown.
    pub dtype: String,
    /// One size per dimension.
    pub sizes: Vec<Dim>,
    /// One stride per dimension; absent for a tensor that is not strided
    /// (sparse, nested).
    pub strides: Option<Vec<Dim>>,
    /// The storage offset; absent for a tensor that is not strided.
    pub offset: Option<Dim>,
    /// Bytes per element.
    pub itemsize: u32,
    /// A key identifying the storage in the traced program: equal keys mean
    /// the two tensors share memory. Absent when unknown.
    pub storage: Option<u64>,
    /// `str(device)`.
    pub device: String,
}

impl TensorMeta {
    /// A strided tensor whose every size and stride and offset is static.
    #[must_use]
    pub fn static_strided(
        dtype: &str,
        itemsize: u32,
        size: &[i64],
        stride: &[i64],
        offset: i64,
    ) -> Self {
        TensorMeta {
            dtype: dtype.to_string(),
            sizes: static_dims(size),
            strides: Some(static_dims(stride)),
            offset: Some(Dim::Static(offset)),
            itemsize,
            storage: None,
            device: "cpu".to_string(),
        }
    }

    /// Number of dimensions.
    #[must_use]
    pub fn rank(&self) -> u32 {
        u32::try_from(self.sizes.len()).unwrap_or(u32::MAX)
    }

    /// The sizes, when all are static.
    #[must_use]
    pub fn shape(&self) -> Option<Vec<i64>> {
        all_static(&self.sizes)
    }

    /// The strides, when the tensor is strided and all are static.
    #[must_use]
    pub fn stride(&self) -> Option<Vec<i64>> {
        all_static(self.strides.as_ref()?)
    }

    /// The storage offset, when the tensor is strided and it is static.
    #[must_use]
    pub fn storage_offset(&self) -> Option<i64> {
        self.offset.as_ref()?.as_static()
    }

    /// True when a stride 0 spans more than one element, so that elements
    /// share memory (an `expand`); a symbolic size is at least 2 under
    /// Inductor's shape environment.
    #[must_use]
    pub fn has_overlapping_elements(&self) -> bool {
        self.strides.as_ref().is_some_and(|strides| {
            self.sizes
                .iter()
                .zip(strides)
                .any(|(s, st)| *st == Dim::Static(0) && !matches!(s.as_static(), Some(0 | 1)))
        })
    }

    /// Bytes covered by the tensor's elements, when the shape is static.
    #[must_use]
    pub fn nbytes(&self) -> Option<u64> {
        let mut n: u64 = u64::from(self.itemsize);
        for d in &self.sizes {
            n = n.checked_mul(u64::try_from(d.as_static()?).ok()?)?;
        }
        Some(n)
    }
}

/// One node of the graph.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    /// The FX opcode.
    pub op: OpCode,
    /// The node's unique name in the graph.
    pub name: String,
    /// The interned target.
    pub target: TargetId,
    /// Positional arguments.
    pub args: Vec<Value>,
    /// Keyword arguments, in the node's order.
    pub kwargs: Vec<(String, Value)>,
    /// Metadata of the single tensor this node produces, if it produces one.
    pub meta: Option<TensorMeta>,
    /// The last line of `meta['stack_trace']` (the user's source line), if any.
    pub source: Option<String>,
}

impl Node {
    /// The keyword argument `key`, if present.
    #[must_use]
    pub fn kwarg(&self, key: &str) -> Option<&Value> {
        self.kwargs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Calls `f` on every node referenced by the arguments.
    pub fn for_each_operand(&self, mut f: impl FnMut(NodeId)) {
        for a in &self.args {
            a.for_each_node(&mut f);
        }
        for (_, v) in &self.kwargs {
            v.for_each_node(&mut f);
        }
    }
}

/// A whole graph in IR form. Build one with [`Graph::new`] and
/// [`Graph::add_target`] / [`Graph::add_node`], or read one with [`io::read`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Graph {
    /// Interned targets.
    pub targets: Vec<Target>,
    /// Nodes in graph order.
    pub nodes: Vec<Node>,
}

impl Graph {
    /// An empty graph.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Interns a target and returns its id (an existing one when the name and
    /// kind already exist).
    pub fn add_target(&mut self, target: Target) -> TargetId {
        if let Some(pos) = self
            .targets
            .iter()
            .position(|t| t.name == target.name && t.kind == target.kind)
        {
            return TargetId(u32::try_from(pos).unwrap_or(u32::MAX));
        }
        self.targets.push(target);
        TargetId(u32::try_from(self.targets.len() - 1).unwrap_or(u32::MAX))
    }

    /// Appends a node and returns its id. Operands must refer to earlier nodes
    /// (checked in debug builds; [`validate::validate`] checks it always).
    pub fn add_node(&mut self, node: Node) -> NodeId {
        let id = NodeId(u32::try_from(self.nodes.len()).unwrap_or(u32::MAX));
        debug_assert!({
            let mut ok = true;
            node.for_each_operand(|n| ok &= n < id);
            ok
        });
        self.nodes.push(node);
        id
    }

    /// The node with id `id`.
    #[must_use]
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.idx()]
    }

    /// The target of node `id`.
    #[must_use]
    pub fn target_of(&self, id: NodeId) -> &Target {
        &self.targets[self.nodes[id.idx()].target.idx()]
    }

    /// Number of nodes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the graph has no nodes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}
