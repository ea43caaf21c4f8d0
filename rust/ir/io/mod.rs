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

mod crc;
mod cursor;
mod envelope;
mod format;
mod reader;
mod writer;

pub use crc::crc32;
pub use format::{
    FileInfo, ANCILLARY_SECTION, CHECKSUM_LEN, FORMAT_VERSION, HEADER_LEN, MAGIC,
    MAX_STRING_EXPANSION, SECTION_INFO, SECTION_NODES, SECTION_STRINGS, SECTION_TARGETS,
    STRING_BUDGET_FLOOR,
};
pub use reader::read;
pub use writer::write;

#[cfg(doc)]
use super::validate::{validate, MAX_VALUE_DEPTH};
#[cfg(doc)]
use super::Graph;
