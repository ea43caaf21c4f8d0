//! Operator schemas as torch spells them (`native_functions.yaml`, alias
//! annotations included) and the custom mutating operators the tests and
//! benches use: one catalogue, so that a schema is written once.

use fxrewrite::ir::schema::OpTags;
use fxrewrite::ir::{AliasInfo, ArgType, OpSchema, SchemaArg, SchemaReturn};

/// A schema argument. `alias` is `""` (none), `"a"` (aliases, read) or `"a!"`
/// (written).
pub fn arg(name: &str, ty: ArgType, alias: &str) -> SchemaArg {
    SchemaArg {
        name: name.into(),
        ty,
        alias: alias_info(alias),
        kwarg_only: false,
    }
}

/// A keyword-only schema argument (after `*`).
pub fn kwarg_only(name: &str, ty: ArgType, alias: &str) -> SchemaArg {
    SchemaArg {
        kwarg_only: true,
        ..arg(name, ty, alias)
    }
}

pub fn ret(ty: ArgType, alias: &str) -> SchemaReturn {
    SchemaReturn {
        ty,
        alias: alias_info(alias),
    }
}

pub fn alias_info(alias: &str) -> Option<AliasInfo> {
    if alias.is_empty() {
        return None;
    }
    let is_write = alias.ends_with('!');
    Some(AliasInfo {
        set: alias.trim_end_matches('!').into(),
        is_write,
    })
}

pub fn schema(args: Vec<SchemaArg>, returns: Vec<SchemaReturn>) -> OpSchema {
    OpSchema {
        args,
        returns,
        tags: OpTags::default(),
    }
}

pub use ArgType::{OptionalTensor, Other, Tensor, TensorList};

/// An operator overload: qualified name and schema.
pub struct Op {
    /// The qualified overload name (`aten::slice.Tensor`).
    pub name: &'static str,
    /// Its schema.
    pub schema: OpSchema,
}

/// `aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None,
/// SymInt? end=None, SymInt step=1) -> Tensor(a)`
pub fn slice_op() -> Op {
    Op {
        name: "aten::slice.Tensor",
        schema: schema(
            vec![
                arg("self", Tensor, "a"),
                arg("dim", Other, ""),
                arg("start", Other, ""),
                arg("end", Other, ""),
                arg("step", Other, ""),
            ],
            vec![ret(Tensor, "a")],
        ),
    }
}

/// `aten::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)`
pub fn select_op() -> Op {
    Op {
        name: "aten::select.int",
        schema: schema(
            vec![
                arg("self", Tensor, "a"),
                arg("dim", Other, ""),
                arg("index", Other, ""),
            ],
            vec![ret(Tensor, "a")],
        ),
    }
}

/// `aten::as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride,
/// SymInt? storage_offset=None) -> Tensor(a)`
pub fn as_strided_op() -> Op {
    Op {
        name: "aten::as_strided.default",
        schema: schema(
            vec![
                arg("self", Tensor, "a"),
                arg("size", Other, ""),
                arg("stride", Other, ""),
                arg("storage_offset", Other, ""),
            ],
            vec![ret(Tensor, "a")],
        ),
    }
}

/// `aten::split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes,
/// int dim=0) -> Tensor(a)[]`, encoded as the Python encoder does: both
/// alias sets are `*`.
pub fn split_with_sizes_op() -> Op {
    Op {
        name: "aten::split_with_sizes.default",
        schema: schema(
            vec![
                arg("self", Tensor, "*"),
                arg("split_sizes", Other, ""),
                arg("dim", Other, ""),
            ],
            vec![ret(TensorList, "*")],
        ),
    }
}

/// `aten::slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None,
/// SymInt? end=None, SymInt step=1) -> Tensor`
pub fn slice_scatter_op() -> Op {
    Op {
        name: "aten::slice_scatter.default",
        schema: schema(
            vec![
                arg("self", Tensor, ""),
                arg("src", Tensor, ""),
                arg("dim", Other, ""),
                arg("start", Other, ""),
                arg("end", Other, ""),
                arg("step", Other, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor`
pub fn select_scatter_op() -> Op {
    Op {
        name: "aten::select_scatter.default",
        schema: schema(
            vec![
                arg("self", Tensor, ""),
                arg("src", Tensor, ""),
                arg("dim", Other, ""),
                arg("index", Other, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)`
pub fn copy_op() -> Op {
    Op {
        name: "aten::copy_.default",
        schema: schema(
            vec![
                arg("self", Tensor, "a!"),
                arg("src", Tensor, ""),
                arg("non_blocking", Other, ""),
            ],
            vec![ret(Tensor, "a!")],
        ),
    }
}

/// `aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor`
pub fn add_op() -> Op {
    Op {
        name: "aten::add.Tensor",
        schema: schema(
            vec![
                arg("self", Tensor, ""),
                arg("other", Tensor, ""),
                kwarg_only("alpha", Other, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::mul.Tensor(Tensor self, Tensor other) -> Tensor`
pub fn mul_op() -> Op {
    Op {
        name: "aten::mul.Tensor",
        schema: schema(
            vec![arg("self", Tensor, ""), arg("other", Tensor, "")],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::mm(Tensor self, Tensor mat2) -> Tensor`
pub fn mm_op() -> Op {
    Op {
        name: "aten::mm.default",
        schema: schema(
            vec![arg("self", Tensor, ""), arg("mat2", Tensor, "")],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None,
/// Layout? layout=None, Device? device=None, bool? pin_memory=None,
/// MemoryFormat? memory_format=None) -> Tensor`
pub fn empty_op() -> Op {
    Op {
        name: "aten::empty.memory_format",
        schema: schema(
            vec![
                arg("size", Other, ""),
                kwarg_only("dtype", Other, ""),
                kwarg_only("layout", Other, ""),
                kwarg_only("device", Other, ""),
                kwarg_only("pin_memory", Other, ""),
                kwarg_only("memory_format", Other, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `mylib::rms(Tensor(a!) out, Tensor x, Tensor w) -> ()`
pub fn rms_op() -> Op {
    Op {
        name: "mylib::rms.default",
        schema: schema(
            vec![
                arg("out", Tensor, "a!"),
                arg("x", Tensor, ""),
                arg("w", Tensor, ""),
            ],
            vec![],
        ),
    }
}

/// `mylib::add_rms(Tensor(a!) x, Tensor(b!) res, Tensor w) -> Tensor`
pub fn add_rms_op() -> Op {
    Op {
        name: "mylib::add_rms.default",
        schema: schema(
            vec![
                arg("x", Tensor, "a!"),
                arg("res", Tensor, "b!"),
                arg("w", Tensor, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `mylib::rot(Tensor(a!) q, Tensor(b!) k, Tensor cos) -> ()`
pub fn rot_op() -> Op {
    Op {
        name: "mylib::rot.default",
        schema: schema(
            vec![
                arg("q", Tensor, "a!"),
                arg("k", Tensor, "b!"),
                arg("cos", Tensor, ""),
            ],
            vec![],
        ),
    }
}

/// `mylib::opt(Tensor(a!) x, Tensor(b!)? res, Tensor w) -> ()`
pub fn opt_op() -> Op {
    Op {
        name: "mylib::opt.default",
        schema: schema(
            vec![
                arg("x", Tensor, "a!"),
                arg("res", OptionalTensor, "b!"),
                arg("w", Tensor, ""),
            ],
            vec![],
        ),
    }
}

/// `mylib::foreach(Tensor(a!)[] xs, Tensor w) -> ()`
pub fn foreach_op() -> Op {
    Op {
        name: "mylib::foreach.default",
        schema: schema(
            vec![arg("xs", TensorList, "a!"), arg("w", Tensor, "")],
            vec![],
        ),
    }
}

/// `mylib::mk(Tensor x, *, Tensor(a!) out) -> Tensor(a!)`, tagged `out`.
pub fn mk_op() -> Op {
    let mut s = schema(
        vec![arg("x", Tensor, ""), kwarg_only("out", Tensor, "a!")],
        vec![ret(Tensor, "a!")],
    );
    s.tags = OpTags {
        out: true,
        ..OpTags::default()
    };
    Op {
        name: "mylib::mk.default",
        schema: s,
    }
}

/// `op(name, args, returns)`: an untagged overload.
pub fn op(name: &'static str, args: Vec<SchemaArg>, returns: Vec<SchemaReturn>) -> Op {
    Op {
        name,
        schema: schema(args, returns),
    }
}

/// `aten::clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor`
pub fn clone_op() -> Op {
    op(
        "aten::clone.default",
        vec![
            arg("self", Tensor, ""),
            kwarg_only("memory_format", Other, ""),
        ],
        vec![ret(Tensor, "")],
    )
}

/// `aten::neg(Tensor self) -> Tensor`
pub fn neg_op() -> Op {
    op(
        "aten::neg.default",
        vec![arg("self", Tensor, "")],
        vec![ret(Tensor, "")],
    )
}

/// `mylib::two(Tensor(a!) x, Tensor w) -> (Tensor, Tensor)`
pub fn two_op() -> Op {
    op(
        "mylib::two.default",
        vec![arg("x", Tensor, "a!"), arg("w", Tensor, "")],
        vec![ret(Tensor, ""), ret(Tensor, "")],
    )
}

/// `aten::sym_size.int(Tensor self, int dim) -> SymInt`: a size read at
/// run time, under `torch.compile(dynamic=True)`.
pub fn sym_size_op() -> Op {
    op(
        "aten::sym_size.int",
        vec![arg("self", Tensor, ""), arg("dim", Other, "")],
        vec![ret(Other, "")],
    )
}

/// `aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)`
pub fn view_op() -> Op {
    op(
        "aten::view.default",
        vec![arg("self", Tensor, "a"), arg("size", Other, "")],
        vec![ret(Tensor, "a")],
    )
}

/// `aten::expand(Tensor(a) self, SymInt[] size, *, bool implicit=False)
/// -> Tensor(a)`: a view that may overlap itself.
pub fn expand_op() -> Op {
    op(
        "aten::expand.default",
        vec![
            arg("self", Tensor, "a"),
            arg("size", Other, ""),
            kwarg_only("implicit", Other, ""),
        ],
        vec![ret(Tensor, "a")],
    )
}

// ----- the MoE decoder of the benches (`benches/common/`) -----------------------

/// `aten::embedding.default`
pub fn embedding_op() -> Op {
    Op {
        name: "aten::embedding.default",
        schema: schema(
            vec![
                arg("weight", Tensor, ""),
                arg("indices", Tensor, ""),
                arg("padding_idx", Other, ""),
                arg("scale_grad_by_freq", Other, ""),
                arg("sparse", Other, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::index_select.default`
pub fn index_select_op() -> Op {
    Op {
        name: "aten::index_select.default",
        schema: schema(
            vec![
                arg("self", Tensor, ""),
                arg("dim", Other, ""),
                arg("index", Tensor, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::permute.default`
pub fn permute_op() -> Op {
    Op {
        name: "aten::permute.default",
        schema: schema(
            vec![arg("self", Tensor, "a"), arg("dims", Other, "")],
            vec![ret(Tensor, "a")],
        ),
    }
}

/// `aten::reshape.default`
pub fn reshape_op() -> Op {
    Op {
        name: "aten::reshape.default",
        schema: schema(
            vec![arg("self", Tensor, "a"), arg("shape", Other, "")],
            vec![ret(Tensor, "a")],
        ),
    }
}

/// `aten::sum.dim_IntList`
pub fn sum_op() -> Op {
    Op {
        name: "aten::sum.dim_IntList",
        schema: schema(
            vec![
                arg("self", Tensor, ""),
                arg("dim", Other, ""),
                arg("keepdim", Other, ""),
                kwarg_only("dtype", Other, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::_softmax.default`
pub fn softmax_op() -> Op {
    Op {
        name: "aten::_softmax.default",
        schema: schema(
            vec![
                arg("self", Tensor, ""),
                arg("dim", Other, ""),
                arg("half_to_float", Other, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::topk.default`
pub fn topk_op() -> Op {
    Op {
        name: "aten::topk.default",
        schema: schema(
            vec![
                arg("self", Tensor, ""),
                arg("k", Other, ""),
                arg("dim", Other, ""),
                arg("largest", Other, ""),
                arg("sorted", Other, ""),
            ],
            vec![ret(Tensor, ""), ret(Tensor, "")],
        ),
    }
}

/// `aten::div.Tensor`
pub fn div_op() -> Op {
    Op {
        name: "aten::div.Tensor",
        schema: schema(
            vec![arg("self", Tensor, ""), arg("other", Tensor, "")],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::eq.Scalar`
pub fn eq_op() -> Op {
    Op {
        name: "aten::eq.Scalar",
        schema: schema(
            vec![arg("self", Tensor, ""), arg("other", Other, "")],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `mylib::fused_add_rms_norm.default`
pub fn fused_add_rms_norm_op() -> Op {
    Op {
        name: "mylib::fused_add_rms_norm.default",
        schema: schema(
            vec![
                arg("input", Tensor, "a!"),
                arg("residual", Tensor, "b!"),
                arg("weight", Tensor, ""),
                arg("eps", Other, ""),
            ],
            vec![],
        ),
    }
}

/// `mylib::rotary.default`
pub fn rotary_op() -> Op {
    Op {
        name: "mylib::rotary.default",
        schema: schema(
            vec![
                arg("q", Tensor, "a!"),
                arg("k", Tensor, "b!"),
                arg("cos", Tensor, ""),
                arg("sin", Tensor, ""),
            ],
            vec![],
        ),
    }
}

/// `mylib::kv_write.default`
pub fn kv_write_op() -> Op {
    Op {
        name: "mylib::kv_write.default",
        schema: schema(
            vec![
                arg("cache", Tensor, "a!"),
                arg("k", Tensor, ""),
                arg("v", Tensor, ""),
                arg("slots", Tensor, ""),
            ],
            vec![],
        ),
    }
}

/// `mylib::silu_and_mul.default`
pub fn silu_and_mul_op() -> Op {
    Op {
        name: "mylib::silu_and_mul.default",
        schema: schema(vec![arg("out", Tensor, "a!"), arg("x", Tensor, "")], vec![]),
    }
}
