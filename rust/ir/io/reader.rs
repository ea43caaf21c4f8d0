//! Decoding the sections of a `.fxir` file into a [`Graph`]: the string
//! table, the file info, the targets with their schemas, the nodes with their
//! values and metadata, then [`validate`] on the result.

use super::cursor::Reader;
use super::envelope::envelope;
use super::format::*;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::ir::schema::{OpSchema, OpTags, SchemaArg, SchemaReturn};
use crate::ir::validate::{validate, MAX_VALUE_DEPTH};
use crate::ir::{
    static_dims, Dim, Graph, Node, NodeId, OpCode, Target, TargetId, TargetKind, TensorMeta, Value,
};

impl Reader<'_> {
    fn string_table(&mut self) -> Result<()> {
        let n = self.count("string count", 1)?;
        let mut strings = Vec::with_capacity(n);
        for i in 0..n {
            self.item = Some(("string", i));
            let start = self.pos;
            let len = self.count("string length", 1)?;
            let raw = self.bytes(len, "string bytes")?;
            let s = std::str::from_utf8(raw).map_err(|e| {
                self.err_at(
                    start,
                    format_args!("invalid UTF-8 at byte {} of the string", e.valid_up_to()),
                )
            })?;
            strings.push(s);
        }
        self.strings = strings;
        Ok(())
    }

    fn info(&mut self) -> Result<FileInfo> {
        let n = self.count("entry count", 2)?;
        let mut entries = Vec::with_capacity(n);
        for i in 0..n {
            self.item = Some(("entry", i));
            let k = self.string("key")?;
            let v = self.string("value")?;
            entries.push((k, v));
        }
        Ok(FileInfo { entries })
    }

    fn schema(&mut self) -> Result<OpSchema> {
        let n = self.count("schema argument count", 3)?;
        let mut args = Vec::with_capacity(n);
        for _ in 0..n {
            let name = self.string("argument name")?;
            let ty = self.arg_type("argument type")?;
            let flags = self.flags(
                "argument flags",
                ALIAS_PRESENT | ALIAS_WRITE | ARG_KWARG_ONLY,
            )?;
            let alias = self.alias(flags)?;
            args.push(SchemaArg {
                name,
                ty,
                alias,
                kwarg_only: flags & ARG_KWARG_ONLY != 0,
            });
        }
        let n = self.count("schema return count", 2)?;
        let mut returns = Vec::with_capacity(n);
        for _ in 0..n {
            let ty = self.arg_type("return type")?;
            let flags = self.flags("return flags", ALIAS_PRESENT | ALIAS_WRITE)?;
            let alias = self.alias(flags)?;
            returns.push(SchemaReturn { ty, alias });
        }
        let tags = OpTags::from_bits(self.flags("operator tags", KNOWN_TAG_BITS)?);
        Ok(OpSchema {
            args,
            returns,
            tags,
        })
    }

    fn targets(&mut self) -> Result<Vec<Target>> {
        let n = self.count("target count", 3)?;
        let mut targets = Vec::with_capacity(n);
        for i in 0..n {
            self.item = Some(("target", i));
            let name = self.string("target name")?;
            let start = self.pos;
            let c = self.u8("target kind")?;
            let kind = TargetKind::from_code(c)
                .ok_or_else(|| self.err_at(start, format_args!("bad target kind code {c}")))?;
            let start = self.pos;
            let schema = match self.u8("schema marker")? {
                0 => None,
                1 => Some(self.schema()?),
                m => return Err(self.err_at(start, format_args!("bad schema marker {m}"))),
            };
            targets.push(Target { name, kind, schema });
        }
        Ok(targets)
    }

    fn value(&mut self, at: usize, depth: usize) -> Result<Value> {
        let start = self.pos;
        if depth > MAX_VALUE_DEPTH {
            return Err(self.err_at(
                start,
                format_args!("argument nested deeper than {MAX_VALUE_DEPTH}"),
            ));
        }
        let tag = self.u8("value tag")?;
        Ok(match tag {
            TAG_NONE => Value::None,
            TAG_BOOL => {
                let b_at = self.pos;
                match self.u8("bool")? {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => return Err(self.err_at(b_at, format_args!("bad bool byte {b}"))),
                }
            }
            TAG_INT => Value::Int(self.signed("int")?),
            TAG_FLOAT => {
                let raw = self.bytes(8, "float")?;
                let mut a = [0u8; 8];
                a.copy_from_slice(raw);
                Value::Float(f64::from_bits(u64::from_le_bytes(a)))
            }
            TAG_STR => Value::Str(self.string("str")?),
            TAG_NODE => {
                let delta = self.signed("node reference")?;
                let id = i64::try_from(at)
                    .ok()
                    .and_then(|a| a.checked_sub(1)?.checked_sub(delta))
                    .and_then(|r| u32::try_from(r).ok())
                    .ok_or_else(|| {
                        self.err_at(start, format_args!("node reference {delta} out of range"))
                    })?;
                Value::Node(NodeId(id))
            }
            TAG_LIST | TAG_TUPLE => {
                let n = self.count("container length", 1)?;
                let mut items = Vec::with_capacity(n.min(PREALLOC_LIMIT));
                for _ in 0..n {
                    items.push(self.value(at, depth + 1)?);
                }
                if tag == TAG_LIST {
                    Value::List(items)
                } else {
                    Value::Tuple(items)
                }
            }
            TAG_DTYPE => Value::Dtype(self.string("dtype")?),
            TAG_DEVICE => Value::Device(self.string("device")?),
            TAG_LAYOUT => Value::Layout(self.string("layout")?),
            TAG_MEMORY_FORMAT => Value::MemoryFormat(self.string("memory format")?),
            TAG_TARGET => Value::Target(TargetId(self.u32("target reference")?)),
            TAG_OPAQUE => Value::Opaque(self.string("opaque")?),
            t => return Err(self.err_at(start, format_args!("bad value tag {t}"))),
        })
    }

    /// A meta's storage key, when `present`: delta-coded from the last one.
    fn storage_key(&mut self, present: bool) -> Result<Option<u64>> {
        if !present {
            return Ok(None);
        }
        let delta = self.signed("meta storage key")?;
        self.prev_storage = self.prev_storage.wrapping_add(delta as u64);
        Ok(Some(self.prev_storage))
    }

    fn dim(&mut self, what: &str, tagged: bool) -> Result<Dim> {
        let start = self.pos;
        let tag = if tagged { self.u8(what)? } else { DIM_STATIC };
        match tag {
            DIM_STATIC => Ok(Dim::Static(self.signed(what)?)),
            DIM_SYMBOLIC => Ok(Dim::Symbolic(self.string(what)?)),
            t => Err(self.err_at(start, format_args!("{what}: bad dimension tag {t}"))),
        }
    }

    fn dims(&mut self, what: &str, tagged: bool) -> Result<Vec<Dim>> {
        let n = self.count(what, 1)?;
        let mut xs = Vec::with_capacity(n.min(PREALLOC_LIMIT));
        for _ in 0..n {
            xs.push(self.dim(what, tagged)?);
        }
        Ok(xs)
    }

    fn meta(&mut self) -> Result<TensorMeta> {
        if self.version == 1 {
            return self.meta_v1();
        }
        let dtype = self.string("meta dtype")?;
        let device = self.string("meta device")?;
        let itemsize = self.u32("meta itemsize")?;
        let flags_at = self.pos;
        let flags = self.flags(
            "meta flags",
            META_STRIDED | META_STORAGE | META_CONTIGUOUS | META_SYMBOLIC,
        )?;
        if flags & META_CONTIGUOUS != 0 && flags & META_STRIDED == 0 {
            return Err(self.err_at(
                flags_at,
                "meta flags: contiguous strides need a strided tensor",
            ));
        }
        let tagged = flags & META_SYMBOLIC != 0;
        let sizes_at = self.pos;
        let sizes = self.dims("meta sizes", tagged)?;
        let (strides, offset) = if flags & META_STRIDED != 0 {
            let strides = if flags & META_CONTIGUOUS != 0 {
                let shape: Option<Vec<i64>> = sizes.iter().map(Dim::as_static).collect();
                let Some(shape) = shape else {
                    return Err(
                        self.err_at(flags_at, "meta flags: contiguous strides need static sizes")
                    );
                };
                let strides = contiguous_strides(&shape).ok_or_else(|| {
                    self.err_at(flags_at, "meta: contiguous strides of the sizes overflow")
                })?;
                static_dims(&strides)
            } else {
                let at = self.pos;
                let strides = self.dims("meta strides", tagged)?;
                if strides.len() != sizes.len() {
                    return Err(self.err_at(
                        at,
                        format_args!(
                            "meta: {} strides for {} sizes (at {sizes_at})",
                            strides.len(),
                            sizes.len()
                        ),
                    ));
                }
                strides
            };
            (
                Some(strides),
                Some(self.dim("meta storage offset", tagged)?),
            )
        } else {
            (None, None)
        };
        let storage = self.storage_key(flags & META_STORAGE != 0)?;
        Ok(TensorMeta {
            dtype,
            sizes,
            strides,
            offset,
            itemsize,
            storage,
            device,
        })
    }

    fn ints(&mut self, what: &str) -> Result<Vec<i64>> {
        let n = self.count(what, 1)?;
        let mut xs = Vec::with_capacity(n.min(PREALLOC_LIMIT));
        for _ in 0..n {
            xs.push(self.signed(what)?);
        }
        Ok(xs)
    }

    /// A tensor meta of version 1: the rank, then sizes, strides and offset
    /// each all static or absent. An absent one reads as symbolic
    /// ([`V1_UNKNOWN_DIM`]) where the tensor is strided (its strides or its
    /// offset present), as version 1's own engine read it.
    fn meta_v1(&mut self) -> Result<TensorMeta> {
        let dtype = self.string("meta dtype")?;
        let device = self.string("meta device")?;
        let rank = self.u32("meta rank")?;
        let itemsize = self.u32("meta itemsize")?;
        let flags_at = self.pos;
        let flags = self.flags(
            "meta flags",
            V1_META_SHAPE
                | V1_META_STRIDE
                | V1_META_STORAGE_OFFSET
                | META_STORAGE
                | META_CONTIGUOUS,
        )?;
        if flags & META_CONTIGUOUS != 0
            && (flags & V1_META_STRIDE != 0 || flags & V1_META_SHAPE == 0)
        {
            return Err(self.err_at(
                flags_at,
                "meta flags: contiguous strides need a shape and no stored strides",
            ));
        }
        let shape = if flags & V1_META_SHAPE != 0 {
            Some(self.ints("meta shape")?)
        } else {
            None
        };
        let stride = if flags & V1_META_STRIDE != 0 {
            Some(self.ints("meta stride")?)
        } else if flags & META_CONTIGUOUS != 0 {
            let strides = shape.as_deref().and_then(contiguous_strides);
            Some(strides.ok_or_else(|| {
                self.err_at(flags_at, "meta: contiguous strides of the shape overflow")
            })?)
        } else {
            None
        };
        let offset = if flags & V1_META_STORAGE_OFFSET != 0 {
            Some(self.signed("meta storage offset")?)
        } else {
            None
        };
        let storage = self.storage_key(flags & META_STORAGE != 0)?;
        // Torch tensors have at most 64 dimensions; a larger rank with no
        // shape is a corrupt file, not a list to allocate.
        let rank_len = usize::try_from(rank).unwrap_or(usize::MAX);
        if shape.is_none() && rank_len > MAX_V1_RANK {
            return Err(self.err_at(flags_at, format_args!("meta rank {rank} too large")));
        }
        let unknown = || Dim::Symbolic(V1_UNKNOWN_DIM.to_string());
        let unknowns = |n: usize| (0..n).map(|_| unknown()).collect::<Vec<_>>();
        let sizes = match &shape {
            Some(shape) => static_dims(shape),
            None => unknowns(rank_len),
        };
        let strided = stride.is_some() || offset.is_some();
        let strides = match stride {
            Some(stride) => Some(static_dims(&stride)),
            None if strided => Some(unknowns(sizes.len())),
            None => None,
        };
        let offset = match offset {
            Some(o) => Some(Dim::Static(o)),
            None if strided => Some(unknown()),
            None => None,
        };
        Ok(TensorMeta {
            dtype,
            sizes,
            strides,
            offset,
            itemsize,
            storage,
            device,
        })
    }

    fn node(&mut self, at: usize) -> Result<Node> {
        let start = self.pos;
        let head = self.flags(
            "node header",
            NODE_OP_MASK | NODE_HAS_META | NODE_HAS_SOURCE,
        )?;
        let op = OpCode::from_code(head & NODE_OP_MASK).ok_or_else(|| {
            self.err_at(start, format_args!("bad opcode {}", head & NODE_OP_MASK))
        })?;
        let name = self.string("node name")?;
        let target = TargetId(self.u32("node target")?);
        let n = self.count("argument count", 1)?;
        let mut args = Vec::with_capacity(n.min(PREALLOC_LIMIT));
        for _ in 0..n {
            args.push(self.value(at, 0)?);
        }
        let n = self.count("keyword argument count", 2)?;
        let mut kwargs = Vec::with_capacity(n.min(PREALLOC_LIMIT));
        for _ in 0..n {
            let k = self.string("keyword")?;
            let v = self.value(at, 0)?;
            kwargs.push((k, v));
        }
        let meta = if head & NODE_HAS_META != 0 {
            Some(self.meta()?)
        } else {
            None
        };
        let source = if head & NODE_HAS_SOURCE != 0 {
            Some(self.string("source line")?)
        } else {
            None
        };
        Ok(Node {
            op,
            name,
            target,
            args,
            kwargs,
            meta,
            source,
        })
    }

    fn nodes(&mut self) -> Result<Vec<Node>> {
        let n = self.count("node count", 5)?;
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            self.item = Some(("node", i));
            nodes.push(self.node(i)?);
        }
        Ok(nodes)
    }
}

/// The sections every version-1 file has, in this order.
const REQUIRED: [u8; 4] = [
    SECTION_STRINGS,
    SECTION_INFO,
    SECTION_TARGETS,
    SECTION_NODES,
];

fn section_name(tag: u8) -> &'static str {
    match tag {
        SECTION_STRINGS => "strings",
        SECTION_INFO => "info",
        SECTION_TARGETS => "targets",
        SECTION_NODES => "nodes",
        t if t & ANCILLARY_SECTION != 0 => "ancillary",
        _ => "unknown",
    }
}

/// Decodes a `.fxir` file and validates the graph in it.
///
/// # Errors
/// [`Error::Version`] when the header names another format version;
/// [`Error::Decode`] (with the byte offset, the section and the item) when the
/// file is truncated, corrupt (bad magic, bad checksum) or malformed (bad
/// enum code, string index, UTF-8, length, nesting, trailing bytes);
/// [`Error::InvalidGraph`] when it decodes but breaks an IR invariant.
pub fn read(bytes: &[u8]) -> Result<(Graph, FileInfo)> {
    let (body, section_count, version) = envelope(bytes)?;
    let budget = bytes
        .len()
        .saturating_mul(MAX_STRING_EXPANSION)
        .saturating_add(STRING_BUDGET_FLOOR);
    let mut r = Reader {
        buf: body,
        pos: HEADER_LEN,
        end: body.len(),
        section: "header",
        item: None,
        strings: Vec::new(),
        budget,
        budget_total: budget,
        prev_storage: 0,
        version,
    };
    let mut next = 0usize;
    let mut info = FileInfo::default();
    let mut graph = Graph::new();
    for s in 0..section_count {
        r.end = body.len();
        r.section = "section table";
        r.item = Some(("section", s as usize));
        let tag_at = r.pos;
        let tag = r.u8("section tag")?;
        let len = r.count("section length", 1)?;
        let end = r.pos + len;
        if tag & ANCILLARY_SECTION != 0 {
            r.pos = end;
            continue;
        }
        match REQUIRED.get(next) {
            Some(&want) if want == tag => next += 1,
            Some(&want) => {
                return Err(r.err_at(
                    tag_at,
                    format_args!(
                        "unexpected section tag {tag} ('{}'), expected '{}'",
                        section_name(tag),
                        section_name(want)
                    ),
                ))
            }
            None => {
                return Err(r.err_at(
                    tag_at,
                    format_args!("unexpected section tag {tag} after the last required section"),
                ))
            }
        }
        r.end = end;
        r.section = section_name(tag);
        r.item = None;
        match tag {
            SECTION_STRINGS => r.string_table()?,
            SECTION_INFO => info = r.info()?,
            SECTION_TARGETS => graph.targets = r.targets()?,
            _ => graph.nodes = r.nodes()?,
        }
        r.item = None;
        if r.pos != end {
            return Err(r.err_at(
                r.pos,
                format_args!("{} byte(s) left unused at the end", end - r.pos),
            ));
        }
    }
    r.section = "section table";
    r.item = None;
    if let Some(&missing) = REQUIRED.get(next) {
        return Err(r.err_at(
            r.pos,
            format_args!(
                "missing section '{}' (the header lists {section_count} sections)",
                section_name(missing)
            ),
        ));
    }
    if r.pos != body.len() {
        return Err(r.err_at(
            r.pos,
            format_args!(
                "{} bytes after the last of the {section_count} sections",
                body.len() - r.pos
            ),
        ));
    }
    validate(&graph)?;
    Ok((graph, info))
}
