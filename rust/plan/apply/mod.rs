//! The one applier: applies a [`Plan`] through an [`Editor`], the interface
//! both graphs implement. The IR ([`ir::IrEditor`], used by the command line
//! tool) and the live `torch.fx.Graph` (`rust/python/fx_editor.rs`, used by
//! the pass) differ only in how a node is created, moved, re-pointed and
//! erased; the order of edits, every check and the all-or-nothing guarantee
//! live here, once.
//!
//! Applying is all or nothing:
//!
//! 1. [`check`] resolves every reference of the plan and simulates use counts
//!    on the graph the plan was made from, before anything changes: a
//!    `Replace` adds the replaced node's users to its replacement, an `Erase`
//!    needs a count of zero and releases one use of each of the erased node's
//!    inputs.
//! 2. The edits run in order. `Insert` creates a node just before `before`
//!    (after nodes inserted or moved before it earlier), `Move` moves a node
//!    to just before `before`, `Replace` moves every current use of a node
//!    (uses by inserted nodes included) to its replacement, `Realize` marks a
//!    node for Inductor (through an alias inserted just after it when
//!    Inductor would drop the mark, [`REPLACED_BEFORE_LOWERING`]), and
//!    `Erase` is deferred.
//! 3. Erasures come last, once each erased node is known to be used only by
//!    other erased nodes; plan order erases users before what they use.
//!
//! Any failure in steps 2 and 3 calls [`Editor::rollback`], which restores
//! the graph exactly, and returns the error.

mod check;
pub mod ir;
mod naming;
pub mod schemas;

pub use check::check;
pub use ir::apply_plan;
pub use schemas::{aten_schema, INSERTED_OPS};

use crate::error::{Error, Result};
use crate::ir::{Graph, NodeId};
use crate::plan::{Callee, Edit, MetaSource, NewId, Plan, PlanArg, ValueRef};

/// An argument of an inserted node, with node references resolved to the
/// editor's handles.
#[derive(Clone, Debug)]
pub enum Arg<H> {
    /// A node (original or inserted).
    Node(H),
    /// The value keyword `key` of an original node holds *now* (earlier
    /// replacements may have rewritten it), passed through unchanged.
    FromKwarg {
        /// The original node.
        node: H,
        /// Its index in the planned graph, for errors.
        id: NodeId,
        /// The keyword.
        key: String,
    },
    /// The value positional argument `index` of an original node holds now.
    FromArg {
        /// The original node.
        node: H,
        /// Its index in the planned graph, for errors.
        id: NodeId,
        /// The position.
        index: usize,
    },
    /// An integer.
    Int(i64),
    /// A list of integers.
    IntList(Vec<i64>),
    /// `None`.
    None,
    /// A list of arguments.
    List(Vec<Arg<H>>),
}

/// One node to create.
#[derive(Debug)]
pub struct Insertion<'p, H> {
    /// The id later edits refer to it by.
    pub id: NewId,
    /// The node it goes just before.
    pub before: H,
    /// The original node it stands for (its source line, its eager layouts,
    /// the node errors are reported against).
    pub origin: NodeId,
    /// What it calls.
    pub callee: &'p Callee,
    /// Positional arguments.
    pub args: Vec<Arg<H>>,
    /// Keyword arguments.
    pub kwargs: Vec<(String, Arg<H>)>,
    /// Where its tensor metadata comes from.
    pub meta: &'p MetaSource,
}

/// The operations a graph must offer to be edited by a plan. Each one is
/// applied at once and recorded, so that [`Editor::rollback`] can undo
/// everything done since the editor was created.
pub trait Editor {
    /// How the editor refers to a node.
    type Handle: Clone;

    /// The handle of node `id` of the graph the plan was made from.
    ///
    /// # Errors
    /// [`Error::Internal`] if the editor's graph has no such node.
    fn original(&self, id: NodeId) -> Result<Self::Handle>;

    /// Creates a node.
    ///
    /// # Errors
    /// [`Error::Internal`] if the callee or an argument cannot be resolved.
    fn insert(&mut self, node: Insertion<'_, Self::Handle>) -> Result<Self::Handle>;

    /// Moves `node` to just before `before`.
    ///
    /// # Errors
    /// [`Error::Internal`] if the graph refuses the move.
    fn move_before(&mut self, node: &Self::Handle, before: &Self::Handle) -> Result<()>;

    /// Moves every current use of `node` (original node `id`) to `with`.
    ///
    /// # Errors
    /// [`Error::Internal`] if the graph refuses the replacement.
    fn replace_uses(&mut self, id: NodeId, node: &Self::Handle, with: &Self::Handle) -> Result<()>;

    /// Marks `node` to be computed where it stands.
    ///
    /// # Errors
    /// [`Error::Internal`] if the graph refuses the mark.
    fn realize(&mut self, node: &Self::Handle) -> Result<()>;

    /// The node just after `node` in the graph's current order.
    ///
    /// # Errors
    /// [`Error::Internal`] if `node` is the last node.
    fn next(&self, node: &Self::Handle) -> Result<Self::Handle>;

    /// Erases `nodes`, in order, after checking that each is used only by
    /// nodes of the same list; erases nothing if one is not.
    ///
    /// # Errors
    /// [`Error::Internal`] naming the node and a user that stays.
    fn erase(&mut self, nodes: &[(NodeId, Self::Handle)]) -> Result<()>;

    /// Undoes every edit made through this editor, newest first.
    fn rollback(&mut self);
}

/// Applies `plan`, made from `graph`, through `editor`, whose graph must be
/// `graph` (or the live graph `graph` was read from) and unchanged since.
///
/// # Errors
/// [`Error::Internal`] when the plan does not fit the graph or the editor
/// refuses an edit; the editor's graph is then as it was.
pub fn apply<E: Editor>(graph: &Graph, plan: &Plan, editor: &mut E) -> Result<()> {
    check(graph, plan)?;
    match run(graph, plan, editor) {
        Ok(()) => Ok(()),
        Err(e) => {
            editor.rollback();
            Err(e)
        }
    }
}

fn run<E: Editor>(graph: &Graph, plan: &Plan, editor: &mut E) -> Result<()> {
    let mut created: Vec<Option<E::Handle>> = vec![None; plan.new_nodes as usize];
    let mut realized_aliases = 0;
    let mut doomed: Vec<(NodeId, E::Handle)> = Vec::new();
    for edit in &plan.edits {
        match edit {
            Edit::Insert {
                id,
                before,
                callee,
                args,
                kwargs,
                meta,
                origin,
            } => {
                let at = before.0;
                let resolve = |a: &PlanArg| arg(editor, &created, a, at);
                let args = args.iter().map(resolve).collect::<Result<Vec<_>>>()?;
                let kwargs = kwargs
                    .iter()
                    .map(|(k, a)| Ok((k.clone(), resolve(a)?)))
                    .collect::<Result<Vec<_>>>()?;
                let handle = editor.insert(Insertion {
                    id: *id,
                    before: editor.original(*before)?,
                    origin: *origin,
                    callee,
                    args,
                    kwargs,
                    meta,
                })?;
                created[id.0 as usize] = Some(handle);
            }
            Edit::Move { node, before } => {
                let (n, b) = (editor.original(*node)?, editor.original(*before)?);
                if node != before {
                    editor.move_before(&n, &b)?;
                }
            }
            Edit::Replace { node, with } => {
                let n = editor.original(*node)?;
                let w = value(editor, &created, *with, node.0)?;
                editor.replace_uses(*node, &n, &w)?;
            }
            Edit::Realize { node } => {
                let n = editor.original(*node)?;
                if replaced_before_lowering(graph, *node) {
                    let alias = editor.insert(Insertion {
                        id: NewId(plan.new_nodes + realized_aliases),
                        before: editor.next(&n)?,
                        origin: *node,
                        callee: &ALIAS,
                        args: vec![Arg::Node(n)],
                        kwargs: Vec::new(),
                        meta: &MetaSource::Compute,
                    })?;
                    realized_aliases += 1;
                    editor.realize(&alias)?;
                } else {
                    editor.realize(&n)?;
                }
            }
            Edit::RealizeNew { id } => {
                let n = created
                    .get(id.0 as usize)
                    .and_then(Option::as_ref)
                    .ok_or_else(|| crate::Error::Internal {
                        node: None,
                        detail: format!("realize of new node {} before its insert", id.0),
                    })?;
                editor.realize(n)?;
            }
            Edit::Erase { node } => doomed.push((*node, editor.original(*node)?)),
        }
    }
    editor.erase(&doomed)
}

/// The view-scatter operators whose nodes Inductor's reinplace pass
/// (`canonicalize_view_scatter_ops`, then `decompose_generalized_scatter`)
/// replaces by new nodes after the custom post pass and before lowering,
/// keeping only `meta['val']`: `_SCATTER_OP_TO_VIEW` in
/// `torch/_inductor/fx_passes/reinplace.py` (`tests/test_realize_marker.py`
/// checks this list against it).
pub const REPLACED_BEFORE_LOWERING: &[&str] = &[
    "aten::diagonal_scatter.default",
    "aten::select_scatter.default",
    "aten::slice_scatter.default",
    "aten::as_strided_scatter.default",
];

const ALIAS: Callee = Callee::Aten("aten::alias.default");

/// True when a mark put on `node` would be lost before Inductor lowers it.
/// Such a node is realized through an `aten.alias` of it inserted just
/// after it: Inductor lowers an alias to the very value it aliases (`nop`),
/// so marking the alias realizes the node's value at the same place.
fn replaced_before_lowering(graph: &Graph, node: NodeId) -> bool {
    REPLACED_BEFORE_LOWERING.contains(&graph.target_of(node).name.as_str())
}

fn value<E: Editor>(
    editor: &E,
    created: &[Option<E::Handle>],
    r: ValueRef,
    at: u32,
) -> Result<E::Handle> {
    match r {
        ValueRef::Old(n) => editor.original(n),
        ValueRef::New(id) => created
            .get(id.0 as usize)
            .and_then(Clone::clone)
            .ok_or_else(|| internal(at, format!("new node {} used before it was created", id.0))),
    }
}

fn arg<E: Editor>(
    editor: &E,
    created: &[Option<E::Handle>],
    a: &PlanArg,
    at: u32,
) -> Result<Arg<E::Handle>> {
    Ok(match a {
        PlanArg::Ref(r) => Arg::Node(value(editor, created, *r, at)?),
        PlanArg::FromKwarg { node, key } => Arg::FromKwarg {
            node: editor.original(*node)?,
            id: *node,
            key: key.clone(),
        },
        PlanArg::FromArg { node, index } => Arg::FromArg {
            node: editor.original(*node)?,
            id: *node,
            index: *index,
        },
        PlanArg::Int(i) => Arg::Int(*i),
        PlanArg::IntList(v) => Arg::IntList(v.clone()),
        PlanArg::None => Arg::None,
        PlanArg::List(items) => Arg::List(
            items
                .iter()
                .map(|i| arg(editor, created, i, at))
                .collect::<Result<_>>()?,
        ),
    })
}

pub(crate) fn internal(node: u32, detail: impl Into<String>) -> Error {
    Error::Internal {
        node: Some(node),
        detail: detail.into(),
    }
}
