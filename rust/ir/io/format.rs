//! The layout constants of the `.fxir` format and the encodings both the
//! writer and the reader use, kept in one file so that the two directions
//! cannot disagree on a code. The specification is `docs/fxir.md`.

use serde::Serialize;

/// The first 8 bytes of every `.fxir` file: `\x89 F X I R \r \n \x1a`.
///
/// Like PNG's signature it catches the usual transfer accidents: the high
/// byte catches 7-bit channels, `\r\n` catches line-ending conversion in
/// either direction, and `\x1a` stops `type` on DOS-like systems.
pub const MAGIC: [u8; 8] = *b"\x89FXIR\r\n\x1a";

/// The format version this build writes and reads.
///
/// Version 2 stores each size, stride and the storage offset as static or
/// symbolic on its own (version 1: a tensor's sizes or strides were all
/// static or all absent).
pub const FORMAT_VERSION: u32 = 2;
/// The oldest format version this build still reads.
pub const OLDEST_READ_VERSION: u32 = 1;

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
pub(super) const TAG_NONE: u8 = 0;
pub(super) const TAG_BOOL: u8 = 1;
pub(super) const TAG_INT: u8 = 2;
pub(super) const TAG_FLOAT: u8 = 3;
pub(super) const TAG_STR: u8 = 4;
pub(super) const TAG_NODE: u8 = 5;
pub(super) const TAG_LIST: u8 = 6;
pub(super) const TAG_TUPLE: u8 = 7;
pub(super) const TAG_DTYPE: u8 = 8;
pub(super) const TAG_DEVICE: u8 = 9;
pub(super) const TAG_LAYOUT: u8 = 10;
pub(super) const TAG_MEMORY_FORMAT: u8 = 11;
pub(super) const TAG_TARGET: u8 = 12;
pub(super) const TAG_OPAQUE: u8 = 13;

// Node header byte: opcode in bits 0-2, presence flags above.
pub(super) const NODE_OP_MASK: u8 = 0x07;
pub(super) const NODE_HAS_META: u8 = 0x08;
pub(super) const NODE_HAS_SOURCE: u8 = 0x10;

// Schema argument / return flags.
pub(super) const ALIAS_PRESENT: u8 = 0x01;
pub(super) const ALIAS_WRITE: u8 = 0x02;
pub(super) const ARG_KWARG_ONLY: u8 = 0x04;

// Tensor meta flags of version 1 (sizes, strides and offset each all
// static or absent; no symbolic dimension).
pub(super) const V1_META_SHAPE: u8 = 0x01;
pub(super) const V1_META_STRIDE: u8 = 0x02;
pub(super) const V1_META_STORAGE_OFFSET: u8 = 0x04;
/// The expression a symbolic dimension of a version-1 file reads as: that
/// version stored none.
pub const V1_UNKNOWN_DIM: &str = "?";
/// The largest rank a version-1 meta without sizes may declare.
pub(super) const MAX_V1_RANK: usize = 1024;
// Tensor meta flags.
/// Strides and the storage offset are present (a strided tensor).
pub(super) const META_STRIDED: u8 = 0x02;
pub(super) const META_STORAGE: u8 = 0x08;
/// The strides are the contiguous (row-major) strides of the sizes, all
/// static, and are not stored.
pub(super) const META_CONTIGUOUS: u8 = 0x10;
/// Every size, stride and the offset is stored as a tagged dimension
/// ([`DIM_STATIC`] then an integer, or [`DIM_SYMBOLIC`] then a string);
/// without it, each is a plain integer.
pub(super) const META_SYMBOLIC: u8 = 0x20;
/// Tag of a static dimension in a [`META_SYMBOLIC`] meta.
pub(super) const DIM_STATIC: u8 = 0;
/// Tag of a symbolic dimension (its expression follows) in a
/// [`META_SYMBOLIC`] meta.
pub(super) const DIM_SYMBOLIC: u8 = 1;
/// Tag bits [`OpTags::bits`] defines in this version.
pub(super) const KNOWN_TAG_BITS: u8 = 0x07;

/// Largest capacity reserved up front for a nested container; longer ones
/// grow as their elements actually decode.
pub(super) const PREALLOC_LIMIT: usize = 64;

/// Byte offsets of the header fields.
pub(super) const OFF_VERSION: usize = 8;
pub(super) const OFF_FLAGS: usize = 12;
pub(super) const OFF_SECTION_COUNT: usize = 16;
pub(super) const OFF_FILE_LEN: usize = 20;

// ---------------------------------------------------------------------------
// Encodings shared by the writer and the reader
// ---------------------------------------------------------------------------

/// Maps signed to unsigned so that small magnitudes give short varints.
pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
pub(super) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Row-major strides of `shape`, as torch computes them (a dimension of size
/// 0 counts as 1); `None` on overflow.
pub(super) fn contiguous_strides(shape: &[i64]) -> Option<Vec<i64>> {
    let mut strides = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for (st, &d) in strides.iter_mut().zip(shape).rev() {
        *st = acc;
        acc = acc.checked_mul(d.max(1))?;
    }
    Some(strides)
}
