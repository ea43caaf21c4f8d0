//! The [`Editor`] of a live `torch.fx.Graph`: the pass's half of the one
//! applier (`crate::plan::apply`). Edits go straight to the graph through
//! FX's own API and are recorded for rollback.
//!
//! What only torch can compute (fake values of inserted nodes, the eager
//! layouts of a direct call's arguments, the views of re-pointed values) is
//! asked of `fxrewrite.fx_meta`, one call per node that needs it.

use std::collections::{HashMap, HashSet};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::error::Result;
use crate::ir::{Graph, NodeId};
use crate::plan::apply::{Arg, Editor, Insertion};
use crate::plan::{Callee, MetaSource};

/// The node meta key that makes Inductor compute a node in a buffer of its
/// own at its place in the graph (`GraphLowering.run_node` realizes it
/// there), instead of lazily inside a later user's kernel.
pub const REALIZE_KEY: &str = "inductor_realize_to_strides";

enum Undo<'py> {
    Insert(Bound<'py, PyAny>),
    Move {
        node: Bound<'py, PyAny>,
        next: Bound<'py, PyAny>,
    },
    Realize {
        node: Bound<'py, PyAny>,
        previous: Option<Bound<'py, PyAny>>,
    },
    /// Each re-pointed user with its arguments before the replacement.
    Replace(Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>)>),
}

/// Edits one `torch.fx.Graph` whose nodes, in graph order, are `nodes` and
/// whose interned callables are `targets` (the encoder's tables).
pub struct FxEditor<'py, 'g> {
    py: Python<'py>,
    /// The graph the plan was made from: what the applier reads of an
    /// original node (a v2 node's written views) without asking Python.
    ir: &'g Graph,
    graph: Bound<'py, PyAny>,
    nodes: Vec<Bound<'py, PyAny>>,
    targets: Vec<Bound<'py, PyAny>>,
    meta: Bound<'py, PyModule>,
    callees: HashMap<String, Bound<'py, PyAny>>,
    fake_mode: Option<Bound<'py, PyAny>>,
    undo: Vec<Undo<'py>>,
    /// `(old value, users moved off it)` per replacement: the views among
    /// those users now view the replacement's memory.
    repointed: Vec<(Bound<'py, PyAny>, Bound<'py, PyList>)>,
    /// Nodes created or moved, and users re-pointed: the only nodes whose
    /// operands can have changed place, so the only ones the order check
    /// before erasing looks at.
    touched: Vec<Bound<'py, PyAny>>,
    /// Nodes created, and users whose arguments changed: the only nodes
    /// whose FX hash (node, target, arguments) is new, what Inductor's
    /// `FakeTensorUpdater` must be told about.
    changed: Vec<Bound<'py, PyAny>>,
}

fn py_err(e: &PyErr, py: Python<'_>, at: Option<u32>, what: &str) -> crate::Error {
    crate::Error::Internal {
        node: at,
        detail: format!("{what}: {}", e.value(py)),
    }
}

impl<'py, 'g> FxEditor<'py, 'g> {
    /// An editor of `graph`.
    ///
    /// # Errors
    /// `fxrewrite.fx_meta` cannot be imported.
    pub fn new(
        ir: &'g Graph,
        graph: Bound<'py, PyAny>,
        nodes: Vec<Bound<'py, PyAny>>,
        targets: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Self> {
        let py = graph.py();
        let meta = py.import("fxrewrite.fx_meta")?;
        Ok(Self {
            py,
            ir,
            graph,
            nodes,
            targets,
            meta,
            callees: HashMap::new(),
            fake_mode: None,
            undo: Vec::new(),
            repointed: Vec::new(),
            touched: Vec::new(),
            changed: Vec::new(),
        })
    }

    fn fake_mode(&mut self) -> PyResult<Bound<'py, PyAny>> {
        if let Some(m) = &self.fake_mode {
            return Ok(m.clone());
        }
        let m = self.meta.call_method1("fake_mode_of", (&self.graph,))?;
        self.fake_mode = Some(m.clone());
        Ok(m)
    }

    fn callee(&mut self, callee: &Callee) -> PyResult<Bound<'py, PyAny>> {
        let key = match callee {
            Callee::Target(t) => {
                return self.targets.get(t.idx()).cloned().ok_or_else(|| {
                    pyo3::exceptions::PyIndexError::new_err(format!("no target {}", t.0))
                });
            }
            Callee::Aten(name) => format!("aten:{name}"),
            Callee::Getitem => "operator:getitem".to_string(),
            Callee::Operator(op) => format!("operator:{op}"),
        };
        if let Some(c) = self.callees.get(&key) {
            return Ok(c.clone());
        }
        let c = match callee {
            Callee::Aten(name) => self.meta.call_method1("aten", (*name,))?,
            Callee::Getitem => self.py.import("operator")?.getattr("getitem")?,
            Callee::Operator(op) => self.py.import("operator")?.getattr(*op)?,
            Callee::Target(_) => unreachable!("returned above"),
        };
        self.callees.insert(key, c.clone());
        Ok(c)
    }

    fn value(&self, a: &Arg<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        Ok(match a {
            Arg::Node(n) => n.clone(),
            // Read now: earlier replacements may have rewritten it.
            Arg::FromKwarg { node, key, .. } => node
                .getattr("kwargs")?
                .get_item(key.as_str())
                .map_err(|_| {
                    pyo3::exceptions::PyKeyError::new_err(format!(
                        "plan reads missing kwarg {key:?}"
                    ))
                })?,
            Arg::FromArg { node, index, .. } => {
                node.getattr("args")?.get_item(*index).map_err(|_| {
                    pyo3::exceptions::PyIndexError::new_err(format!(
                        "plan reads missing argument {index}"
                    ))
                })?
            }
            Arg::Int(i) => i.into_pyobject(py)?.into_any(),
            Arg::IntList(v) => PyList::new(py, v)?.into_any(),
            Arg::None => py.None().into_bound(py),
            Arg::List(items) => PyList::new(
                py,
                items
                    .iter()
                    .map(|i| self.value(i))
                    .collect::<PyResult<Vec<_>>>()?,
            )?
            .into_any(),
        })
    }

    /// The `meta['val']` an inserted node gets, or `None`.
    fn meta_val(
        &mut self,
        source: &MetaSource,
        created: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let val_of = |id: NodeId| -> PyResult<Option<Bound<'py, PyAny>>> {
            let val = self.nodes[id.idx()]
                .getattr("meta")?
                .call_method1("get", ("val",))?;
            Ok((!val.is_none()).then_some(val))
        };
        match source {
            MetaSource::Nothing => Ok(None),
            MetaSource::AfOutput { node, index } => {
                let Some(val) = val_of(*node)? else {
                    return Ok(None);
                };
                match index {
                    None => Ok(Some(val)),
                    Some(i) => Ok(
                        if val.is_instance_of::<PyTuple>() || val.is_instance_of::<PyList>() {
                            (*i < val.len()?).then(|| val.get_item(*i)).transpose()?
                        } else {
                            None
                        },
                    ),
                }
            }
            MetaSource::AfOutputs { node, start, end } => {
                let Some(val) = val_of(*node)? else {
                    return Ok(None);
                };
                if !(val.is_instance_of::<PyTuple>() || val.is_instance_of::<PyList>()) {
                    return Ok(None);
                }
                let len = val.len()?;
                let items = (*start..(*end).min(len))
                    .map(|i| val.get_item(i))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(Some(PyTuple::new(self.py, items)?.into_any()))
            }
            MetaSource::Compute => {
                let mode = self.fake_mode()?;
                let val = self.meta.call_method1("compute", (mode, created))?;
                Ok((!val.is_none()).then_some(val))
            }
        }
    }

    fn try_insert(
        &mut self,
        ins: &Insertion<'_, Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        let callee = self.callee(ins.callee)?;
        let args = PyTuple::new(
            py,
            ins.args
                .iter()
                .map(|a| self.value(a))
                .collect::<PyResult<Vec<_>>>()?,
        )?;
        let kwargs = PyDict::new(py);
        for (k, a) in &ins.kwargs {
            kwargs.set_item(k, self.value(a)?)?;
        }
        let created = self
            .graph
            .call_method1("create_node", ("call_function", &callee, args, kwargs))?;
        self.undo.push(Undo::Insert(created.clone()));
        ins.before.call_method1("prepend", (&created,))?;
        self.touched.push(created.clone());
        self.changed.push(created.clone());
        let meta = created.getattr("meta")?;
        if let Some(val) = self.meta_val(ins.meta, &created)? {
            meta.set_item("val", val)?;
        }
        let origin = &self.nodes[ins.origin.idx()];
        if matches!(ins.callee, Callee::Target(_)) {
            let written = crate::forms::reinplace_v2::written_views(self.ir, ins.origin)
                .map(|w| -> PyResult<_> {
                    let by_name = PyDict::new(py);
                    for (name, items) in super::written_views_to_py(py, w)? {
                        by_name.set_item(name, items)?;
                    }
                    Ok(by_name)
                })
                .transpose()?;
            let eager = self
                .meta
                .call_method1("eager_input_vals", (origin, &callee, &created, written))?;
            if !eager.is_none() {
                meta.set_item("eager_input_vals", eager)?;
            }
        }
        let trace = origin
            .getattr("meta")?
            .call_method1("get", ("stack_trace",))?;
        if !trace.is_none() {
            meta.set_item("stack_trace", trace)?;
        }
        Ok(created)
    }

    /// The nodes whose FX hash changed (created nodes and re-pointed users,
    /// erased ones included), once the apply has succeeded.
    pub fn finish(self) -> Vec<Bound<'py, PyAny>> {
        self.changed
    }

    /// Brings the views of re-pointed values up to date. It runs once every
    /// check has passed and before anything is erased, so that a view that
    /// fails on its new input (a wrong rewrite) still rolls everything back;
    /// `refresh_views` restores the values it changed before it raises.
    fn refresh_views(&mut self) -> PyResult<()> {
        if self.repointed.is_empty() {
            return Ok(());
        }
        let mode = self.fake_mode()?;
        let pairs = PyList::empty(self.py);
        for (old, users) in &self.repointed {
            pairs.append((old, users))?;
        }
        self.meta.call_method1("refresh_views", (pairs, mode))?;
        Ok(())
    }

    /// Every touched node comes after its operands and before its users, in
    /// FX's own order (`Node.__lt__`, constant time): the self-check of the
    /// edits, at a cost proportional to the nodes rewritten rather than a
    /// full `graph.lint()`.
    fn check_order(&self) -> PyResult<Option<String>> {
        // Runs before anything is erased, so every touched node is alive.
        for n in &self.touched {
            for inp in n.getattr("all_input_nodes")?.try_iter()? {
                let inp = inp?;
                if !inp.lt(n)? {
                    return Ok(Some(format!(
                        "{} uses {}, which comes after it",
                        n.getattr("name")?,
                        inp.getattr("name")?
                    )));
                }
            }
        }
        Ok(None)
    }

    fn undo_one(&self, entry: Undo<'py>) -> PyResult<()> {
        match entry {
            Undo::Insert(n) => {
                self.graph.call_method1("erase_node", (n,))?;
            }
            Undo::Move { node, next } => {
                next.call_method1("prepend", (node,))?;
            }
            Undo::Realize { node, previous } => {
                let meta = node.getattr("meta")?;
                match previous {
                    Some(p) => meta.set_item(REALIZE_KEY, p)?,
                    None => {
                        meta.call_method1("pop", (REALIZE_KEY, self.py.None()))?;
                    }
                }
            }
            Undo::Replace(saved) => {
                for (user, args, kwargs) in saved {
                    user.setattr("args", args)?;
                    user.setattr("kwargs", kwargs)?;
                }
            }
        }
        Ok(())
    }
}

impl<'py> Editor for FxEditor<'py, '_> {
    type Handle = Bound<'py, PyAny>;

    fn original(&self, id: NodeId) -> Result<Self::Handle> {
        self.nodes
            .get(id.idx())
            .cloned()
            .ok_or_else(|| crate::Error::Internal {
                node: Some(id.0),
                detail: format!(
                    "plan refers to node {} of a {}-node graph",
                    id.0,
                    self.nodes.len()
                ),
            })
    }

    fn insert(&mut self, ins: Insertion<'_, Self::Handle>) -> Result<Self::Handle> {
        self.try_insert(&ins)
            .map_err(|e| py_err(&e, self.py, Some(ins.origin.0), "cannot insert a node"))
    }

    fn move_before(&mut self, node: &Self::Handle, before: &Self::Handle) -> Result<()> {
        let r = (|| -> PyResult<()> {
            let next = node.getattr("next")?;
            before.call_method1("prepend", (node,))?;
            self.undo.push(Undo::Move {
                node: node.clone(),
                next,
            });
            self.touched.push(node.clone());
            for u in node.getattr("users")?.try_iter()? {
                self.touched.push(u?);
            }
            Ok(())
        })();
        r.map_err(|e| py_err(&e, self.py, None, "cannot move a node"))
    }

    fn replace_uses(&mut self, id: NodeId, node: &Self::Handle, with: &Self::Handle) -> Result<()> {
        let r = (|| -> PyResult<()> {
            let users = node
                .getattr("users")?
                .try_iter()?
                .collect::<PyResult<Vec<_>>>()?;
            let users = PyList::new(self.py, users)?;
            let mut saved = Vec::with_capacity(users.len());
            for u in users.iter() {
                let args = u.getattr("args")?;
                let kwargs = u.getattr("kwargs")?;
                saved.push((u, args, kwargs));
            }
            self.undo.push(Undo::Replace(saved));
            node.call_method1("replace_all_uses_with", (with,))?;
            self.touched.extend(users.iter());
            self.changed.extend(users.iter());
            let old = node.getattr("meta")?.call_method1("get", ("val",))?;
            if !old.is_none() {
                self.repointed.push((old, users));
            }
            Ok(())
        })();
        r.map_err(|e| py_err(&e, self.py, Some(id.0), "cannot replace a node's uses"))
    }

    fn realize(&mut self, node: &Self::Handle) -> Result<()> {
        let r = (|| -> PyResult<()> {
            let meta = node.getattr("meta")?;
            let previous = meta.call_method1("get", (REALIZE_KEY,))?;
            self.undo.push(Undo::Realize {
                node: node.clone(),
                previous: (!previous.is_none()).then_some(previous),
            });
            meta.set_item(REALIZE_KEY, true)?;
            Ok(())
        })();
        r.map_err(|e| py_err(&e, self.py, None, "cannot mark a node"))
    }

    fn next(&self, node: &Self::Handle) -> Result<Self::Handle> {
        let r = (|| -> PyResult<Option<Self::Handle>> {
            let next = node.getattr("next")?;
            Ok((next.getattr("op")?.extract::<String>()? != "root").then_some(next))
        })();
        match r {
            Ok(Some(n)) => Ok(n),
            Ok(None) => Err(crate::Error::Internal {
                node: None,
                detail: "no node after the node to realize".into(),
            }),
            Err(e) => Err(py_err(&e, self.py, None, "cannot read the graph order")),
        }
    }

    fn erase(&mut self, nodes: &[(NodeId, Self::Handle)]) -> Result<()> {
        let misplaced = self
            .check_order()
            .map_err(|e| py_err(&e, self.py, None, "cannot check the node order"))?;
        if let Some(detail) = misplaced {
            return Err(crate::Error::Internal { node: None, detail });
        }
        let doomed: HashSet<usize> = nodes.iter().map(|(_, n)| n.as_ptr() as usize).collect();
        for (id, n) in nodes {
            let stays = (|| -> PyResult<Option<String>> {
                for u in n.getattr("users")?.try_iter()? {
                    let u = u?;
                    if !doomed.contains(&(u.as_ptr() as usize)) {
                        return Ok(Some(u.getattr("name")?.extract()?));
                    }
                }
                Ok(None)
            })()
            .map_err(|e| py_err(&e, self.py, Some(id.0), "cannot read a node's users"))?;
            if let Some(user) = stays {
                let name: String = n
                    .getattr("name")
                    .and_then(|x| x.extract())
                    .unwrap_or_default();
                return Err(crate::Error::Internal {
                    node: Some(id.0),
                    detail: format!("{name} is still used by {user} after the plan"),
                });
            }
        }
        self.refresh_views().map_err(|e| {
            py_err(
                &e,
                self.py,
                None,
                "cannot bring the views of re-pointed values up to date",
            )
        })?;
        // Each node is used only by later entries, which plan order erases
        // first; nothing below can fail on a graph that passed the check.
        for (id, n) in nodes {
            self.graph
                .call_method1("erase_node", (n,))
                .map_err(|e| py_err(&e, self.py, Some(id.0), "cannot erase a node"))?;
        }
        Ok(())
    }

    fn rollback(&mut self) {
        while let Some(entry) = self.undo.pop() {
            // Rollback runs after a failure; the first error is the one the
            // caller sees, and every later entry is still undone.
            let _ = self.undo_one(entry);
        }
    }
}
