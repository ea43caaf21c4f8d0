//! `reinplace_v2`: an `auto_functionalized_v2` node becomes a direct call of
//! its mutating operator on its real bases (or on clones where the safety
//! analysis says a later reader needs the old value), with each written view
//! regenerated on its base exactly as torch's own dense implementation does.

use super::call::{
    alias_groups, collect_nodes, fresh_slots, is_ir_only_kwarg, mutable_op, return_alias_args,
    return_slots, slot_label, Buffer, CallArg, MutationCall, ResultSlot, ViewOfBuffer, WrittenArg,
};
use super::{Form, FormCall, Rule};
use crate::ir::{ArgType, Graph, NodeId, SchemaArg, Value};

/// The rule (its name and parser).
pub struct ReinplaceV2;

/// True when `node` is an `auto_functionalized_v2` with `base` among its
/// `_all_bases` and a written view given by storage offset (an `as_strided`
/// cut, the encoding's one view that addresses storage directly).
#[must_use]
pub fn cuts_by_storage_offset_from(graph: &Graph, node: NodeId, base: NodeId) -> bool {
    if Form::of_kind(graph.target_of(node).kind) != Some(Form::V2) {
        return false;
    }
    let n = graph.node(node);
    let is_base = matches!(
        n.kwarg("_all_bases"),
        Some(Value::List(bases))
            if bases.iter().any(|b| matches!(b, Value::Node(x) if *x == base))
    );
    is_base && n.kwargs.iter().any(|(k, _)| k.ends_with("_storage_offset"))
}

impl Rule for ReinplaceV2 {
    fn name(&self) -> &'static str {
        "reinplace_v2"
    }

    fn parse(&self, graph: &Graph, node: NodeId) -> Option<Result<FormCall, String>> {
        let mine = Form::of_kind(graph.target_of(node).kind) == Some(Form::V2)
            && !mutable_op(graph, node).is_ok_and(|(_, s)| s.tags.out);
        mine.then(|| parse(graph, node).map(FormCall::Mutation))
    }
}

/// The keyword `key` of a node's keyword list.
fn kwarg<'v>(kwargs: &'v [(String, Value)], key: &str) -> Option<&'v Value> {
    kwargs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Reads the view info of one written argument with key prefix `prefix`
/// (`_x` or `_xs_1`), marking the keys it consumes.
fn read_view(
    kwargs: &[(String, Value)],
    prefix: &str,
    used: &mut Vec<String>,
) -> Result<Option<(usize, ViewOfBuffer)>, String> {
    let key = |s: &str| format!("{prefix}_{s}");
    let base_key = key("base_index");
    used.push(base_key.clone());
    let base = match kwarg(kwargs, &base_key) {
        Some(Value::Int(i)) => usize::try_from(*i).map_err(|_| format!("negative {base_key}"))?,
        Some(Value::None) => return Ok(None),
        None => return Err(format!("missing {base_key}")),
        Some(other) => return Err(format!("unexpected {base_key} = {other}")),
    };
    let has = |s: &str| kwarg(kwargs, &key(s)).is_some();
    let view = if has("alias") {
        used.push(key("alias"));
        ViewOfBuffer::Alias
    } else if has("storage_offset") {
        let keys = [key("size"), key("stride"), key("storage_offset")];
        for k in &keys {
            if kwarg(kwargs, k).is_none() {
                return Err(format!("missing {k}"));
            }
        }
        used.extend(keys.iter().cloned());
        ViewOfBuffer::AsStrided { keys }
    } else if has("slice_dim") {
        let keys = [key("slice_dim"), key("slice_start"), key("slice_end")];
        for k in &keys {
            if kwarg(kwargs, k).is_none() {
                return Err(format!("missing {k}"));
            }
        }
        used.extend(keys.iter().cloned());
        ViewOfBuffer::Slice { keys }
    } else {
        ViewOfBuffer::Whole
    };
    Ok(Some((base, view)))
}

/// One written tensor of a v2 node as its keywords encode it: a view of
/// base `_all_bases[base]`.
#[derive(Clone, Debug, PartialEq)]
pub struct WrittenView {
    /// The slot's label (`x`, `xs[1]`): the labels alias-group records use.
    pub label: String,
    /// The index into `_all_bases`.
    pub base: usize,
    /// How the written tensor is cut from the base.
    pub view: ViewOfBuffer,
}

/// How a v2 node encodes one written argument of its operator.
#[derive(Clone, Debug, PartialEq)]
pub enum WrittenEncoding {
    /// A tensor argument; `None` when the argument is `None`.
    One(Option<WrittenView>),
    /// A tensor-list argument, per item (`None` items are `None`); `None`
    /// when the list itself is `None`.
    List(Option<Vec<Option<WrittenView>>>),
}

/// Reads written argument `arg` of a v2 node from its keywords (`kwargs`),
/// pushing the keys it consumes onto `used`: the one parser of the v2
/// encoding (`_x_base_index`, `_xs_length`, slices, as_strided views,
/// aliases). The pre pass reads a live node through
/// `fxrewrite._core.v2_written_views`; the applier an encoded one through
/// [`written_views`].
///
/// # Errors
/// A reason when a key is missing or holds an unexpected value, or `arg`
/// is not a tensor or tensor list.
pub fn read_written(
    kwargs: &[(String, Value)],
    arg: &SchemaArg,
    used: &mut Vec<String>,
) -> Result<WrittenEncoding, String> {
    let one = |label: String, prefix: String, used: &mut Vec<String>| {
        Ok::<_, String>(
            read_view(kwargs, &prefix, used)?.map(|(base, view)| WrittenView { label, base, view }),
        )
    };
    match arg.ty {
        ArgType::Tensor | ArgType::OptionalTensor => Ok(WrittenEncoding::One(one(
            arg.name.clone(),
            format!("_{}", arg.name),
            used,
        )?)),
        ArgType::TensorList => {
            let len_key = format!("_{}_length", arg.name);
            used.push(len_key.clone());
            match kwarg(kwargs, &len_key) {
                Some(Value::None) => Ok(WrittenEncoding::List(None)),
                Some(Value::Int(len)) => (0..*len)
                    .map(|i| one(slot_label(&arg.name, i), format!("_{}_{i}", arg.name), used))
                    .collect::<Result<Vec<_>, _>>()
                    .map(|items| WrittenEncoding::List(Some(items))),
                _ => Err(format!("missing or malformed {len_key}")),
            }
        }
        ArgType::Other => Err(format!("written argument '{}' is not a tensor", arg.name)),
    }
}

/// The written arguments of node `node` as its form encodes them, in
/// schema order, by argument name: what the applier needs to give the
/// direct call eager's layouts (`fxrewrite.fx_meta.eager_input_vals`),
/// read off the graph the plan was made from. `None` when the node's form
/// passes its written arguments as they are (nothing to cut), or the node
/// does not parse (then the call gets no eager layouts, as before).
#[must_use]
pub fn written_views(graph: &Graph, node: NodeId) -> Option<Vec<(String, WrittenEncoding)>> {
    let n = graph.node(node);
    let form = Form::of_kind(graph.targets[n.target.idx()].kind)?;
    if !form.buffers_are_bases() {
        return None;
    }
    let (_, schema) = mutable_op(graph, node).ok()?;
    let mut used = Vec::new();
    schema
        .args
        .iter()
        .filter(|a| a.is_written())
        .map(|arg| {
            Some((
                arg.name.clone(),
                read_written(&n.kwargs, arg, &mut used).ok()?,
            ))
        })
        .collect()
}

/// Parses a generic (or `Tag.inplace`) v2 node. Any keyword this build does
/// not know makes the node unsupported: a newer torch may have given it a
/// meaning we would silently drop.
pub fn parse(graph: &Graph, node: NodeId) -> Result<MutationCall, String> {
    let (op, schema) = mutable_op(graph, node)?;
    let n = graph.node(node);
    if n.kwarg("_only_clone_these_bases").is_some() {
        return Err(
            "already processed by Inductor's reinplace pass (_only_clone_these_bases is set)"
                .into(),
        );
    }
    if n.kwarg("_op_schema").is_some() {
        return Err("mutating higher-order operators (_op_schema) are not supported".into());
    }
    let bases: Vec<Option<NodeId>> = match n.kwarg("_all_bases") {
        Some(Value::List(items) | Value::Tuple(items)) => items
            .iter()
            .map(|v| match v {
                Value::Node(b) => Ok(Some(*b)),
                Value::None => Ok(None),
                other => Err(format!("unexpected _all_bases element {other}")),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err("missing _all_bases".into()),
    };
    let mut used: Vec<String> = vec!["_all_bases".into()];
    let mut buffers: Vec<Buffer> = Vec::new();
    let mut buffer_of_base: Vec<Option<usize>> = vec![None; bases.len()];
    let mut written: Vec<WrittenArg> = Vec::new();
    let mut call_args = Vec::new();
    let mut read_nodes = Vec::new();
    let mut buffer_for = |base: usize, buffers: &mut Vec<Buffer>| -> Result<usize, String> {
        let b = *bases
            .get(base)
            .ok_or_else(|| format!("base index {base} out of range"))?;
        let b = b.ok_or_else(|| format!("_all_bases[{base}] is None"))?;
        if let Some(i) = buffer_of_base[base] {
            return Ok(i);
        }
        buffers.push(Buffer {
            label: format!("_all_bases[{base}]"),
            node: b,
        });
        buffer_of_base[base] = Some(buffers.len() - 1);
        Ok(buffers.len() - 1)
    };
    for a in &schema.args {
        if !a.is_written() {
            match n.kwarg(&a.name) {
                Some(v) => collect_nodes(&a.name, v, &mut read_nodes),
                None => return Err(format!("missing argument '{}'", a.name)),
            }
            used.push(a.name.clone());
            call_args.push((a.name.clone(), a.kwarg_only, CallArg::Kwarg(a.name.clone())));
            continue;
        }
        let mut written_view = |w: WrittenView, buffers: &mut Vec<Buffer>| {
            let buffer = buffer_for(w.base, buffers)?;
            written.push(WrittenArg {
                label: w.label,
                buffer,
                view: w.view,
            });
            Ok::<_, String>(written.len() - 1)
        };
        let call_arg = match read_written(&n.kwargs, a, &mut used)? {
            WrittenEncoding::One(None) | WrittenEncoding::List(None) => CallArg::None,
            WrittenEncoding::One(Some(w)) => CallArg::Written(written_view(w, &mut buffers)?),
            WrittenEncoding::List(Some(items)) => CallArg::WrittenList(
                items
                    .into_iter()
                    .map(|w| w.map(|w| written_view(w, &mut buffers)).transpose())
                    .collect::<Result<_, _>>()?,
            ),
        };
        call_args.push((a.name.clone(), a.kwarg_only, call_arg));
    }
    if let Some((k, _)) = n
        .kwargs
        .iter()
        .find(|(k, _)| !used.contains(k) && !is_ir_only_kwarg(k))
    {
        return Err(format!(
            "unknown auto_functionalized_v2 argument '{k}' (graph from a newer torch?)"
        ));
    }
    if bases
        .iter()
        .enumerate()
        .any(|(i, b)| b.is_some() && buffer_of_base[i].is_none())
    {
        return Err("a base in _all_bases is not used by any written argument".into());
    }
    let n_out = return_slots(schema);
    let mut results: Vec<ResultSlot> = (0..n_out).map(ResultSlot::Return).collect();
    for b in &buffer_of_base {
        results.push(b.map_or(ResultSlot::BufferList(vec![]), ResultSlot::Buffer));
    }
    let written_schema: Vec<usize> = schema.written_args().map(|(i, _)| i).collect();
    let return_aliases = return_alias_args(schema)
        .into_iter()
        .map(|ai| {
            let ai = ai?;
            let name = &schema.args[ai].name;
            (schema.args[ai].ty != ArgType::TensorList && written_schema.contains(&ai))
                .then(|| written.iter().position(|w| &w.label == name))
                .flatten()
        })
        .collect();
    Ok(MutationCall {
        node,
        op,
        form: Form::V2,
        buffers,
        written,
        call_args,
        results,
        return_aliases,
        read_nodes,
        alias_groups: alias_groups(graph, node),
        fresh_slots: fresh_slots(graph, node),
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_graph::{af_graph, scale_op, x};
    use super::*;
    use crate::forms::Form;
    use crate::ir::schema::OpTags;

    fn node(extra: Vec<(&str, Value)>) -> (Graph, NodeId) {
        let mut kwargs = vec![
            ("s", Value::Float(2.0)),
            ("_all_bases", Value::List(vec![x()])),
        ];
        kwargs.extend(extra);
        af_graph(
            Form::V2.kind(),
            scale_op("m::scale_.default", OpTags::default()),
            kwargs,
        )
    }

    #[test]
    fn view_info_becomes_the_view_of_a_base() {
        let (g, af) = node(vec![("_x_base_index", Value::Int(0))]);
        let call = parse(&g, af).unwrap();
        assert_eq!(call.written[0].view, ViewOfBuffer::Whole);
        let (g, af) = node(vec![
            ("_x_base_index", Value::Int(0)),
            ("_x_slice_dim", Value::Int(0)),
            ("_x_slice_start", Value::Int(1)),
            ("_x_slice_end", Value::Int(3)),
        ]);
        let call = parse(&g, af).unwrap();
        assert!(matches!(call.written[0].view, ViewOfBuffer::Slice { .. }));
        let (g, af) = node(vec![
            ("_x_base_index", Value::Int(0)),
            ("_x_alias", Value::Bool(true)),
        ]);
        assert_eq!(parse(&g, af).unwrap().written[0].view, ViewOfBuffer::Alias);
    }

    #[test]
    fn a_newer_torch_keyword_or_a_bad_base_index_is_a_reason() {
        let (g, af) = node(vec![
            ("_x_base_index", Value::Int(0)),
            ("_x_new_info", Value::Int(1)),
        ]);
        assert!(parse(&g, af).unwrap_err().contains("newer torch"));
        let (g, af) = node(vec![("_x_base_index", Value::Int(5))]);
        assert!(parse(&g, af).unwrap_err().contains("out of range"));
    }
}

#[cfg(test)]
mod message_tests {
    use super::super::test_graph::{af_graph, scale_op, x};
    use super::*;
    use crate::forms::Form;
    use crate::ir::schema::OpTags;

    fn reason(kwargs: Vec<(&str, Value)>) -> String {
        let (g, af) = af_graph(
            Form::V2.kind(),
            scale_op("m::scale_.default", OpTags::default()),
            kwargs,
        );
        parse(&g, af).unwrap_err()
    }

    #[test]
    fn unexpected_values_read_as_values_not_debug_output() {
        let r = reason(vec![
            ("s", Value::Float(2.0)),
            ("_x_base_index", x()),
            ("_all_bases", Value::List(vec![x()])),
        ]);
        assert_eq!(r, "unexpected _x_base_index = node 0");
        let r = reason(vec![
            ("s", Value::Float(2.0)),
            ("_x_base_index", Value::Int(0)),
            ("_all_bases", Value::List(vec![Value::Str("b".into())])),
        ]);
        assert_eq!(r, "unexpected _all_bases element 'b'");
    }
}
