//! Schemas of the aten operators the engine inserts (clones, views, size
//! queries). A graph read from a `.fxir` file carries schemas only for the
//! operators it already calls, so the command line tool's applier needs these
//! for the nodes it adds; on a live graph torch resolves the operator itself.
//! `tests/test_inserted_schemas.py` checks every entry against torch's own
//! `OpOverload._schema`, so the table cannot drift from torch.

use crate::ir::schema::{AliasInfo, ArgType, OpSchema, OpTags, SchemaArg, SchemaReturn};

fn sarg(name: &str, ty: ArgType, alias: Option<(&str, bool)>, kwarg_only: bool) -> SchemaArg {
    SchemaArg {
        name: name.into(),
        ty,
        alias: alias.map(|(set, is_write)| AliasInfo {
            set: set.into(),
            is_write,
        }),
        kwarg_only,
    }
}

fn sret(alias: Option<(&str, bool)>) -> SchemaReturn {
    SchemaReturn {
        ty: ArgType::Tensor,
        alias: alias.map(|(set, is_write)| AliasInfo {
            set: set.into(),
            is_write,
        }),
    }
}

/// Every aten operator the engine may insert.
pub const INSERTED_OPS: &[&str] = &[
    "aten::clone.default",
    "aten::alias.default",
    "aten::slice.Tensor",
    "aten::as_strided.default",
    "aten::empty_strided.default",
    "aten::copy_.default",
    "aten::sym_size.int",
    "aten::sym_stride.int",
];

/// The schema of an aten operator the engine may insert, as the Python
/// encoder reads it from `OpOverload._schema`.
#[must_use]
pub fn aten_schema(name: &str) -> Option<OpSchema> {
    use ArgType::{Other, Tensor};
    let view = Some(("a", false));
    let (args, returns, tags) = match name {
        // clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor
        "aten::clone.default" => (
            vec![
                sarg("self", Tensor, None, false),
                sarg("memory_format", Other, None, true),
            ],
            vec![sret(None)],
            OpTags::default(),
        ),
        // alias(Tensor(a) self) -> Tensor(a)
        "aten::alias.default" => (
            vec![sarg("self", Tensor, view, false)],
            vec![sret(view)],
            OpTags::default(),
        ),
        // slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None,
        //              SymInt? end=None, SymInt step=1) -> Tensor(a)
        "aten::slice.Tensor" => (
            vec![
                sarg("self", Tensor, view, false),
                sarg("dim", Other, None, false),
                sarg("start", Other, None, false),
                sarg("end", Other, None, false),
                sarg("step", Other, None, false),
            ],
            vec![sret(view)],
            OpTags::default(),
        ),
        // as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride,
        //            SymInt? storage_offset=None) -> Tensor(a)
        "aten::as_strided.default" => (
            vec![
                sarg("self", Tensor, view, false),
                sarg("size", Other, None, false),
                sarg("stride", Other, None, false),
                sarg("storage_offset", Other, None, false),
            ],
            vec![sret(view)],
            OpTags::default(),
        ),
        // empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None,
        //               Layout? layout=None, Device? device=None,
        //               bool? pin_memory=None) -> Tensor
        "aten::empty_strided.default" => (
            vec![
                sarg("size", Other, None, false),
                sarg("stride", Other, None, false),
                sarg("dtype", Other, None, true),
                sarg("layout", Other, None, true),
                sarg("device", Other, None, true),
                sarg("pin_memory", Other, None, true),
            ],
            vec![sret(None)],
            OpTags::default(),
        ),
        // copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)
        "aten::copy_.default" => (
            vec![
                sarg("self", Tensor, Some(("a", true)), false),
                sarg("src", Tensor, None, false),
                sarg("non_blocking", Other, None, false),
            ],
            vec![sret(Some(("a", true)))],
            OpTags {
                inplace: true,
                ..OpTags::default()
            },
        ),
        // sym_size.int(Tensor self, int dim) -> SymInt, and sym_stride alike
        "aten::sym_size.int" | "aten::sym_stride.int" => (
            vec![
                sarg("self", Tensor, None, false),
                sarg("dim", Other, None, false),
            ],
            vec![SchemaReturn {
                ty: Other,
                alias: None,
            }],
            OpTags::default(),
        ),
        _ => return None,
    };
    Some(OpSchema {
        args,
        returns,
        tags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_inserted_aten_op_has_a_schema() {
        for name in INSERTED_OPS {
            assert!(aten_schema(name).is_some(), "{name}");
        }
        let s = aten_schema("aten::slice.Tensor").unwrap();
        assert_eq!(s.view_source(), Some(0));
        let c = aten_schema("aten::copy_.default").unwrap();
        assert!(c.is_mutable());
        assert_eq!(c.written_return_source(0), Some(0));
        assert!(aten_schema("aten::nope.default").is_none());
    }
}
