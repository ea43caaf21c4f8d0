//! The wire codes between the Python encoder, the pyo3 conversion and the
//! `.fxir` format: one table. The binding exports it to Python as
//! `fxrewrite._core.WIRE_CODES`, and the Python side reads its codes from
//! there, so a code is defined once, here or in the enum it names
//! ([`OpCode::code`], [`TargetKind::code`], [`ArgType::code`],
//! [`OpTags::bits`]).

use super::schema::{ArgType, OpTags};
use super::{OpCode, TargetKind};

/// Tags of the `(tag, payload)` pairs that carry non-scalar values.
pub mod value_tag {
    /// A node reference: payload is the node index.
    pub const NODE: u8 = 0;
    /// A list: payload is the items.
    pub const LIST: u8 = 1;
    /// A tuple: payload is the items.
    pub const TUPLE: u8 = 2;
    /// A `torch.dtype`, by name.
    pub const DTYPE: u8 = 3;
    /// A `torch.device`, as `str(device)`.
    pub const DEVICE: u8 = 4;
    /// A `torch.layout`, by name.
    pub const LAYOUT: u8 = 5;
    /// A `torch.memory_format`, by name.
    pub const MEMORY_FORMAT: u8 = 6;
    /// A callable: payload is a target index.
    pub const TARGET: u8 = 7;
    /// Anything else, as its `repr`.
    pub const OPAQUE: u8 = 8;
}

/// Every table, by name: `(section, [(name, code)])`.
#[must_use]
pub fn tables() -> Vec<(&'static str, Vec<(&'static str, u8)>)> {
    use value_tag as t;
    let opcodes = [
        OpCode::Placeholder,
        OpCode::GetAttr,
        OpCode::CallFunction,
        OpCode::CallMethod,
        OpCode::CallModule,
        OpCode::Output,
    ];
    let kinds = TargetKind::all();
    let arg_types = [
        ("tensor", ArgType::Tensor),
        ("optional_tensor", ArgType::OptionalTensor),
        ("tensor_list", ArgType::TensorList),
        ("other", ArgType::Other),
    ];
    let tag = |f: fn(&mut OpTags)| {
        let mut tags = OpTags::default();
        f(&mut tags);
        tags.bits()
    };
    vec![
        (
            "opcode",
            opcodes.iter().map(|o| (o.fx_name(), o.code())).collect(),
        ),
        (
            "target_kind",
            kinds.iter().map(|(n, k)| (*n, k.code())).collect(),
        ),
        (
            "auto_functionalized_operators",
            super::AUTO_FUNCTIONALIZED.to_vec(),
        ),
        (
            "arg_type",
            arg_types.iter().map(|(n, a)| (*n, a.code())).collect(),
        ),
        (
            "value_tag",
            vec![
                ("node", t::NODE),
                ("list", t::LIST),
                ("tuple", t::TUPLE),
                ("dtype", t::DTYPE),
                ("device", t::DEVICE),
                ("layout", t::LAYOUT),
                ("memory_format", t::MEMORY_FORMAT),
                ("target", t::TARGET),
                ("opaque", t::OPAQUE),
            ],
        ),
        (
            "tag_bit",
            vec![
                ("out", tag(|t| t.out = true)),
                ("inplace", tag(|t| t.inplace = true)),
                (
                    "nondeterministic_seeded",
                    tag(|t| t.nondeterministic = true),
                ),
            ],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_within_each_table_and_decode_back() {
        for (section, entries) in tables() {
            let mut codes: Vec<u8> = entries.iter().map(|(_, c)| *c).collect();
            codes.sort_unstable();
            codes.dedup();
            assert_eq!(codes.len(), entries.len(), "{section}");
        }
        for (_, c) in &tables()[0].1 {
            assert!(OpCode::from_code(*c).is_some());
        }
        for (_, c) in &tables()[1].1 {
            assert!(TargetKind::from_code(*c).is_some());
        }
        for (_, c) in &tables()[2].1 {
            assert!(ArgType::from_code(*c).is_some());
        }
    }
}
