//! How a [`Value`] reads in a reason or an error message.
//!
//! Reasons reach users (reports, `FxrewriteError` messages), so they spell a
//! value the way a Python user would recognise it (`None`, `[1, 2]`,
//! `torch.float32`) and a node reference as `node 3`, never through `Debug`
//! (`Node(NodeId(3))`), whose text also changes whenever the enum does.

use std::fmt;

use super::Value;

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::None => f.write_str("None"),
            Value::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            Value::Int(i) => write!(f, "{i}"),
            // `Debug` keeps the `.0` of a whole float, as Python's repr does.
            Value::Float(x) => write!(f, "{x:?}"),
            Value::Str(s) => write!(f, "'{s}'"),
            Value::Node(n) => write!(f, "node {}", n.0),
            Value::List(items) => {
                f.write_str("[")?;
                write_items(f, items)?;
                f.write_str("]")
            }
            Value::Tuple(items) => {
                f.write_str("(")?;
                write_items(f, items)?;
                // A one-element tuple keeps its comma, as in Python.
                f.write_str(if items.len() == 1 { ",)" } else { ")" })
            }
            Value::Dtype(s) | Value::Layout(s) | Value::MemoryFormat(s) => {
                write!(f, "torch.{s}")
            }
            Value::Device(s) => write!(f, "device '{s}'"),
            Value::Target(t) => write!(f, "target {}", t.0),
            Value::Opaque(repr) => f.write_str(repr),
        }
    }
}

fn write_items(f: &mut fmt::Formatter<'_>, items: &[Value]) -> fmt::Result {
    for (i, v) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{v}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{NodeId, TargetId};

    #[test]
    fn values_read_as_python_and_nodes_by_number() {
        let cases = [
            (Value::Node(NodeId(3)), "node 3"),
            (Value::None, "None"),
            (Value::Bool(true), "True"),
            (Value::Int(-2), "-2"),
            (Value::Float(2.0), "2.0"),
            (Value::Str("x".into()), "'x'"),
            (
                Value::List(vec![Value::Int(1), Value::Node(NodeId(0))]),
                "[1, node 0]",
            ),
            (Value::Tuple(vec![Value::Int(1)]), "(1,)"),
            (Value::Tuple(vec![]), "()"),
            (Value::Dtype("float32".into()), "torch.float32"),
            (Value::Device("cuda:0".into()), "device 'cuda:0'"),
            (Value::Target(TargetId(5)), "target 5"),
            (Value::Opaque("<object>".into()), "<object>"),
        ];
        for (v, text) in cases {
            assert_eq!(v.to_string(), text);
        }
    }
}
