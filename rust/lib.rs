//! fxrewrite's engine: turns every `auto_functionalized` /
//! `auto_functionalized_v2` node of a torch.fx graph back into an in-place call
//! of its mutating operator, cloning only where a later reader truly needs the
//! old value.
//!
//! Pipeline: a graph arrives as the compact IR ([`ir::Graph`], from the Python
//! encoder or a `.fxir` file), is validated ([`ir::validate`]), analysed
//! ([`analysis`]), and parsed by the registered rules ([`forms`]) and planned inside one forward
//! walk ([`engine`]). The result is a [`Plan`]: ordered edits plus a [`Report`]
//! that explains every decision. The caller applies the edits, all or nothing.
//!
//! Invariants: node operands always refer to earlier nodes; a plan never
//! depends on hash-map iteration order; nothing here panics on outside data
//! (it is validated first, and errors are [`Error`] values).
//!
//! ```
//! use fxrewrite::{plan, Graph};
//! # use fxrewrite::ir::{Node, OpCode, Target, TargetKind, TargetId};
//! let mut g = Graph::new();
//! let t = g.add_target(Target { name: "output".into(), kind: TargetKind::Other, schema: None });
//! g.add_node(Node { op: OpCode::Output, name: "output".into(), target: t, args: vec![], kwargs: vec![], meta: None, source: None });
//! let p = plan(&g).unwrap();
//! assert!(p.edits.is_empty());
//! ```

pub mod analysis;
pub mod engine;
pub mod error;
pub mod forms;
pub mod inspect;
pub mod ir;
pub mod plan;
#[cfg(feature = "python")]
mod python;

pub use engine::{plan, plan_with, PlanOptions};
pub use error::{Error, Result};
pub use forms::{rule_names, Form};
pub use ir::{Graph, NodeId};
pub use plan::{Action, Edit, Plan, Report};

/// Version of the engine's decision logic; part of the Inductor cache key.
pub const ENGINE_VERSION: &str = env!("CARGO_PKG_VERSION");
