//! Prints a graph the way `print(torch.fx.Graph)` does.
//!
//! ```text
//! graph():
//!     %arg0_1 : [num_users=1] = placeholder[target=arg0_1]
//!     %mm : [num_users=2] = call_function[target=torch.ops.aten.mm.default](args = (%arg0_1, %arg1_1), kwargs = {})
//!     return (mm,)
//! ```
//!
//! Arguments are formatted as `torch.fx.node._format_arg` formats them: node
//! references as `%name`, containers recursively, every other value as its
//! Python `str` (so strings print without quotes, devices as `cuda:0`). The
//! output node prints `return ` and the Python `str` of its first argument,
//! where the elements of containers print as their `repr`.

use std::fmt::Write as _;

use super::{Graph, NodeId, OpCode, Target, TargetId, TargetKind, Value};

/// The text `print(torch.fx.Graph)` gives for `graph`. Never panics, even on
/// a graph that breaks the IR invariants (unknown indices print as `#i`).
#[must_use]
pub fn to_fx_text(graph: &Graph) -> String {
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); graph.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        node.for_each_operand(|o| {
            if let Some(u) = users.get_mut(o.idx()) {
                if u.last() != Some(&i) {
                    u.push(i);
                }
            }
        });
    }
    let mut s = String::from("graph():");
    for (i, node) in graph.nodes.iter().enumerate() {
        let target = graph.targets.get(node.target.idx());
        let target_text = target.map_or_else(
            || format!("#{}", node.target.0),
            |t| pretty_target(node.op, t),
        );
        let num_users = users.get(i).map_or(0, Vec::len);
        s.push_str("\n    ");
        match node.op {
            OpCode::Placeholder => {
                let _ = write!(
                    s,
                    "%{} : [num_users={num_users}] = placeholder[target={target_text}]",
                    node.name
                );
                if let Some(default) = node.args.first() {
                    let _ = write!(s, "(default={})", py_str(graph, default));
                }
            }
            OpCode::GetAttr => {
                let _ = write!(
                    s,
                    "%{} : [num_users={num_users}] = get_attr[target={target_text}]",
                    node.name
                );
            }
            OpCode::Output => {
                let ret = node
                    .args
                    .first()
                    .map_or_else(|| "None".to_string(), |v| py_str(graph, v));
                let _ = write!(s, "return {ret}");
            }
            OpCode::CallFunction | OpCode::CallMethod | OpCode::CallModule => {
                let mut args = String::new();
                fx_seq(graph, &node.args, true, &mut args);
                let mut kwargs = String::from("{");
                for (k, (key, v)) in node.kwargs.iter().enumerate() {
                    if k > 0 {
                        kwargs.push_str(", ");
                    }
                    kwargs.push_str(key);
                    kwargs.push_str(": ");
                    fx_arg(graph, v, &mut kwargs);
                }
                kwargs.push('}');
                let _ = write!(
                    s,
                    "%{} : [num_users={num_users}] = {}[target={target_text}](args = {args}, kwargs = {kwargs})",
                    node.name,
                    node.op.fx_name()
                );
            }
        }
    }
    s
}

/// `Node._pretty_print_target` of a target as the encoder names it.
fn pretty_target(op: OpCode, t: &Target) -> String {
    if !matches!(op, OpCode::CallFunction) {
        // Placeholder, attribute, method and module targets are strings.
        return t.name.clone();
    }
    match t.kind {
        TargetKind::Getitem => "operator.getitem".into(),
        TargetKind::Operator => match t.name.split_once("::") {
            Some((ns, rest)) => format!("torch.ops.{ns}.{rest}"),
            None => t.name.clone(),
        },
        TargetKind::AutoFunctionalized(_) | TargetKind::HigherOrder => {
            if t.name.starts_with("higher_order.") {
                format!("torch.ops.{}", t.name)
            } else {
                t.name.clone()
            }
        }
        TargetKind::Other => {
            if let Some(rest) = t.name.strip_prefix("_operator.") {
                format!("operator.{rest}")
            } else if let Some(rest) = t.name.strip_prefix("torch._ops.") {
                format!("torch.ops.{rest}")
            } else {
                t.name.clone()
            }
        }
    }
}

fn node_name(graph: &Graph, n: NodeId) -> String {
    graph
        .nodes
        .get(n.idx())
        .map_or_else(|| format!("#{}", n.0), |node| node.name.clone())
}

/// `str(OpOverload)`: `ns.name.overload`.
fn target_str(graph: &Graph, t: TargetId) -> String {
    graph.targets.get(t.idx()).map_or_else(
        || format!("#{}", t.0),
        |t| match t.name.split_once("::") {
            Some((ns, rest)) => format!("{ns}.{rest}"),
            None => t.name.clone(),
        },
    )
}

/// `_format_arg` of a tuple or list body.
fn fx_seq(graph: &Graph, items: &[Value], tuple: bool, out: &mut String) {
    out.push(if tuple { '(' } else { '[' });
    for (k, item) in items.iter().enumerate() {
        if k > 0 {
            out.push_str(", ");
        }
        fx_arg(graph, item, out);
    }
    if tuple && items.len() == 1 {
        out.push(',');
    }
    out.push(if tuple { ')' } else { ']' });
}

/// `torch.fx.node._format_arg`.
fn fx_arg(graph: &Graph, v: &Value, out: &mut String) {
    match v {
        Value::Node(n) => {
            out.push('%');
            out.push_str(&node_name(graph, *n));
        }
        Value::List(items) => fx_seq(graph, items, false, out),
        Value::Tuple(items) => fx_seq(graph, items, true, out),
        other => out.push_str(&py_str(graph, other)),
    }
}

/// Python `str(v)`.
fn py_str(graph: &Graph, v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        Value::Node(n) => node_name(graph, *n),
        Value::Device(d) => d.clone(),
        Value::Target(t) => target_str(graph, *t),
        other => py_repr(graph, other),
    }
}

/// Python `repr(v)`.
fn py_repr(graph: &Graph, v: &Value) -> String {
    match v {
        Value::None => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => float_repr(*f),
        Value::Str(s) => str_repr(s),
        Value::Node(n) => node_name(graph, *n),
        Value::List(items) | Value::Tuple(items) => {
            let tuple = matches!(v, Value::Tuple(_));
            let body: Vec<String> = items.iter().map(|i| py_repr(graph, i)).collect();
            let mut s = String::from(if tuple { "(" } else { "[" });
            s.push_str(&body.join(", "));
            if tuple && items.len() == 1 {
                s.push(',');
            }
            s.push(if tuple { ')' } else { ']' });
            s
        }
        Value::Dtype(d) => format!("torch.{d}"),
        Value::Device(d) => match d.split_once(':') {
            Some((ty, index)) => format!("device(type='{ty}', index={index})"),
            None => format!("device(type='{d}')"),
        },
        Value::Layout(l) => format!("torch.{l}"),
        Value::MemoryFormat(m) => format!("torch.{m}"),
        Value::Target(t) => match graph.targets.get(t.idx()).map(|t| t.name.split_once("::")) {
            Some(Some((ns, rest))) => {
                let (name, overload) = rest.split_once('.').unwrap_or((rest, "default"));
                format!("<OpOverload(op='{ns}.{name}', overload='{overload}')>")
            }
            _ => target_str(graph, *t),
        },
        Value::Opaque(s) => s.clone(),
    }
}

/// Python `repr(str)`.
fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python `repr(float)`: the shortest round-tripping digits, in positional
/// notation for exponents -4..16 and scientific (`1e-06`) otherwise.
fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let sci = format!("{f:e}");
    let (sign, sci) = match sci.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", sci.as_str()),
    };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let ndigits = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    let decpt = exp + 1;
    let mut out = String::from(sign);
    if decpt <= -4 || decpt > 16 {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        let _ = write!(out, "e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..(-decpt) {
            out.push('0');
        }
        out.push_str(&digits);
    } else if decpt >= ndigits {
        out.push_str(&digits);
        for _ in 0..(decpt - ndigits) {
            out.push('0');
        }
        out.push_str(".0");
    } else {
        let cut = usize::try_from(decpt).unwrap_or(0);
        out.push_str(&digits[..cut]);
        out.push('.');
        out.push_str(&digits[cut..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python() {
        let cases = [
            (1e-6, "1e-06"),
            (2.0, "2.0"),
            (0.5, "0.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (123.456, "123.456"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (-3.25, "-3.25"),
            (0.1, "0.1"),
            (1e100, "1e+100"),
            (f64::INFINITY, "inf"),
            (f64::NAN, "nan"),
        ];
        for (f, want) in cases {
            assert_eq!(float_repr(f), want, "{f:?}");
        }
    }

    #[test]
    fn strings_repr_like_python() {
        assert_eq!(str_repr("a"), "'a'");
        assert_eq!(str_repr("it's"), "\"it's\"");
        assert_eq!(str_repr("a\nb\\"), "'a\\nb\\\\'");
    }
}
