//! The versioned binary `.fxir` file format for [`Graph`].
//!
//! A file is a fixed 28-byte header, a sequence of tagged, length-prefixed
//! sections (string table, file info, targets, nodes) and a trailing CRC-32 of
//! everything before it. Integers are LEB128 varints (zigzag for signed
//! values), every string is stored once in the string table and referenced by
//! index. The full specification, with every field, is `docs/fxir.md`.
//!
//! [`read`] treats its input as hostile: every length is checked against the
//! bytes that remain before anything is allocated, nesting is capped at
//! [`MAX_VALUE_DEPTH`], enum codes, flag bits, string indices, UTF-8, the
//! length field and the checksum are all checked, and the decoded graph goes
//! through [`validate`] before it is returned. It never panics, and what it
//! allocates grows at most linearly with the size of the input.
//!
//! ```
//! use fxrewrite::ir::io::{self, FileInfo};
//! # use fxrewrite::ir::{Graph, Node, OpCode, Target, TargetKind};
//! let mut g = Graph::new();
//! let t = g.add_target(Target { name: "output".into(), kind: TargetKind::Other, schema: None });
//! g.add_node(Node { op: OpCode::Output, name: "output".into(), target: t, args: vec![], kwargs: vec![], meta: None, source: None });
//! let info = FileInfo::new().with(FileInfo::ORIGIN, "compile 3 / graph 0 / before");
//! let bytes = io::write(&g, &info);
//! let (back, back_info) = io::read(&bytes).unwrap();
//! assert_eq!((back, back_info), (g, info));
//! ```

use std::collections::HashMap;
use std::fmt::Display;

use serde::Serialize;

use super::schema::{AliasInfo, ArgType, OpSchema, OpTags, SchemaArg, SchemaReturn};
use super::validate::{validate, MAX_VALUE_DEPTH};
use super::{Graph, Node, NodeId, OpCode, Target, TargetId, TargetKind, TensorMeta, Value};
use crate::error::{Error, Result};

/// The first 8 bytes of every `.fxir` file: `\x89 F X I R \r \n \x1a`.
///
/// Like PNG's signature it catches the usual transfer accidents: the high
/// byte catches 7-bit channels, `\r\n` catches line-ending conversion in
/// either direction, and `\x1a` stops `type` on DOS-like systems.
pub const MAGIC: [u8; 8] = *b"\x89FXIR\r\n\x1a";

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Size of the fixed header: magic, version, flags, section count, file length.
pub const HEADER_LEN: usize = 28;

/// Size of the trailing checksum (CRC-32, little-endian).
pub const CHECKSUM_LEN: usize = 4;

/// Section tag of the string table.
pub const SECTION_STRINGS: u8 = 1;
/// Section tag of the file info (provenance key/value pairs).
pub const SECTION_INFO: u8 = 2;
/// Section tag of the target table.
pub const SECTION_TARGETS: u8 = 3;
/// Section tag of the node list.
pub const SECTION_NODES: u8 = 4;
/// Sections whose tag has this bit set are ancillary: a reader that does not
/// know the tag skips them. Any other unknown tag is an error.
pub const ANCILLARY_SECTION: u8 = 0x80;

/// The decoder never materialises more string bytes (names, constants, meta
/// strings, copied out of the string table) than this many times the size of
/// the file, plus [`STRING_BUDGET_FLOOR`]. Real graphs stay far below it; a
/// hostile file that references one long string a million times is refused
/// instead of exhausting memory.
pub const MAX_STRING_EXPANSION: usize = 64;

/// String bytes every file may materialise regardless of its size (16 MiB),
/// so that small files with a few long, often repeated strings still read.
pub const STRING_BUDGET_FLOOR: usize = 16 << 20;

/// Provenance of a file: ordered key/value string pairs.
///
/// The well-known keys are [`FileInfo::TORCH_VERSION`], [`FileInfo::PRODUCER`]
/// and [`FileInfo::ORIGIN`]; any other key is allowed and kept in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FileInfo {
    /// The pairs, in file order. Keys are normally unique ([`FileInfo::set`]
    /// keeps them so), but the format stores whatever is here.
    pub entries: Vec<(String, String)>,
}

impl FileInfo {
    /// Key of the `torch.__version__` of the process that captured the graph.
    pub const TORCH_VERSION: &'static str = "torch_version";
    /// Key of the tool that wrote the file (`fxrewrite 0.1.0`).
    pub const PRODUCER: &'static str = "producer";
    /// Key of a free-form label of where the graph came from
    /// (`compile 3 / graph 0 / before`).
    pub const ORIGIN: &'static str = "origin";

    /// No entries.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The usual provenance: torch version, producer and origin label.
    #[must_use]
    pub fn provenance(torch_version: &str, producer: &str, origin: &str) -> Self {
        Self::new()
            .with(Self::TORCH_VERSION, torch_version)
            .with(Self::PRODUCER, producer)
            .with(Self::ORIGIN, origin)
    }

    /// Sets `key` (see [`FileInfo::set`]) and returns `self`, for chaining.
    #[must_use]
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.set(key, value);
        self
    }

    /// Sets `key` to `value`: replaces the first entry with that key in place,
    /// or appends a new entry.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.entries.push((key, value)),
        }
    }

    /// The value of the first entry with key `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The [`FileInfo::TORCH_VERSION`] entry.
    #[must_use]
    pub fn torch_version(&self) -> Option<&str> {
        self.get(Self::TORCH_VERSION)
    }

    /// The [`FileInfo::PRODUCER`] entry.
    #[must_use]
    pub fn producer(&self) -> Option<&str> {
        self.get(Self::PRODUCER)
    }

    /// The [`FileInfo::ORIGIN`] entry.
    #[must_use]
    pub fn origin(&self) -> Option<&str> {
        self.get(Self::ORIGIN)
    }
}

// Value tags.
const TAG_NONE: u8 = 0;
const TAG_BOOL: u8 = 1;
const TAG_INT: u8 = 2;
const TAG_FLOAT: u8 = 3;
const TAG_STR: u8 = 4;
const TAG_NODE: u8 = 5;
const TAG_LIST: u8 = 6;
const TAG_TUPLE: u8 = 7;
const TAG_DTYPE: u8 = 8;
const TAG_DEVICE: u8 = 9;
const TAG_LAYOUT: u8 = 10;
const TAG_MEMORY_FORMAT: u8 = 11;
const TAG_TARGET: u8 = 12;
const TAG_OPAQUE: u8 = 13;

// Node header byte: opcode in bits 0-2, presence flags above.
const NODE_OP_MASK: u8 = 0x07;
const NODE_HAS_META: u8 = 0x08;
const NODE_HAS_SOURCE: u8 = 0x10;

// Schema argument / return flags.
const ALIAS_PRESENT: u8 = 0x01;
const ALIAS_WRITE: u8 = 0x02;
const ARG_KWARG_ONLY: u8 = 0x04;

// Tensor meta flags.
const META_SHAPE: u8 = 0x01;
const META_STRIDE: u8 = 0x02;
const META_STORAGE_OFFSET: u8 = 0x04;
const META_STORAGE: u8 = 0x08;
/// The strides are the contiguous (row-major) strides of the shape and are
/// not stored.
const META_CONTIGUOUS: u8 = 0x10;

/// Tag bits [`OpTags::bits`] defines in this version.
const KNOWN_TAG_BITS: u8 = 0x07;

/// Largest capacity reserved up front for a nested container; longer ones
/// grow as their elements actually decode.
const PREALLOC_LIMIT: usize = 64;

/// Byte offsets of the header fields.
const OFF_VERSION: usize = 8;
const OFF_FLAGS: usize = 12;
const OFF_SECTION_COUNT: usize = 16;
const OFF_FILE_LEN: usize = 20;

// ---------------------------------------------------------------------------
// CRC-32
// ---------------------------------------------------------------------------

/// Slicing-by-8 tables of the reflected IEEE CRC-32 (polynomial 0xEDB88320).
const CRC_TABLES: [[u32; 256]; 8] = crc_tables();

const fn crc_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// The CRC-32 of `bytes` (IEEE 802.3 / zlib / PNG: reflected polynomial
/// 0xEDB88320, initial value and final xor 0xFFFFFFFF); `crc32(b"123456789")`
/// is `0xCBF43926`. This is the checksum that ends every `.fxir` file.
#[must_use]
pub fn crc32(bytes: &[u8]) -> u32 {
    let t = &CRC_TABLES;
    let mut c = !0u32;
    let chunks = bytes.chunks_exact(8);
    let rest = chunks.remainder();
    for chunk in chunks {
        if let [b0, b1, b2, b3, b4, b5, b6, b7] = *chunk {
            let lo = u32::from_le_bytes([b0, b1, b2, b3]) ^ c;
            let hi = u32::from_le_bytes([b4, b5, b6, b7]);
            c = t[7][(lo & 0xff) as usize]
                ^ t[6][((lo >> 8) & 0xff) as usize]
                ^ t[5][((lo >> 16) & 0xff) as usize]
                ^ t[4][(lo >> 24) as usize]
                ^ t[3][(hi & 0xff) as usize]
                ^ t[2][((hi >> 8) & 0xff) as usize]
                ^ t[1][((hi >> 16) & 0xff) as usize]
                ^ t[0][(hi >> 24) as usize];
        }
    }
    for &b in rest {
        c = t[0][((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(mut v: u64) -> usize {
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

fn put_ints(out: &mut Vec<u8>, xs: &[i64]) {
    put_len(out, xs.len());
    for &x in xs {
        put_varint(out, zigzag(x));
    }
}

/// Row-major strides of `shape`, as torch computes them (a dimension of size
/// 0 counts as 1); `None` on overflow.
fn contiguous_strides(shape: &[i64]) -> Option<Vec<i64>> {
    let mut strides = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for (st, &d) in strides.iter_mut().zip(shape).rev() {
        *st = acc;
        acc = acc.checked_mul(d.max(1))?;
    }
    Some(strides)
}

fn put_meta<'g>(out: &mut Vec<u8>, s: &mut Strings<'g>, m: &'g TensorMeta, prev_storage: &mut u64) {
    s.put(out, &m.dtype);
    s.put(out, &m.device);
    put_varint(out, u64::from(m.rank));
    put_varint(out, u64::from(m.itemsize));
    let mut flags = 0;
    if m.shape.is_some() {
        flags |= META_SHAPE;
    }
    let contiguous = match (&m.shape, &m.stride) {
        (Some(shape), Some(stride)) => contiguous_strides(shape).as_ref() == Some(stride),
        _ => false,
    };
    if contiguous {
        flags |= META_CONTIGUOUS;
    } else if m.stride.is_some() {
        flags |= META_STRIDE;
    }
    if m.storage_offset.is_some() {
        flags |= META_STORAGE_OFFSET;
    }
    if m.storage.is_some() {
        flags |= META_STORAGE;
    }
    out.push(flags);
    if let Some(shape) = &m.shape {
        put_ints(out, shape);
    }
    if let (Some(stride), false) = (&m.stride, contiguous) {
        put_ints(out, stride);
    }
    if let Some(off) = m.storage_offset {
        put_varint(out, zigzag(off));
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

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

fn decode_err(offset: usize, detail: impl Into<String>) -> Error {
    Error::Decode {
        offset: offset as u64,
        detail: detail.into(),
    }
}

fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    Some(u32::from_le_bytes(a))
}

fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_le_bytes(a))
}

/// Why the first bytes are not [`MAGIC`], with a hint for the usual accidents.
fn bad_magic(bytes: &[u8]) -> Error {
    let detail = if bytes.starts_with(b"\x89FXIR\n\x1a") {
        "bad magic: CRLF was converted to LF (the file went through a text-mode transfer)"
    } else if bytes.starts_with(b"\x89FXIR\r\r\n") {
        "bad magic: LF was converted to CRLF (the file went through a text-mode transfer)"
    } else if bytes.starts_with(b"\x09FXIR") {
        "bad magic: the high bit of bytes was stripped (a 7-bit transfer)"
    } else if bytes.starts_with(b"\xef\xbf\xbdFXIR") {
        "bad magic: the file was decoded and re-encoded as text (UTF-8 replacement character)"
    } else {
        "bad magic: not a .fxir file"
    };
    decode_err(0, detail)
}

/// Checks the header, the length field and the checksum; returns the bytes
/// the checksum covers and the section count.
fn envelope(bytes: &[u8]) -> Result<(&[u8], u32)> {
    let n = bytes.len();
    match bytes.get(..MAGIC.len()) {
        Some(m) if m == MAGIC => {}
        None if MAGIC.starts_with(bytes) => {
            return Err(decode_err(
                n,
                format!("truncated in header: the file is only {n} bytes (reading magic)"),
            ))
        }
        _ => return Err(bad_magic(bytes)),
    }
    let version = le_u32(bytes, OFF_VERSION).ok_or_else(|| {
        decode_err(
            n,
            format!("truncated in header: the file is only {n} bytes (reading version)"),
        )
    })?;
    if version != FORMAT_VERSION {
        return Err(Error::Version {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let file_len = le_u64(bytes, OFF_FILE_LEN)
        .filter(|_| n >= HEADER_LEN + CHECKSUM_LEN)
        .ok_or_else(|| {
            decode_err(
                n,
                format!(
                    "truncated in header: the file is only {n} bytes, a file has at least {}",
                    HEADER_LEN + CHECKSUM_LEN
                ),
            )
        })?;
    if file_len != n as u64 {
        let what = if file_len > n as u64 {
            "truncated"
        } else {
            "trailing bytes"
        };
        return Err(decode_err(
            n.min(usize::try_from(file_len).unwrap_or(usize::MAX)),
            format!("{what}: the header says the file is {file_len} bytes, it is {n}"),
        ));
    }
    let body_len = n - CHECKSUM_LEN;
    let (body, stored) = (bytes.get(..body_len), le_u32(bytes, body_len));
    let (Some(body), Some(stored)) = (body, stored) else {
        return Err(decode_err(n, "truncated (reading checksum)"));
    };
    let computed = crc32(body);
    if computed != stored {
        return Err(decode_err(
            body_len,
            format!(
                "bad checksum: stored {stored:#010x}, computed {computed:#010x} (the file is corrupt)"
            ),
        ));
    }
    let flags = le_u32(bytes, OFF_FLAGS).unwrap_or(0);
    if flags != 0 {
        return Err(decode_err(
            OFF_FLAGS,
            format!("unknown header flags {flags:#x} (this build knows none)"),
        ));
    }
    let sections = le_u32(bytes, OFF_SECTION_COUNT).unwrap_or(0);
    Ok((body, sections))
}

/// A bounds-checked cursor over the checksummed bytes, with the context that
/// error messages name.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// End of the current section (never past `buf.len()`).
    end: usize,
    section: &'static str,
    item: Option<(&'static str, usize)>,
    strings: Vec<&'a str>,
    /// String bytes that may still be materialised.
    budget: usize,
    /// The budget at the start, for the error message.
    budget_total: usize,
    /// The last storage key decoded (storage keys are delta-coded).
    prev_storage: u64,
}

impl<'a> Reader<'a> {
    fn err_at(&self, offset: usize, detail: impl Display) -> Error {
        let detail = match self.item {
            Some((what, i)) => format!("{detail} in section '{}' at {what} {i}", self.section),
            None => format!("{detail} in section '{}'", self.section),
        };
        decode_err(offset, detail)
    }

    fn truncated(&self, what: &str) -> Error {
        self.err_at(self.pos, format_args!("truncated (reading {what})"))
    }

    fn remaining(&self) -> usize {
        self.end.saturating_sub(self.pos)
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        match self.buf.get(self.pos) {
            Some(&b) if self.pos < self.end => {
                self.pos += 1;
                Ok(b)
            }
            _ => Err(self.truncated(what)),
        }
    }

    fn bytes(&mut self, len: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|&e| e <= self.end)
            .ok_or_else(|| self.truncated(what))?;
        let b = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| self.truncated(what))?;
        self.pos = end;
        Ok(b)
    }

    /// An unsigned LEB128 varint, at most 10 bytes, canonical (no redundant
    /// trailing zero groups).
    fn varint(&mut self, what: &str) -> Result<u64> {
        let start = self.pos;
        let mut value = 0u64;
        let mut shift = 0u32;
        loop {
            let byte = self.u8(what)?;
            let low = u64::from(byte & 0x7f);
            if shift == 63 && low > 1 {
                return Err(self.err_at(start, format_args!("varint overflows 64 bits ({what})")));
            }
            value |= low << shift;
            if byte & 0x80 == 0 {
                if byte == 0 && shift > 0 {
                    return Err(self.err_at(start, format_args!("non-canonical varint ({what})")));
                }
                return Ok(value);
            }
            shift += 7;
            if shift > 63 {
                return Err(
                    self.err_at(start, format_args!("varint longer than 10 bytes ({what})"))
                );
            }
        }
    }

    fn signed(&mut self, what: &str) -> Result<i64> {
        self.varint(what).map(unzigzag)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        let start = self.pos;
        let v = self.varint(what)?;
        u32::try_from(v)
            .map_err(|_| self.err_at(start, format_args!("{what} {v} does not fit 32 bits")))
    }

    /// An element count, checked against the bytes left in the section given
    /// that each element takes at least `min_each` bytes.
    fn count(&mut self, what: &str, min_each: usize) -> Result<usize> {
        let start = self.pos;
        let n = self.varint(what)?;
        let left = self.remaining();
        match usize::try_from(n) {
            Ok(c) if c.checked_mul(min_each).is_some_and(|b| b <= left) => Ok(c),
            _ => Err(self.err_at(
                start,
                format_args!("{what} {n} is impossible with only {left} bytes left"),
            )),
        }
    }

    fn flags(&mut self, what: &str, known: u8) -> Result<u8> {
        let start = self.pos;
        let f = self.u8(what)?;
        if f & !known != 0 {
            return Err(self.err_at(
                start,
                format_args!("unknown bits {:#04x} in {what}", f & !known),
            ));
        }
        Ok(f)
    }

    fn str_ref(&mut self, what: &str) -> Result<&'a str> {
        let start = self.pos;
        let i = self.varint(what)?;
        match usize::try_from(i).ok().and_then(|i| self.strings.get(i)) {
            Some(s) => Ok(*s),
            None => Err(self.err_at(
                start,
                format_args!(
                    "string index {i} out of range ({} strings) ({what})",
                    self.strings.len()
                ),
            )),
        }
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let start = self.pos;
        let s = self.str_ref(what)?;
        self.budget = self.budget.checked_sub(s.len()).ok_or_else(|| {
            self.err_at(
                start,
                format_args!(
                    "decoded strings exceed the budget of {} bytes ({MAX_STRING_EXPANSION} times the file size + {STRING_BUDGET_FLOOR}; hostile input?) ({what})",
                    self.budget_total
                ),
            )
        })?;
        Ok(s.to_owned())
    }

    fn arg_type(&mut self, what: &str) -> Result<ArgType> {
        let start = self.pos;
        let c = self.u8(what)?;
        ArgType::from_code(c).ok_or_else(|| self.err_at(start, format_args!("bad {what} code {c}")))
    }

    fn alias(&mut self, flags: u8) -> Result<Option<AliasInfo>> {
        if flags & ALIAS_PRESENT == 0 {
            if flags & ALIAS_WRITE != 0 {
                return Err(self.err_at(
                    self.pos.saturating_sub(1),
                    "write flag without an alias set",
                ));
            }
            return Ok(None);
        }
        Ok(Some(AliasInfo {
            set: self.string("alias set")?,
            is_write: flags & ALIAS_WRITE != 0,
        }))
    }

    // -- sections -----------------------------------------------------------

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

    fn ints(&mut self, what: &str) -> Result<Vec<i64>> {
        let n = self.count(what, 1)?;
        let mut xs = Vec::with_capacity(n.min(PREALLOC_LIMIT));
        for _ in 0..n {
            xs.push(self.signed(what)?);
        }
        Ok(xs)
    }

    fn meta(&mut self) -> Result<TensorMeta> {
        let dtype = self.string("meta dtype")?;
        let device = self.string("meta device")?;
        let rank = self.u32("meta rank")?;
        let itemsize = self.u32("meta itemsize")?;
        let flags_at = self.pos;
        let flags = self.flags(
            "meta flags",
            META_SHAPE | META_STRIDE | META_STORAGE_OFFSET | META_STORAGE | META_CONTIGUOUS,
        )?;
        if flags & META_CONTIGUOUS != 0 && (flags & META_STRIDE != 0 || flags & META_SHAPE == 0) {
            return Err(self.err_at(
                flags_at,
                "meta flags: contiguous strides need a shape and no stored strides",
            ));
        }
        let shape = if flags & META_SHAPE != 0 {
            Some(self.ints("meta shape")?)
        } else {
            None
        };
        let stride = if flags & META_STRIDE != 0 {
            Some(self.ints("meta stride")?)
        } else if flags & META_CONTIGUOUS != 0 {
            let strides = shape.as_deref().and_then(contiguous_strides);
            Some(strides.ok_or_else(|| {
                self.err_at(flags_at, "meta: contiguous strides of the shape overflow")
            })?)
        } else {
            None
        };
        let storage_offset = if flags & META_STORAGE_OFFSET != 0 {
            Some(self.signed("meta storage offset")?)
        } else {
            None
        };
        let storage = if flags & META_STORAGE != 0 {
            let delta = self.signed("meta storage key")?;
            let key = self.prev_storage.wrapping_add(delta as u64);
            self.prev_storage = key;
            Some(key)
        } else {
            None
        };
        Ok(TensorMeta {
            dtype,
            rank,
            shape,
            stride,
            storage_offset,
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
    let (body, section_count) = envelope(bytes)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut slow = !0u32;
        for &b in &data {
            slow ^= u32::from(b);
            for _ in 0..8 {
                slow = if slow & 1 != 0 {
                    0xEDB8_8320 ^ (slow >> 1)
                } else {
                    slow >> 1
                };
            }
        }
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 999, 1000] {
            let mut c = !0u32;
            for &b in &data[..len] {
                c ^= u32::from(b);
                for _ in 0..8 {
                    c = if c & 1 != 0 {
                        0xEDB8_8320 ^ (c >> 1)
                    } else {
                        c >> 1
                    };
                }
            }
            assert_eq!(crc32(&data[..len]), !c, "len {len}");
        }
        assert_eq!(crc32(&data), !slow);
    }

    #[test]
    fn varints_and_zigzag_round_trip() {
        for v in [0i64, 1, -1, 63, -64, 64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        for v in [0u64, 1, 127, 128, 16383, 16384, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            let mut r = Reader {
                buf: &out,
                pos: 0,
                end: out.len(),
                section: "t",
                item: None,
                strings: vec![],
                budget: 0,
                budget_total: 0,
                prev_storage: 0,
            };
            assert_eq!(r.varint("v"), Ok(v));
        }
    }

    #[test]
    fn overlong_and_oversized_varints_are_refused() {
        for bad in [
            &[0x80u8, 0x00][..],
            &[0xff; 11][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02][..],
        ] {
            let mut r = Reader {
                buf: bad,
                pos: 0,
                end: bad.len(),
                section: "t",
                item: None,
                strings: vec![],
                budget: 0,
                budget_total: 0,
                prev_storage: 0,
            };
            assert!(r.varint("v").is_err(), "{bad:?}");
        }
    }
}
