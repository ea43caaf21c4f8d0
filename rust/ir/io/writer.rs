//! Encoding a [`Graph`] as a `.fxir` file. Writing trusts its input (any
//! in-memory graph can be written); only the reader treats bytes as hostile,
//! so the two directions live apart.

use std::collections::HashMap;

use super::crc::crc32;
use super::format::*;
#[cfg(doc)]
use super::read;
use crate::ir::schema::{AliasInfo, OpSchema};
#[cfg(doc)]
use crate::ir::validate::validate;
use crate::ir::{static_dims, Dim, Graph, Node, TensorMeta, Value};

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    put_varint(out, n as u64);
}

/// The string interner of the writer: each distinct string gets the index of
/// its first use.
#[derive(Default)]
struct Strings<'g> {
    index: HashMap<&'g str, u64>,
    list: Vec<&'g str>,
}

impl<'g> Strings<'g> {
    fn put(&mut self, out: &mut Vec<u8>, s: &'g str) {
        let next = self.list.len() as u64;
        let id = *self.index.entry(s).or_insert(next);
        if id == next {
            self.list.push(s);
        }
        put_varint(out, id);
    }
}

fn alias_flags(alias: Option<&AliasInfo>) -> u8 {
    match alias {
        None => 0,
        Some(a) if a.is_write => ALIAS_PRESENT | ALIAS_WRITE,
        Some(_) => ALIAS_PRESENT,
    }
}

fn put_schema<'g>(out: &mut Vec<u8>, s: &mut Strings<'g>, schema: &'g OpSchema) {
    put_len(out, schema.args.len());
    for a in &schema.args {
        s.put(out, &a.name);
        out.push(a.ty.code());
        let kw = if a.kwarg_only { ARG_KWARG_ONLY } else { 0 };
        out.push(alias_flags(a.alias.as_ref()) | kw);
        if let Some(al) = &a.alias {
            s.put(out, &al.set);
        }
    }
    put_len(out, schema.returns.len());
    for r in &schema.returns {
        out.push(r.ty.code());
        out.push(alias_flags(r.alias.as_ref()));
        if let Some(al) = &r.alias {
            s.put(out, &al.set);
        }
    }
    out.push(schema.tags.bits());
}

fn put_value<'g>(out: &mut Vec<u8>, s: &mut Strings<'g>, v: &'g Value, at: i64) {
    match v {
        Value::None => out.push(TAG_NONE),
        Value::Bool(b) => {
            out.push(TAG_BOOL);
            out.push(u8::from(*b));
        }
        Value::Int(i) => {
            out.push(TAG_INT);
            put_varint(out, zigzag(*i));
        }
        Value::Float(f) => {
            out.push(TAG_FLOAT);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Str(x) => {
            out.push(TAG_STR);
            s.put(out, x);
        }
        Value::Node(n) => {
            // Backward distance minus one: the previous node is 0.
            out.push(TAG_NODE);
            put_varint(out, zigzag(at.wrapping_sub(1).wrapping_sub(i64::from(n.0))));
        }
        Value::List(items) | Value::Tuple(items) => {
            out.push(if matches!(v, Value::List(_)) {
                TAG_LIST
            } else {
                TAG_TUPLE
            });
            put_len(out, items.len());
            for item in items {
                put_value(out, s, item, at);
            }
        }
        Value::Dtype(x) => {
            out.push(TAG_DTYPE);
            s.put(out, x);
        }
        Value::Device(x) => {
            out.push(TAG_DEVICE);
            s.put(out, x);
        }
        Value::Layout(x) => {
            out.push(TAG_LAYOUT);
            s.put(out, x);
        }
        Value::MemoryFormat(x) => {
            out.push(TAG_MEMORY_FORMAT);
            s.put(out, x);
        }
        Value::Target(t) => {
            out.push(TAG_TARGET);
            put_varint(out, u64::from(t.0));
        }
        Value::Opaque(x) => {
            out.push(TAG_OPAQUE);
            s.put(out, x);
        }
    }
}

fn put_dim<'g>(out: &mut Vec<u8>, s: &mut Strings<'g>, d: &'g Dim, tagged: bool) {
    match d {
        Dim::Static(v) => {
            if tagged {
                out.push(DIM_STATIC);
            }
            put_varint(out, zigzag(*v));
        }
        Dim::Symbolic(expr) => {
            debug_assert!(tagged, "a symbolic dimension is written tagged");
            out.push(DIM_SYMBOLIC);
            s.put(out, expr);
        }
    }
}

fn put_dims<'g>(out: &mut Vec<u8>, s: &mut Strings<'g>, dims: &'g [Dim], tagged: bool) {
    put_len(out, dims.len());
    for d in dims {
        put_dim(out, s, d, tagged);
    }
}

fn put_meta<'g>(out: &mut Vec<u8>, s: &mut Strings<'g>, m: &'g TensorMeta, prev_storage: &mut u64) {
    s.put(out, &m.dtype);
    s.put(out, &m.device);
    put_varint(out, u64::from(m.itemsize));
    let symbolic = m
        .sizes
        .iter()
        .chain(m.strides.iter().flatten())
        .chain(m.offset.iter())
        .any(|d| matches!(d, Dim::Symbolic(_)));
    // A strided meta has both strides and an offset; one without either is
    // written as not strided (the reader would refuse half of it).
    let strided = match (&m.strides, &m.offset) {
        (Some(strides), Some(_)) => Some(strides),
        _ => None,
    };
    let contiguous = match (m.shape(), strided) {
        (Some(shape), Some(strides)) => {
            contiguous_strides(&shape).is_some_and(|c| static_dims(&c) == *strides)
        }
        _ => false,
    };
    let mut flags = 0;
    if strided.is_some() {
        flags |= META_STRIDED;
    }
    if contiguous {
        flags |= META_CONTIGUOUS;
    }
    if symbolic {
        flags |= META_SYMBOLIC;
    }
    if m.storage.is_some() {
        flags |= META_STORAGE;
    }
    out.push(flags);
    put_dims(out, s, &m.sizes, symbolic);
    if let Some(strides) = strided {
        if !contiguous {
            put_dims(out, s, strides, symbolic);
        }
        if let Some(offset) = &m.offset {
            put_dim(out, s, offset, symbolic);
        }
    }
    if let Some(storage) = m.storage {
        put_varint(out, zigzag(storage.wrapping_sub(*prev_storage) as i64));
        *prev_storage = storage;
    }
}

fn put_node<'g>(
    out: &mut Vec<u8>,
    s: &mut Strings<'g>,
    node: &'g Node,
    at: i64,
    prev_storage: &mut u64,
) {
    let mut head = node.op.code() & NODE_OP_MASK;
    if node.meta.is_some() {
        head |= NODE_HAS_META;
    }
    if node.source.is_some() {
        head |= NODE_HAS_SOURCE;
    }
    out.push(head);
    s.put(out, &node.name);
    put_varint(out, u64::from(node.target.0));
    put_len(out, node.args.len());
    for a in &node.args {
        put_value(out, s, a, at);
    }
    put_len(out, node.kwargs.len());
    for (k, v) in &node.kwargs {
        s.put(out, k);
        put_value(out, s, v, at);
    }
    if let Some(m) = &node.meta {
        put_meta(out, s, m, prev_storage);
    }
    if let Some(src) = &node.source {
        s.put(out, src);
    }
}

/// Encodes `graph` and the provenance `extra` as a `.fxir` file.
///
/// Any graph can be written; [`read`] accepts the result exactly when the
/// graph passes [`validate`]. The output is deterministic: equal inputs give
/// equal bytes.
#[must_use]
pub fn write(graph: &Graph, extra: &FileInfo) -> Vec<u8> {
    let mut s = Strings::default();

    let mut info = Vec::new();
    put_len(&mut info, extra.entries.len());
    for (k, v) in &extra.entries {
        s.put(&mut info, k);
        s.put(&mut info, v);
    }

    let mut targets = Vec::new();
    put_len(&mut targets, graph.targets.len());
    for t in &graph.targets {
        s.put(&mut targets, &t.name);
        targets.push(t.kind.code());
        match &t.schema {
            None => targets.push(0),
            Some(schema) => {
                targets.push(1);
                put_schema(&mut targets, &mut s, schema);
            }
        }
    }

    let mut nodes = Vec::with_capacity(graph.nodes.len().saturating_mul(24));
    put_len(&mut nodes, graph.nodes.len());
    let mut prev_storage = 0u64;
    for (i, node) in graph.nodes.iter().enumerate() {
        let at = i64::try_from(i).unwrap_or(i64::MAX);
        put_node(&mut nodes, &mut s, node, at, &mut prev_storage);
    }

    let mut strings = Vec::new();
    put_len(&mut strings, s.list.len());
    for x in &s.list {
        put_len(&mut strings, x.len());
        strings.extend_from_slice(x.as_bytes());
    }

    let sections = [
        (SECTION_STRINGS, strings),
        (SECTION_INFO, info),
        (SECTION_TARGETS, targets),
        (SECTION_NODES, nodes),
    ];
    let total = HEADER_LEN
        + sections
            .iter()
            .map(|(_, p)| 1 + varint_len(p.len() as u64) + p.len())
            .sum::<usize>()
        + CHECKSUM_LEN;

    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    out.extend_from_slice(&(total as u64).to_le_bytes());
    for (tag, payload) in &sections {
        out.push(*tag);
        put_len(&mut out, payload.len());
        out.extend_from_slice(payload);
    }
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}
