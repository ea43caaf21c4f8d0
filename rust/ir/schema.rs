//! Per-operator schema facts, read once per distinct operator from
//! `OpOverload._schema` and `OpOverload.tags`.
//!
//! These facts, never a list of known operators, decide which arguments an
//! auto_functionalized node writes, which outputs alias which inputs, and
//! which nodes are free of side effects.

use serde::Serialize;

/// The type of a schema argument, as far as the engine cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ArgType {
    /// `Tensor`.
    Tensor,
    /// `Tensor?`.
    OptionalTensor,
    /// `Tensor[]` or `Tensor?[]`.
    TensorList,
    /// Anything else (ints, floats, lists of ints, ...).
    Other,
}

impl ArgType {
    /// The stable code used by the encoders and the file format.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            ArgType::Tensor => 0,
            ArgType::OptionalTensor => 1,
            ArgType::TensorList => 2,
            ArgType::Other => 3,
        }
    }

    /// Inverse of [`ArgType::code`].
    #[must_use]
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => ArgType::Tensor,
            1 => ArgType::OptionalTensor,
            2 => ArgType::TensorList,
            3 => ArgType::Other,
            _ => return None,
        })
    }

    /// True for the tensor-like types.
    #[must_use]
    pub fn is_tensor_like(self) -> bool {
        !matches!(self, ArgType::Other)
    }
}

/// An alias annotation: `Tensor(a)` or `Tensor(a!)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AliasInfo {
    /// The alias set name (`a`).
    pub set: String,
    /// True for `!`: the operator writes through this argument.
    pub is_write: bool,
}

/// One schema argument.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SchemaArg {
    /// Argument name.
    pub name: String,
    /// Argument type.
    pub ty: ArgType,
    /// Alias annotation, if any.
    pub alias: Option<AliasInfo>,
    /// True when the argument is keyword-only (after `*`).
    pub kwarg_only: bool,
}

impl SchemaArg {
    /// True when the operator writes this argument.
    #[must_use]
    pub fn is_written(&self) -> bool {
        self.alias.as_ref().is_some_and(|a| a.is_write)
    }
}

/// One schema return.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SchemaReturn {
    /// Return type.
    pub ty: ArgType,
    /// Alias annotation, if any.
    pub alias: Option<AliasInfo>,
}

/// Operator tags the engine uses (a subset of `torch.Tag`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OpTags {
    /// `torch.Tag.out`: written arguments are write-only output buffers.
    pub out: bool,
    /// `torch.Tag.inplace`: mutates its first argument and returns it.
    pub inplace: bool,
    /// `torch.Tag.nondeterministic_seeded`: consumes random state; never moved.
    pub nondeterministic: bool,
}

impl OpTags {
    /// Packs the tags into the bit set used by the encoders and the file format.
    #[must_use]
    pub fn bits(self) -> u8 {
        u8::from(self.out) | (u8::from(self.inplace) << 1) | (u8::from(self.nondeterministic) << 2)
    }

    /// Inverse of [`OpTags::bits`]; unknown bits are ignored.
    #[must_use]
    pub fn from_bits(bits: u8) -> Self {
        Self {
            out: bits & 1 != 0,
            inplace: bits & 2 != 0,
            nondeterministic: bits & 4 != 0,
        }
    }
}

/// Schema facts of one operator overload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpSchema {
    /// Arguments, in schema order.
    pub args: Vec<SchemaArg>,
    /// Returns, in schema order.
    pub returns: Vec<SchemaReturn>,
    /// Tags.
    pub tags: OpTags,
}

impl OpSchema {
    /// True when the operator returns one list of tensors (`split`,
    /// `unbind`): its value is a list, not a tensor.
    #[must_use]
    pub fn returns_list(&self) -> bool {
        self.returns.len() == 1 && self.returns[0].ty == ArgType::TensorList
    }

    /// True when the operator writes any argument.
    #[must_use]
    pub fn is_mutable(&self) -> bool {
        self.args.iter().any(SchemaArg::is_written)
    }

    /// The written arguments, in schema order (the order auto_functionalized
    /// returns their new values in).
    pub fn written_args(&self) -> impl Iterator<Item = (usize, &SchemaArg)> {
        self.args.iter().enumerate().filter(|(_, a)| a.is_written())
    }

    /// For a view-like operator (a return aliases an argument without a
    /// write), the index of the argument the first return aliases.
    #[must_use]
    pub fn view_source(&self) -> Option<usize> {
        let ret = self.returns.first()?;
        let set = &ret.alias.as_ref().filter(|a| !a.is_write)?.set;
        self.args.iter().position(|a| {
            a.alias
                .as_ref()
                .is_some_and(|al| &al.set == set && !al.is_write)
        })
    }

    /// The argument index return `i` aliases through a write annotation
    /// (`-> Tensor(a!)` of out= and in-place operators).
    #[must_use]
    pub fn written_return_source(&self, i: usize) -> Option<usize> {
        let set = &self
            .returns
            .get(i)?
            .alias
            .as_ref()
            .filter(|a| a.is_write)?
            .set;
        self.args
            .iter()
            .position(|a| a.alias.as_ref().is_some_and(|al| &al.set == set))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(name: &str, ty: ArgType, alias: Option<(&str, bool)>) -> SchemaArg {
        SchemaArg {
            name: name.into(),
            ty,
            alias: alias.map(|(s, w)| AliasInfo {
                set: s.into(),
                is_write: w,
            }),
            kwarg_only: false,
        }
    }

    #[test]
    fn view_source_finds_the_aliased_argument() {
        let slice = OpSchema {
            args: vec![
                arg("self", ArgType::Tensor, Some(("a", false))),
                arg("dim", ArgType::Other, None),
            ],
            returns: vec![SchemaReturn {
                ty: ArgType::Tensor,
                alias: Some(AliasInfo {
                    set: "a".into(),
                    is_write: false,
                }),
            }],
            tags: OpTags::default(),
        };
        assert_eq!(slice.view_source(), Some(0));
        assert!(!slice.is_mutable());
    }

    #[test]
    fn written_args_are_in_schema_order() {
        let op = OpSchema {
            args: vec![
                arg("x", ArgType::Tensor, None),
                arg("out", ArgType::Tensor, Some(("a", true))),
                arg("res", ArgType::OptionalTensor, Some(("b", true))),
            ],
            returns: vec![],
            tags: OpTags::default(),
        };
        let names: Vec<_> = op.written_args().map(|(_, a)| a.name.as_str()).collect();
        assert_eq!(names, ["out", "res"]);
        assert_eq!(op.view_source(), None);
    }

    #[test]
    fn tag_bits_round_trip() {
        for bits in 0..8u8 {
            assert_eq!(OpTags::from_bits(bits).bits(), bits);
        }
    }
}
