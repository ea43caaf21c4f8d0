//! The rules that read auto_functionalized nodes, one per file, all
//! registered in [`registry`], and the [`Form`] of a node.
//!
//! Two words, one meaning each, in code, reports and docs:
//! - A node's **form** is which higher-order operator it is:
//!   [`Form::V1`] (`auto_functionalized`) or [`Form::V2`]
//!   (`auto_functionalized_v2`), each with its own encoding of the call.
//!   Reports name it in their `form` field (`"v1"`, `"v2"`).
//! - A **rule** is a value with a stable name (`reinplace_v1`,
//!   `reinplace_v2`, `out_buffers_v2`; it appears in reports' `rule` field
//!   and in the cache key) and a parser: a pure function from a node to a
//!   typed call description ([`FormCall`]), or the reason the node cannot be
//!   read. One form may be read by several rules (v2 by `reinplace_v2` and
//!   `out_buffers_v2`). A rule answers `None` for a node it does not read,
//!   so exactly one rule claims any node whatever the registry's order.
//!   Rules know nothing of the engine: the engine plans what they parse.
//!   Adding a rule touches its own file and the list below, nothing else.

pub mod call;
pub mod out_buffers_v2;
pub mod reinplace_v1;
pub mod reinplace_v2;

use serde::{Deserialize, Serialize};

use crate::ir::{Graph, NodeId, TargetKind};
pub use call::FormCall;

/// Which higher-order operator an auto_functionalized node is; serialized
/// (reports) as [`Form::as_str`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Form {
    /// `auto_functionalized`: the written arguments are passed as they are,
    /// and a view written in place is put back into its base by a later
    /// scatter (write-back) node.
    #[serde(rename = "v1")]
    V1,
    /// `auto_functionalized_v2`: the written arguments are cut from bases
    /// (`_all_bases`) by recorded view information; a buffer is a base.
    #[serde(rename = "v2")]
    V2,
}

impl Form {
    /// Both forms, V1 first.
    pub const ALL: [Form; 2] = [Form::V1, Form::V2];

    /// The stable name reports use: `"v1"` or `"v2"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Form::V1 => "v1",
            Form::V2 => "v2",
        }
    }

    /// True when a view the call writes in place is put back into its base
    /// by later scatter nodes of the graph (v1), which the engine may remove
    /// once the call writes the base itself; false when the node carries the
    /// views it writes (v2).
    #[must_use]
    pub fn writes_views_back_by_scatter(self) -> bool {
        match self {
            Form::V1 => true,
            Form::V2 => false,
        }
    }

    /// True when each buffer of the call is a whole base its written
    /// arguments are cut from (v2's `_all_bases`), named by those
    /// arguments; false when each buffer is a written argument itself (v1).
    /// Two bases of one storage always share memory: their cuts are the
    /// encoding's, not geometry the engine compares.
    #[must_use]
    pub fn buffers_are_bases(self) -> bool {
        match self {
            Form::V1 => false,
            Form::V2 => true,
        }
    }

    /// The higher-order operator whose nodes have this form, as named in
    /// `torch.ops.higher_order` (and in the IR's table of them,
    /// `crate::ir::AUTO_FUNCTIONALIZED`).
    #[must_use]
    pub fn operator_name(self) -> &'static str {
        match self {
            Form::V1 => "auto_functionalized",
            Form::V2 => "auto_functionalized_v2",
        }
    }

    /// The target kind of this form's nodes. A form whose operator were
    /// missing from the IR's table would get [`TargetKind::Other`] (its
    /// nodes unread, never misread); a test keeps both lists equal.
    #[must_use]
    pub fn kind(self) -> TargetKind {
        TargetKind::auto_functionalized(self.operator_name()).unwrap_or(TargetKind::Other)
    }

    /// The form of a node whose target is of `kind`, or `None` when it is
    /// not an auto_functionalized node (or one of an operator no form reads).
    #[must_use]
    pub fn of_kind(kind: TargetKind) -> Option<Form> {
        match kind {
            TargetKind::AutoFunctionalized(op) => Self::ALL
                .into_iter()
                .find(|f| f.operator_name() == op.name()),
            _ => None,
        }
    }
}

impl std::fmt::Display for Form {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rule: a stable name and the parser of the nodes it reads.
pub trait Rule: Sync {
    /// Stable name, used in reports.
    fn name(&self) -> &'static str;
    /// `None` when this rule does not read `node`; otherwise the parsed
    /// call, or why it cannot be rewritten (the node is then left to
    /// Inductor).
    fn parse(&self, graph: &Graph, node: NodeId) -> Option<Result<FormCall, String>>;
}

/// Every rule.
#[must_use]
pub fn registry() -> &'static [&'static dyn Rule] {
    &[
        &out_buffers_v2::OutBuffersV2,
        &reinplace_v2::ReinplaceV2,
        &reinplace_v1::ReinplaceV1,
    ]
}

/// The names of all registered rules, for cache keys and `--help`.
#[must_use]
pub fn rule_names() -> Vec<&'static str> {
    registry().iter().map(|f| f.name()).collect()
}

/// The rule name a report gives a node no rule read, or one the caller
/// asked to leave.
pub const NO_RULE: &str = "none";

/// The registered rule named `name`, or [`NO_RULE`]: the name as the engine
/// keeps it; `None` for a name that is neither.
#[must_use]
pub fn rule_named(name: &str) -> Option<&'static str> {
    rule_names()
        .into_iter()
        .chain([NO_RULE])
        .find(|rule| *rule == name)
}

/// A rule's name as the engine keeps it (one of [`rule_names`] or
/// [`NO_RULE`]). Named so a report's `rule` field is not a `&str` to serde,
/// which would take it for a name borrowed from the input and make reports
/// readable only from `'static` data; [`deserialize_rule`] looks the name
/// up instead.
pub type RuleName = &'static str;

/// Reads a report's `rule` field: a name [`rule_named`] knows, kept as the
/// engine keeps it; any other name is an error that quotes it.
///
/// # Errors
/// The name is no registered rule and not [`NO_RULE`].
pub fn deserialize_rule<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<RuleName, D::Error> {
    let name = String::deserialize(deserializer)?;
    rule_named(&name).ok_or_else(|| {
        serde::de::Error::invalid_value(
            serde::de::Unexpected::Str(&name),
            &"a registered rule's name or \"none\"",
        )
    })
}

/// The name of the rule that claims `node` and what it parsed, or `None`
/// when no rule does (not an auto_functionalized node of a known kind).
#[must_use]
pub fn parse(graph: &Graph, node: NodeId) -> Option<(&'static str, Result<FormCall, String>)> {
    let mut found = registry()
        .iter()
        .filter_map(|f| f.parse(graph, node).map(|r| (f.name(), r)));
    let first = found.next();
    debug_assert!(found.next().is_none(), "two rules claim one node");
    first
}

/// Small graphs for the rules' unit tests: `x = input`, then one
/// auto_functionalized node of a mutating operator.
#[cfg(test)]
pub(crate) mod test_graph {
    use crate::ir::schema::{AliasInfo, ArgType, OpSchema, OpTags, SchemaArg};
    use crate::ir::{Graph, Node, NodeId, OpCode, Target, TargetKind, Value};

    /// `name(Tensor(a!) x, float s) -> ()`, with the given tags.
    pub fn scale_op(name: &str, tags: OpTags) -> Target {
        let arg = |n: &str, ty: ArgType, write: bool| SchemaArg {
            name: n.into(),
            ty,
            alias: write.then(|| AliasInfo {
                set: "a".into(),
                is_write: true,
            }),
            kwarg_only: false,
        };
        Target {
            name: name.into(),
            kind: TargetKind::Operator,
            schema: Some(OpSchema {
                args: vec![
                    arg("x", ArgType::Tensor, true),
                    arg("s", ArgType::Other, false),
                ],
                returns: vec![],
                tags,
            }),
        }
    }

    /// The graph `x = input; af = <kind>(op, **kwargs)`, and the af node.
    pub fn af_graph(kind: TargetKind, op: Target, kwargs: Vec<(&str, Value)>) -> (Graph, NodeId) {
        let mut g = Graph::new();
        let other = |g: &mut Graph, name: &str| {
            g.add_target(Target {
                name: name.into(),
                kind: TargetKind::Other,
                schema: None,
            })
        };
        let t = other(&mut g, "x");
        g.add_node(Node {
            op: OpCode::Placeholder,
            name: "x".into(),
            target: t,
            args: vec![],
            kwargs: vec![],
            meta: None,
            source: None,
        });
        let op = g.add_target(op);
        let af_name = match kind {
            TargetKind::AutoFunctionalized(op) => format!("higher_order.{}", op.name()),
            _ => "higher_order.auto_functionalized_v2".to_string(),
        };
        let af_t = g.add_target(Target {
            name: af_name,
            kind,
            schema: None,
        });
        let af = g.add_node(Node {
            op: OpCode::CallFunction,
            name: "af".into(),
            target: af_t,
            args: vec![Value::Target(op)],
            kwargs: kwargs
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            meta: None,
            source: None,
        });
        (g, af)
    }

    /// The node reference `x`.
    pub fn x() -> Value {
        Value::Node(NodeId(0))
    }
}

#[cfg(test)]
mod tests {
    use super::test_graph::{af_graph, scale_op, x};
    use super::*;
    use crate::ir::schema::OpTags;
    use crate::ir::{TargetKind, Value};

    #[test]
    fn rule_named_knows_every_rule_and_none_other() {
        for name in rule_names() {
            assert_eq!(rule_named(name), Some(name));
        }
        assert_eq!(rule_named(NO_RULE), Some(NO_RULE));
        assert_eq!(rule_named("reinplace_v3"), None);
    }

    #[test]
    fn exactly_one_rule_claims_each_kind_of_node() {
        let v1 = af_graph(
            Form::V1.kind(),
            scale_op("m::scale_.default", OpTags::default()),
            vec![("x", x()), ("s", Value::Float(2.0))],
        );
        assert_eq!(parse(&v1.0, v1.1).map(|(n, _)| n), Some("reinplace_v1"));
        let v2 = af_graph(
            Form::V2.kind(),
            scale_op("m::scale_.default", OpTags::default()),
            vec![
                ("s", Value::Float(2.0)),
                ("_x_base_index", Value::Int(0)),
                ("_all_bases", Value::List(vec![x()])),
            ],
        );
        assert_eq!(parse(&v2.0, v2.1).map(|(n, _)| n), Some("reinplace_v2"));
        let out = OpTags {
            out: true,
            ..OpTags::default()
        };
        let v2_out = af_graph(
            Form::V2.kind(),
            scale_op("m::scale.out", out),
            vec![
                ("s", Value::Float(2.0)),
                ("_x_size", Value::List(vec![Value::Int(4)])),
                ("_x_stride", Value::List(vec![Value::Int(1)])),
                ("_x_dtype", Value::Dtype("float32".into())),
                ("_x_device", Value::Device("cpu".into())),
                ("_all_bases", Value::List(vec![])),
            ],
        );
        assert_eq!(
            parse(&v2_out.0, v2_out.1).map(|(n, _)| n),
            Some("out_buffers_v2")
        );
        // An input is not an auto_functionalized node: no rule claims it.
        assert!(parse(&v1.0, crate::ir::NodeId(0)).is_none());
    }

    #[test]
    fn a_form_is_written_as_its_stable_name() {
        for form in Form::ALL {
            let json = serde_json::to_string(&form).unwrap();
            assert_eq!(json, format!("\"{}\"", form.as_str()));
            assert_eq!(form.to_string(), form.as_str());
        }
        assert_eq!(Form::V1.as_str(), "v1");
        assert_eq!(Form::V2.as_str(), "v2");
        assert_eq!(
            Form::of_kind(TargetKind::auto_functionalized("auto_functionalized").unwrap()),
            Some(Form::V1)
        );
        assert_eq!(
            Form::of_kind(TargetKind::auto_functionalized("auto_functionalized_v2").unwrap()),
            Some(Form::V2)
        );
        assert_eq!(Form::of_kind(TargetKind::Operator), None);
    }

    #[test]
    fn each_form_has_its_operator_in_the_ir_table_and_each_operator_a_form() {
        let table: Vec<&str> = crate::ir::AUTO_FUNCTIONALIZED
            .iter()
            .map(|(n, _)| *n)
            .collect();
        let forms: Vec<&str> = Form::ALL.iter().map(|f| f.operator_name()).collect();
        assert_eq!(table, forms);
        for form in Form::ALL {
            assert_eq!(Form::of_kind(form.kind()), Some(form));
            let code = form.kind().code();
            assert_eq!(TargetKind::from_code(code), Some(form.kind()));
        }
    }

    #[test]
    fn names_are_stable_and_distinct() {
        let names = rule_names();
        assert_eq!(names, ["out_buffers_v2", "reinplace_v2", "reinplace_v1"]);
    }
}
