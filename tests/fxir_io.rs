//! The `.fxir` file format (`rust/ir/io/`, spec in `docs/fxir.md`):
//! round trips, truncation and corruption at every byte, hostile lengths,
//! hand-built files that break one rule each, and property tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use fxrewrite::forms::Form;
use fxrewrite::ir::io::{
    self, crc32, FileInfo, ANCILLARY_SECTION, CHECKSUM_LEN, FORMAT_VERSION, HEADER_LEN, MAGIC,
    MAX_STRING_EXPANSION, SECTION_INFO, SECTION_NODES, SECTION_STRINGS, SECTION_TARGETS,
    STRING_BUDGET_FLOOR,
};
use fxrewrite::ir::schema::OpTags;
use fxrewrite::ir::validate::MAX_VALUE_DEPTH;
use fxrewrite::ir::{
    static_dims, AliasInfo, ArgType, Dim, Graph, Node, NodeId, OpCode, OpSchema, SchemaArg,
    SchemaReturn, Target, TargetId, TargetKind, TensorMeta, Value,
};
use fxrewrite::Error;
use proptest::prelude::*;

#[path = "common/seeds.rs"]
mod seeds;

// ----- graph builders ----------------------------------------------------------

fn alias(set: &str, is_write: bool) -> Option<AliasInfo> {
    Some(AliasInfo {
        set: set.into(),
        is_write,
    })
}

fn node(op: OpCode, name: &str, target: TargetId, args: Vec<Value>) -> Node {
    Node {
        op,
        name: name.into(),
        target,
        args,
        kwargs: vec![],
        meta: None,
        source: None,
    }
}

fn meta(shape: &[i64], storage: u64) -> TensorMeta {
    let mut stride = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        stride[i] = stride[i + 1] * shape[i + 1];
    }
    TensorMeta {
        storage: Some(storage),
        device: "cuda:0".into(),
        ..TensorMeta::static_strided("float32", 4, shape, &stride, 0)
    }
}

/// A graph that uses every `Value` variant, every opcode, every target kind,
/// schemas with every alias/kwarg_only combination and tag bit, full and
/// partial meta, and source lines.
fn rich_graph() -> Graph {
    let mut g = Graph::new();
    let ph = g.add_target(Target {
        name: "x".into(),
        kind: TargetKind::Other,
        schema: None,
    });
    let attr = g.add_target(Target {
        name: "weight".into(),
        kind: TargetKind::Other,
        schema: None,
    });
    let rms = g.add_target(Target {
        name: "mylib::rms_norm.default".into(),
        kind: TargetKind::Operator,
        schema: Some(OpSchema {
            args: vec![
                SchemaArg {
                    name: "result".into(),
                    ty: ArgType::Tensor,
                    alias: alias("a", true),
                    kwarg_only: false,
                },
                SchemaArg {
                    name: "input".into(),
                    ty: ArgType::Tensor,
                    alias: None,
                    kwarg_only: false,
                },
                SchemaArg {
                    name: "residual".into(),
                    ty: ArgType::OptionalTensor,
                    alias: alias("b", true),
                    kwarg_only: true,
                },
                SchemaArg {
                    name: "bufs".into(),
                    ty: ArgType::TensorList,
                    alias: alias("c", false),
                    kwarg_only: true,
                },
                SchemaArg {
                    name: "eps".into(),
                    ty: ArgType::Other,
                    alias: None,
                    kwarg_only: true,
                },
            ],
            returns: vec![
                SchemaReturn {
                    ty: ArgType::Tensor,
                    alias: alias("a", true),
                },
                SchemaReturn {
                    ty: ArgType::TensorList,
                    alias: alias("c", false),
                },
                SchemaReturn {
                    ty: ArgType::Other,
                    alias: None,
                },
            ],
            tags: OpTags {
                out: true,
                inplace: false,
                nondeterministic: true,
            },
        }),
    });
    let slice = g.add_target(Target {
        name: "aten::slice.Tensor".into(),
        kind: TargetKind::Operator,
        schema: Some(OpSchema {
            args: vec![SchemaArg {
                name: "self".into(),
                ty: ArgType::Tensor,
                alias: alias("a", false),
                kwarg_only: false,
            }],
            returns: vec![SchemaReturn {
                ty: ArgType::Tensor,
                alias: alias("a", false),
            }],
            tags: OpTags {
                out: false,
                inplace: true,
                nondeterministic: false,
            },
        }),
    });
    let empty_schema = g.add_target(Target {
        name: "aten::empty_schema".into(),
        kind: TargetKind::Operator,
        schema: Some(OpSchema {
            args: vec![],
            returns: vec![],
            tags: OpTags::default(),
        }),
    });
    let getitem = g.add_target(Target {
        name: "operator.getitem".into(),
        kind: TargetKind::Getitem,
        schema: None,
    });
    let af = g.add_target(Target {
        name: "higher_order.auto_functionalized".into(),
        kind: Form::V1.kind(),
        schema: None,
    });
    let af2 = g.add_target(Target {
        name: "higher_order.auto_functionalized_v2".into(),
        kind: Form::V2.kind(),
        schema: None,
    });
    let hop = g.add_target(Target {
        name: "higher_order.wrap_with_set_grad_enabled".into(),
        kind: TargetKind::HigherOrder,
        schema: None,
    });
    let method = g.add_target(Target {
        name: "view".into(),
        kind: TargetKind::Other,
        schema: None,
    });
    let module = g.add_target(Target {
        name: "layers.0.mlp".into(),
        kind: TargetKind::Other,
        schema: None,
    });
    let out = g.add_target(Target {
        name: "output".into(),
        kind: TargetKind::Other,
        schema: None,
    });

    let mut x = node(OpCode::Placeholder, "x", ph, vec![]);
    x.meta = Some(meta(&[4, 128], 1));
    let x = g.add_node(x);
    let mut w = node(OpCode::GetAttr, "weight", attr, vec![]);
    w.meta = Some(TensorMeta {
        dtype: "bfloat16".into(),
        // A symbolic size and no strides (not a strided tensor).
        sizes: vec![Dim::Symbolic("s0".into())],
        strides: None,
        offset: None,
        itemsize: 2,
        storage: None,
        device: String::new(),
    });
    let w = g.add_node(w);
    let mut s = node(
        OpCode::CallFunction,
        "slice_1",
        slice,
        vec![
            Value::Node(x),
            Value::Int(0),
            Value::Int(i64::MIN),
            Value::Int(i64::MAX),
        ],
    );
    s.meta = Some(TensorMeta {
        offset: Some(Dim::Static(-3)),
        storage: Some(u64::MAX),
        ..meta(&[2, 128], 1)
    });
    s.source = Some("    y = x[:2]  # ünïcödé ✓".into());
    let s = g.add_node(s);
    let mut call = node(
        OpCode::CallFunction,
        "auto_functionalized",
        af,
        vec![Value::Target(rms)],
    );
    call.kwargs = vec![
        ("result".into(), Value::Node(s)),
        ("input".into(), Value::Node(x)),
        ("residual".into(), Value::None),
        (
            "bufs".into(),
            Value::List(vec![Value::Node(w), Value::Node(x)]),
        ),
        ("eps".into(), Value::Float(1e-6)),
    ];
    call.source = Some("    y = x[:2]  # ünïcödé ✓".into());
    let call = g.add_node(call);
    let mut gi = node(
        OpCode::CallFunction,
        "getitem",
        getitem,
        vec![Value::Node(call), Value::Int(1)],
    );
    // Transposed (stored strides), next to a zero-size tensor (contiguous
    // by torch's rule, size 0 counting as 1).
    gi.meta = Some(TensorMeta {
        // Per-dimension: one symbolic size and stride beside static ones.
        sizes: vec![Dim::Symbolic("s0".into()), Dim::Static(128)],
        strides: Some(vec![Dim::Static(1), Dim::Symbolic("s0".into())]),
        storage: Some(7),
        ..meta(&[4, 128], 1)
    });
    let gi = g.add_node(gi);
    let mut call2 = node(
        OpCode::CallFunction,
        "auto_functionalized_v2",
        af2,
        vec![Value::Target(slice)],
    );
    call2.kwargs = vec![
        ("_all_bases".into(), Value::List(vec![Value::Node(gi)])),
        ("".into(), Value::Str(String::new())),
    ];
    let call2 = g.add_node(call2);
    let consts = g.add_node(node(
        OpCode::CallFunction,
        "consts",
        hop,
        vec![
            Value::None,
            Value::Bool(true),
            Value::Bool(false),
            Value::Int(-1),
            Value::Float(-0.0),
            Value::Float(f64::INFINITY),
            Value::Float(f64::MIN_POSITIVE),
            Value::Str("hello \0 world".into()),
            Value::Dtype("float16".into()),
            Value::Device("cuda:1".into()),
            Value::Layout("strided".into()),
            Value::MemoryFormat("channels_last".into()),
            Value::Target(empty_schema),
            Value::Opaque("<function f at 0x7f>".into()),
            Value::Tuple(vec![]),
            Value::List(vec![]),
            Value::Tuple(vec![
                Value::List(vec![Value::Tuple(vec![Value::Node(call2)])]),
                Value::Str("nested".into()),
            ]),
        ],
    ));
    let v = g.add_node(node(
        OpCode::CallMethod,
        "view",
        method,
        vec![Value::Node(consts), Value::Int(-1), Value::Int(1 << 40)],
    ));
    let mut m = node(OpCode::CallModule, "mlp", module, vec![Value::Node(v)]);
    m.meta = Some(TensorMeta {
        strides: Some(static_dims(&[3, 3, 1])),
        ..meta(&[2, 0, 3], 3)
    });
    let m = g.add_node(m);
    g.add_node(node(
        OpCode::Output,
        "output",
        out,
        vec![Value::Tuple(vec![Value::Node(m), Value::Node(x)])],
    ));
    g
}

fn info() -> FileInfo {
    FileInfo::provenance(
        "2.7.0+cu126",
        "fxrewrite 0.1.0",
        "compile 3 / graph 0 / before",
    )
    .with("host", "gpu-07")
    .with("", "")
    .with("note ✓", "ünïcödé")
}

/// A graph shaped like a post-grad transformer graph: placeholders, then
/// blocks of matmul / add / view / auto_functionalized / getitem with full
/// tensor meta, node names like `mm_12`, and a source line shared by each
/// block. Used for the size-per-node numbers in `docs/fxir.md`.
fn transformer_like(n_nodes: usize, with_meta: bool) -> Graph {
    let mut g = Graph::new();
    let op = |g: &mut Graph, name: &str, mutating: bool| {
        g.add_target(Target {
            name: name.into(),
            kind: TargetKind::Operator,
            schema: Some(OpSchema {
                args: vec![
                    SchemaArg {
                        name: "self".into(),
                        ty: ArgType::Tensor,
                        alias: mutating.then(|| AliasInfo {
                            set: "a".into(),
                            is_write: true,
                        }),
                        kwarg_only: false,
                    },
                    SchemaArg {
                        name: "other".into(),
                        ty: ArgType::Tensor,
                        alias: None,
                        kwarg_only: false,
                    },
                ],
                returns: vec![SchemaReturn {
                    ty: ArgType::Tensor,
                    alias: None,
                }],
                tags: OpTags::default(),
            }),
        })
    };
    let ph = g.add_target(Target {
        name: "placeholder".into(),
        kind: TargetKind::Other,
        schema: None,
    });
    let mm = op(&mut g, "aten::mm.default", false);
    let add = op(&mut g, "aten::add.Tensor", false);
    let view = op(&mut g, "aten::view.default", false);
    let rms = op(&mut g, "mylib::rms_norm.default", true);
    let af = g.add_target(Target {
        name: "higher_order.auto_functionalized_v2".into(),
        kind: Form::V2.kind(),
        schema: None,
    });
    let gi = g.add_target(Target {
        name: "operator.getitem".into(),
        kind: TargetKind::Getitem,
        schema: None,
    });
    let out = g.add_target(Target {
        name: "output".into(),
        kind: TargetKind::Other,
        schema: None,
    });
    let with = |mut n: Node, shape: &[i64], storage: u64, src: Option<String>| {
        if with_meta {
            n.meta = Some(meta(shape, storage));
            n.source = src;
        }
        n
    };
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(g.add_node(with(
            node(OpCode::Placeholder, &format!("arg{i}_1"), ph, vec![]),
            &[16, 4096],
            0x7f3a_1100_0000 + i * 0x1a0,
            None,
        )));
    }
    let mut block = 0usize;
    while g.nodes.len() + 1 < n_nodes {
        // The last line of the stack trace; one user line makes 5 nodes.
        let line = block / 5;
        let src = Some(format!(
            "    h = self.layers[{}].mlp(self.norm(h))  # model.py:{}",
            line / 10,
            100 + line
        ));
        let last = *ids.last().unwrap();
        let prev = ids[ids.len().saturating_sub(3)];
        let k = g.nodes.len();
        // Storage keys are heap addresses of storage objects.
        let storage = 0x7f3a_1200_0000 + k as u64 * 0x1a0;
        let step = block % 5;
        let id = match step {
            0 => g.add_node(with(
                node(
                    OpCode::CallFunction,
                    &format!("mm_{k}"),
                    mm,
                    vec![Value::Node(last), Value::Node(ids[0])],
                ),
                &[16, 4096],
                storage,
                src,
            )),
            1 => g.add_node(with(
                node(
                    OpCode::CallFunction,
                    &format!("add_{k}"),
                    add,
                    vec![Value::Node(last), Value::Node(prev)],
                ),
                &[16, 4096],
                storage,
                src,
            )),
            2 => g.add_node(with(
                node(
                    OpCode::CallFunction,
                    &format!("view_{k}"),
                    view,
                    vec![
                        Value::Node(last),
                        Value::List(vec![Value::Int(16), Value::Int(32), Value::Int(128)]),
                    ],
                ),
                &[16, 32, 128],
                storage - 0x1a0,
                src,
            )),
            3 => {
                let mut n = node(
                    OpCode::CallFunction,
                    &format!("auto_functionalized_v2_{k}"),
                    af,
                    vec![Value::Target(rms)],
                );
                n.kwargs = vec![
                    ("_self_base_index".into(), Value::Int(0)),
                    ("other".into(), Value::Node(prev)),
                    ("_all_bases".into(), Value::List(vec![Value::Node(last)])),
                ];
                g.add_node(if with_meta {
                    Node { source: src, ..n }
                } else {
                    n
                })
            }
            _ => g.add_node(with(
                node(
                    OpCode::CallFunction,
                    &format!("getitem_{k}"),
                    gi,
                    vec![Value::Node(last), Value::Int(1)],
                ),
                &[16, 4096],
                storage,
                src,
            )),
        };
        ids.push(id);
        block += 1;
    }
    let last = *ids.last().unwrap();
    g.add_node(node(
        OpCode::Output,
        "output",
        out,
        vec![Value::Tuple(vec![Value::Node(last)])],
    ));
    g
}

fn minimal_graph() -> Graph {
    let mut g = Graph::new();
    let t = g.add_target(Target {
        name: "output".into(),
        kind: TargetKind::Other,
        schema: None,
    });
    g.add_node(node(OpCode::Output, "output", t, vec![]));
    g
}

// ----- hand-built files ------------------------------------------------------------

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zz(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// A file with the given sections and a correct header, length and checksum,
/// written here independently of `io::write`, following `docs/fxir.md`.
fn assemble_with(version: u32, flags: u32, count: u32, sections: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (tag, payload) in sections {
        body.push(*tag);
        varint(&mut body, payload.len() as u64);
        body.extend_from_slice(payload);
    }
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    let total = (HEADER_LEN + body.len() + CHECKSUM_LEN) as u64;
    out.extend_from_slice(&total.to_le_bytes());
    out.extend_from_slice(&body);
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn assemble(sections: &[(u8, Vec<u8>)]) -> Vec<u8> {
    assemble_with(FORMAT_VERSION, 0, sections.len() as u32, sections)
}

fn strings(list: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(&mut out, list.len() as u64);
    for s in list {
        varint(&mut out, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
    }
    out
}

/// The string table for the hand-built files: 0 = "output", 1 = "x".
fn std_strings() -> Vec<u8> {
    strings(&["output", "x"])
}

fn empty_info() -> Vec<u8> {
    vec![0]
}

/// One target, "output" (string 0), kind Other, no schema.
fn std_targets() -> Vec<u8> {
    vec![1, 0, 5, 0]
}

/// Nodes: a list of raw node encodings (count prepended).
fn nodes(list: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(&mut out, list.len() as u64);
    for n in list {
        out.extend_from_slice(n);
    }
    out
}

/// The output node: header 5, name 0, target 0, given args, no kwargs.
fn output_node(args: &[u8], n_args: u64) -> Vec<u8> {
    let mut out = vec![5, 0, 0];
    varint(&mut out, n_args);
    out.extend_from_slice(args);
    out.push(0);
    out
}

fn file_with_nodes(list: &[Vec<u8>]) -> Vec<u8> {
    file_with_strings_and_nodes(&["output", "x"], list)
}

fn file_with_strings_and_nodes(table: &[&str], list: &[Vec<u8>]) -> Vec<u8> {
    assemble(&[
        (SECTION_STRINGS, strings(table)),
        (SECTION_INFO, empty_info()),
        (SECTION_TARGETS, std_targets()),
        (SECTION_NODES, nodes(list)),
    ])
}

fn decode_err(bytes: &[u8]) -> (u64, String) {
    match io::read(bytes) {
        Err(Error::Decode { offset, detail }) => {
            assert!(
                offset <= bytes.len() as u64,
                "offset {offset} past the end ({} bytes): {detail}",
                bytes.len()
            );
            (offset, detail)
        }
        other => panic!("expected a decode error, got {other:?}"),
    }
}

// ----- round trips -------------------------------------------------------------

#[test]
fn rich_graph_round_trips() {
    let g = rich_graph();
    let i = info();
    fxrewrite::ir::validate::validate(&g).unwrap();
    let bytes = io::write(&g, &i);
    assert_eq!(&bytes[..8], &MAGIC);
    let (g2, i2) = io::read(&bytes).unwrap();
    assert_eq!(g2, g);
    assert_eq!(i2, i);
    assert_eq!(i2.torch_version(), Some("2.7.0+cu126"));
    assert_eq!(i2.producer(), Some("fxrewrite 0.1.0"));
    assert_eq!(i2.origin(), Some("compile 3 / graph 0 / before"));
    assert_eq!(i2.get("host"), Some("gpu-07"));
    // Writing is deterministic, and the reader preserves everything the
    // writer put in: a second round trip gives the same bytes.
    assert_eq!(io::write(&g2, &i2), bytes);
}

#[test]
fn minimal_graph_and_empty_info_round_trip() {
    let g = minimal_graph();
    let bytes = io::write(&g, &FileInfo::new());
    let (g2, i2) = io::read(&bytes).unwrap();
    assert_eq!(g2, g);
    assert!(i2.entries.is_empty());
}

#[test]
fn floats_round_trip_bit_for_bit() {
    let specials = [
        f64::NAN,
        -f64::NAN,
        f64::from_bits(0x7ff0_0000_0000_0001),
        -0.0,
        0.0,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::from_bits(1),
    ];
    let mut g = minimal_graph();
    g.nodes[0].args = specials.iter().map(|&f| Value::Float(f)).collect();
    let (g2, _) = io::read(&io::write(&g, &FileInfo::new())).unwrap();
    let back: Vec<u64> = g2.nodes[0]
        .args
        .iter()
        .map(|v| match v {
            Value::Float(f) => f.to_bits(),
            other => panic!("{other:?}"),
        })
        .collect();
    let want: Vec<u64> = specials.iter().map(|f| f.to_bits()).collect();
    assert_eq!(back, want);
}

#[test]
fn nesting_up_to_the_limit_round_trips_and_one_more_is_refused() {
    let nest = |levels: usize| {
        let mut v = Value::Int(7);
        for _ in 0..levels {
            v = Value::List(vec![v]);
        }
        v
    };
    let mut g = minimal_graph();
    g.nodes[0].args = vec![nest(MAX_VALUE_DEPTH)];
    let (g2, _) = io::read(&io::write(&g, &FileInfo::new())).unwrap();
    assert_eq!(g2, g);

    g.nodes[0].args = vec![nest(MAX_VALUE_DEPTH + 1)];
    let bytes = io::write(&g, &FileInfo::new());
    let (_, detail) = decode_err(&bytes);
    assert!(detail.contains("nested deeper"), "{detail}");
    assert!(detail.contains("section 'nodes' at node 0"), "{detail}");

    // A hostile file nested far deeper than the limit stops at the limit
    // (no stack overflow).
    let mut args = [6u8, 1].repeat(100_000);
    args.push(0);
    let bytes = file_with_nodes(&[output_node(&args, 1)]);
    let (_, detail) = decode_err(&bytes);
    assert!(detail.contains("nested deeper"), "{detail}");
}

#[test]
fn file_info_set_replaces_in_place() {
    let mut i = FileInfo::provenance("2.7", "p", "o");
    i.set(FileInfo::PRODUCER, "q");
    i.set("extra", "e");
    assert_eq!(
        i.entries,
        vec![
            ("torch_version".to_string(), "2.7".to_string()),
            ("producer".to_string(), "q".to_string()),
            ("origin".to_string(), "o".to_string()),
            ("extra".to_string(), "e".to_string()),
        ]
    );
    // Duplicate keys put in by hand survive a round trip, in order.
    i.entries.push(("extra".into(), "again".into()));
    let (_, back) = io::read(&io::write(&minimal_graph(), &i)).unwrap();
    assert_eq!(back, i);
    assert_eq!(back.get("extra"), Some("e"));
}

#[test]
fn strings_are_stored_once() {
    let long = "x".repeat(1000);
    let mut g = minimal_graph();
    g.nodes[0].args = (0..100).map(|_| Value::Str(long.clone())).collect();
    let bytes = io::write(&g, &FileInfo::new());
    assert!(bytes.len() < 1000 + 300, "{} bytes", bytes.len());
    assert_eq!(io::read(&bytes).unwrap().0, g);
}

// ----- truncation and corruption ------------------------------------------------------

#[test]
fn truncation_at_every_offset_is_an_error() {
    let bytes = io::write(&rich_graph(), &info());
    for cut in 0..bytes.len() {
        match io::read(&bytes[..cut]) {
            Err(Error::Decode { offset, detail }) => {
                assert!(offset <= cut as u64, "cut {cut}: offset {offset}");
                if cut >= HEADER_LEN {
                    assert!(detail.contains("truncated"), "cut {cut}: {detail}");
                }
            }
            other => panic!("cut {cut}: expected a decode error, got {other:?}"),
        }
    }
    // Appended bytes are refused too.
    let mut longer = bytes.clone();
    longer.push(0);
    let (_, detail) = decode_err(&longer);
    assert!(detail.contains("trailing"), "{detail}");
}

#[test]
fn every_single_byte_flip_is_an_error() {
    let bytes = io::write(&rich_graph(), &info());
    for pos in 0..bytes.len() {
        for mask in [0x01u8, 0x80, 0xff] {
            let mut bad = bytes.clone();
            bad[pos] ^= mask;
            match io::read(&bad) {
                Err(Error::Version { found, supported }) => {
                    assert!((8..12).contains(&pos), "pos {pos}");
                    assert_ne!(found, FORMAT_VERSION);
                    assert_eq!(supported, FORMAT_VERSION);
                }
                Err(Error::Decode { detail, .. }) => {
                    if pos < 8 {
                        assert!(detail.contains("magic"), "pos {pos}: {detail}");
                    } else if (20..28).contains(&pos) {
                        assert!(detail.contains("header says"), "pos {pos}: {detail}");
                    } else {
                        // Flags, section count, every section byte and the
                        // checksum itself: all caught by the CRC.
                        assert!(detail.contains("bad checksum"), "pos {pos}: {detail}");
                    }
                }
                other => panic!("pos {pos} mask {mask:#x}: expected an error, got {other:?}"),
            }
        }
    }
}

#[test]
fn wrong_magic_is_refused_with_a_diagnosis() {
    let bytes = io::write(&minimal_graph(), &FileInfo::new());
    let mut bad = bytes.clone();
    bad[1] = b'G';
    let (offset, detail) = decode_err(&bad);
    assert_eq!(offset, 0);
    assert!(detail.contains("not a .fxir file"), "{detail}");

    // A text-mode transfer turned CRLF into LF.
    let mut crlf = bytes[..5].to_vec();
    crlf.extend_from_slice(&bytes[6..]);
    let (_, detail) = decode_err(&crlf);
    assert!(detail.contains("CRLF was converted to LF"), "{detail}");

    // ... or LF into CRLF.
    let mut lf = bytes[..6].to_vec();
    lf.push(b'\r');
    lf.extend_from_slice(&bytes[6..]);
    let (_, detail) = decode_err(&lf);
    assert!(detail.contains("LF was converted to CRLF"), "{detail}");

    // A 7-bit channel stripped the high bit.
    let mut seven = bytes.clone();
    seven[0] &= 0x7f;
    let (_, detail) = decode_err(&seven);
    assert!(detail.contains("high bit"), "{detail}");

    let (_, detail) = decode_err(b"");
    assert!(detail.contains("truncated"), "{detail}");
    let (_, detail) = decode_err(b"{\"nodes\": []}");
    assert!(detail.contains("magic"), "{detail}");
}

#[test]
fn other_format_versions_are_refused_with_error_version() {
    let mut bytes = io::write(&minimal_graph(), &FileInfo::new());
    assert_eq!(FORMAT_VERSION, 2);
    // A newer version is refused, and the message names both versions.
    bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
    let err = io::read(&bytes).unwrap_err();
    assert_eq!(
        err,
        Error::Version {
            found: 3,
            supported: FORMAT_VERSION
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("version 3") && msg.contains("reads versions 1 to 2"),
        "{msg}"
    );
    // Even a file that is only magic + version is enough to say so.
    assert_eq!(
        io::read(&bytes[..12]),
        Err(Error::Version {
            found: 3,
            supported: 2
        })
    );
    let v0 = assemble_with(0, 0, 0, &[]);
    assert!(matches!(
        io::read(&v0),
        Err(Error::Version { found: 0, .. })
    ));
}

/// Files saved by a build of format version 1 still read: the graphs of
/// `tests/data/format1/` (the command line fixtures as that build saved
/// them) decode with every size, stride and offset static, as saved, and
/// the plan is the one of the same graph saved in version 2.
#[test]
fn version_1_files_still_read() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    for form in ["v1", "v2"] {
        let old = std::fs::read(data.join(format!("format1/cli_model_{form}.fxir"))).unwrap();
        assert_eq!(u32::from_le_bytes(old[8..12].try_into().unwrap()), 1);
        let (g, info) = io::read(&old).unwrap();
        assert!(info.torch_version().is_some());
        let metas: Vec<&TensorMeta> = g.nodes.iter().filter_map(|n| n.meta.as_ref()).collect();
        assert!(metas.len() > 5, "{form}: {} metas", metas.len());
        assert!(
            metas.iter().all(|m| m.shape().is_some()
                && m.stride().is_some()
                && m.storage_offset().is_some()),
            "{form}: a static compile's meta read as symbolic"
        );
        // Written again, it is a version-2 file of the same graph.
        let again = io::write(&g, &info);
        assert_eq!(
            u32::from_le_bytes(again[8..12].try_into().unwrap()),
            FORMAT_VERSION
        );
        assert_eq!(io::read(&again).unwrap().0, g);
        let new = std::fs::read(data.join(format!("cli_model_{form}.fxir"))).unwrap();
        let (g2, _) = io::read(&new).unwrap();
        let plan = |g: &Graph| format!("{:?}", fxrewrite::plan(g).unwrap().edits);
        assert_eq!(plan(&g), plan(&g2), "{form}");
    }
}

/// A version-1 meta with no sizes and no strides but a storage offset (a
/// tensor compiled with dynamic shapes) reads as strided, every size and
/// stride symbolic: what version 1's engine made of it.
#[test]
fn a_version_1_symbolic_meta_reads_as_symbolic_dimensions() {
    // Meta v1: dtype 1, device 1, rank 2, itemsize 4, flags offset (0x04),
    // offset 0.
    let bytes = assemble_with(
        1,
        0,
        4,
        &[
            (SECTION_STRINGS, strings(&["output", "x"])),
            (SECTION_INFO, empty_info()),
            (SECTION_TARGETS, std_targets()),
            (
                SECTION_NODES,
                nodes(&[vec![0x0d, 0, 0, 0, 0, 1, 1, 2, 4, 0x04, 0]]),
            ),
        ],
    );
    let (g, _) = io::read(&bytes).unwrap();
    let m = g.nodes[0].meta.as_ref().unwrap();
    let unknown = Dim::Symbolic("?".into());
    assert_eq!(m.sizes, [unknown.clone(), unknown.clone()]);
    assert_eq!(m.strides, Some(vec![unknown.clone(), unknown]));
    assert_eq!(m.offset, Some(Dim::Static(0)));
    assert_eq!(m.itemsize, 4);
    // A huge rank with no sizes is a corrupt file, not a list to allocate.
    let bytes = assemble_with(
        1,
        0,
        4,
        &[
            (SECTION_STRINGS, strings(&["output", "x"])),
            (SECTION_INFO, empty_info()),
            (SECTION_TARGETS, std_targets()),
            (
                SECTION_NODES,
                nodes(&[vec![0x0d, 0, 0, 0, 0, 1, 1, 0xff, 0xff, 0x03, 4, 0x04, 0]]),
            ),
        ],
    );
    let (_, d) = decode_err(&bytes);
    assert!(d.contains("meta rank 65535 too large"), "{d}");
}

// ----- hostile and malformed files (valid checksum) -------------------------------------

#[test]
fn hand_built_file_matches_the_writer() {
    // The spec in docs/fxir.md is enough to write a file by hand.
    let hand = file_with_strings_and_nodes(&["output"], &[output_node(&[], 0)]);
    assert_eq!(hand, io::write(&minimal_graph(), &FileInfo::new()));
}

#[test]
fn hostile_string_count_fails_fast_without_allocating() {
    let mut table = Vec::new();
    varint(&mut table, 1 << 60);
    table.extend_from_slice(&[0; 16]);
    let bytes = assemble(&[(SECTION_STRINGS, table)]);
    let (offset, detail) = decode_err(&bytes);
    assert_eq!(offset, HEADER_LEN as u64 + 2);
    assert_eq!(
        detail,
        "string count 1152921504606846976 is impossible with only 16 bytes left \
         in section 'strings'"
    );
}

#[test]
fn hostile_lengths_everywhere_fail_fast() {
    let huge = u64::MAX;
    // A string length.
    let mut table = vec![1];
    varint(&mut table, huge);
    let (_, d) = decode_err(&assemble(&[(SECTION_STRINGS, table)]));
    assert!(
        d.contains("string length") && d.contains("at string 0"),
        "{d}"
    );
    // A section length.
    let mut bytes = assemble(&[]);
    bytes.truncate(HEADER_LEN);
    bytes[16..20].copy_from_slice(&1u32.to_le_bytes());
    bytes.push(SECTION_STRINGS);
    varint(&mut bytes, 1 << 62);
    let total = (bytes.len() + CHECKSUM_LEN) as u64;
    bytes[20..28].copy_from_slice(&total.to_le_bytes());
    let crc = crc32(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    let (_, d) = decode_err(&bytes);
    assert!(d.contains("section length"), "{d}");
    // A node count, an argument count, a list length, a kwarg count.
    let mut n = Vec::new();
    varint(&mut n, 1 << 40);
    let file = assemble(&[
        (SECTION_STRINGS, std_strings()),
        (SECTION_INFO, empty_info()),
        (SECTION_TARGETS, std_targets()),
        (SECTION_NODES, n),
    ]);
    let (_, d) = decode_err(&file);
    assert!(d.contains("node count"), "{d}");
    let (_, d) = decode_err(&file_with_nodes(&[output_node(&[], 1 << 50)]));
    assert!(
        d.contains("argument count") && d.contains("at node 0"),
        "{d}"
    );
    let mut list = vec![6];
    varint(&mut list, 1 << 33);
    let (_, d) = decode_err(&file_with_nodes(&[output_node(&list, 1)]));
    assert!(d.contains("container length"), "{d}");
    let mut kw = vec![5, 0, 0, 0];
    varint(&mut kw, huge);
    let (_, d) = decode_err(&file_with_nodes(&[kw]));
    assert!(d.contains("keyword argument count"), "{d}");
    // A target count, a schema argument count.
    let mut t = Vec::new();
    varint(&mut t, 1 << 45);
    let file = assemble(&[
        (SECTION_STRINGS, std_strings()),
        (SECTION_INFO, empty_info()),
        (SECTION_TARGETS, t),
    ]);
    let (_, d) = decode_err(&file);
    assert!(d.contains("target count"), "{d}");
    let mut t = vec![1, 0, 0, 1];
    varint(&mut t, 1 << 45);
    let file = assemble(&[
        (SECTION_STRINGS, std_strings()),
        (SECTION_INFO, empty_info()),
        (SECTION_TARGETS, t),
    ]);
    let (_, d) = decode_err(&file);
    assert!(
        d.contains("schema argument count") && d.contains("at target 0"),
        "{d}"
    );
}

#[test]
fn one_long_string_referenced_many_times_is_refused() {
    // 64 KiB string, referenced 100 000 times: 200 KB of file that would
    // materialise 6.5 GB of strings.
    let long = "s".repeat(1 << 16);
    let n = 100_000u64;
    let mut args = Vec::new();
    for _ in 0..n {
        args.extend_from_slice(&[4, 2]);
    }
    let bytes = assemble(&[
        (SECTION_STRINGS, strings(&["output", "x", &long])),
        (SECTION_INFO, empty_info()),
        (SECTION_TARGETS, std_targets()),
        (SECTION_NODES, nodes(&[output_node(&args, n)])),
    ]);
    let (_, d) = decode_err(&bytes);
    assert!(
        d.contains(&format!(
            "{MAX_STRING_EXPANSION} times the file size + {STRING_BUDGET_FLOOR}"
        )),
        "{d}"
    );
}

#[test]
fn bad_codes_indices_and_utf8_are_refused() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // Value tag 14 does not exist.
        (
            file_with_nodes(&[output_node(&[14], 1)]),
            "bad value tag 14",
        ),
        // Bool byte 2.
        (
            file_with_nodes(&[output_node(&[1, 2], 1)]),
            "bad bool byte 2",
        ),
        // Str with string index 9 (the table has 2).
        (
            file_with_nodes(&[output_node(&[4, 9], 1)]),
            "string index 9 out of range (2 strings)",
        ),
        // Opcode 6.
        (file_with_nodes(&[vec![6, 0, 0, 0, 0]]), "bad opcode 6"),
        // Unknown node header bit.
        (
            file_with_nodes(&[vec![0x25, 0, 0, 0, 0]]),
            "unknown bits 0x20 in node header",
        ),
        // Float cut short by the section end.
        (
            file_with_nodes(&[output_node(&[3, 0, 0], 1)]),
            "truncated (reading float) in section 'nodes' at node 0",
        ),
        // A non-canonical varint (0x80 0x00 for 0).
        (
            file_with_nodes(&[output_node(&[2, 0x80, 0x00], 1)]),
            "non-canonical varint",
        ),
        // A node reference before node 0.
        (
            file_with_nodes(&[output_node(&[5, 0], 1)]),
            "node reference 0 out of range",
        ),
        // Target reference past 32 bits.
        (
            file_with_nodes(&[output_node(&[12, 0x80, 0x80, 0x80, 0x80, 0x10], 1)]),
            "does not fit 32 bits",
        ),
        // Meta (dtype, device, itemsize, flags, ...): contiguous strides of
        // a tensor that is not strided.
        (
            file_with_nodes(&[vec![0x0d, 0, 0, 0, 0, 1, 1, 0, 0x10]]),
            "contiguous strides need a strided tensor",
        ),
        // Contiguous strides of a symbolic size.
        (
            file_with_nodes(&[vec![0x0d, 0, 0, 0, 0, 1, 1, 0, 0x32, 1, 1, 0]]),
            "contiguous strides need static sizes",
        ),
        // Unknown meta flags (0x01 and 0x04 were version 1's).
        (
            file_with_nodes(&[vec![0x0d, 0, 0, 0, 0, 1, 1, 0, 0x40]]),
            "unknown bits 0x40 in meta flags",
        ),
        (
            file_with_nodes(&[vec![0x0d, 0, 0, 0, 0, 1, 1, 0, 0x01]]),
            "unknown bits 0x01 in meta flags",
        ),
        // A dimension tag that is neither static nor symbolic.
        (
            file_with_nodes(&[vec![0x0d, 0, 0, 0, 0, 1, 1, 0, 0x20, 1, 2]]),
            "meta sizes: bad dimension tag 2",
        ),
        // One stride for two sizes.
        (
            file_with_nodes(&[vec![0x0d, 0, 0, 0, 0, 1, 1, 0, 0x02, 2, 0, 0, 1, 0, 0]]),
            "meta: 1 strides for 2 sizes",
        ),
        // Contiguous strides of sizes whose product overflows.
        (
            file_with_nodes(&[{
                let mut n = vec![0x0d, 0, 0, 0, 0, 1, 1, 0, 0x12, 3];
                for _ in 0..3 {
                    varint(&mut n, zz(1 << 40));
                }
                n
            }]),
            "contiguous strides of the sizes overflow",
        ),
    ];
    for (bytes, want) in cases {
        let (_, d) = decode_err(&bytes);
        assert!(d.contains(want), "want {want:?}, got {d:?}");
    }

    let with_targets = |t: Vec<u8>| {
        assemble(&[
            (SECTION_STRINGS, std_strings()),
            (SECTION_INFO, empty_info()),
            (SECTION_TARGETS, t),
            (SECTION_NODES, nodes(&[output_node(&[], 0)])),
        ])
    };
    let target_cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![1, 0, 6, 0], "bad target kind code 6"),
        (vec![1, 0, 0, 2], "bad schema marker 2"),
        // Operator, schema: one arg "x" with ArgType 4.
        (
            vec![1, 0, 0, 1, 1, 1, 4, 0, 0, 0],
            "bad argument type code 4",
        ),
        // Argument flags with an unknown bit.
        (
            vec![1, 0, 0, 1, 1, 1, 0, 0x08, 0, 0],
            "unknown bits 0x08 in argument flags",
        ),
        // Write flag without alias.
        (
            vec![1, 0, 0, 1, 1, 1, 0, 0x02, 0, 0],
            "write flag without an alias set",
        ),
        // Return flags with the kwarg_only bit (not defined for returns).
        (
            vec![1, 0, 0, 1, 0, 1, 0, 0x04, 0],
            "unknown bits 0x04 in return flags",
        ),
        // Unknown tag bit.
        (
            vec![1, 0, 0, 1, 0, 0, 0x08],
            "unknown bits 0x08 in operator tags",
        ),
    ];
    for (t, want) in target_cases {
        let (_, d) = decode_err(&with_targets(t));
        assert!(d.contains(want), "want {want:?}, got {d:?}");
        assert!(d.contains("section 'targets' at target 0"), "{d}");
    }

    // Invalid UTF-8 in the string table.
    let mut table = vec![2, 1, b'a', 3, b'a', 0xff, b'b'];
    table.truncate(7);
    let bytes = assemble(&[(SECTION_STRINGS, table)]);
    let (offset, d) = decode_err(&bytes);
    assert!(
        d.contains("invalid UTF-8 at byte 1") && d.contains("at string 1"),
        "{d}"
    );
    assert_eq!(offset, HEADER_LEN as u64 + 2 + 3);
}

#[test]
fn section_structure_is_checked() {
    let good = [
        (SECTION_STRINGS, std_strings()),
        (SECTION_INFO, empty_info()),
        (SECTION_TARGETS, std_targets()),
        (SECTION_NODES, nodes(&[output_node(&[], 0)])),
    ];
    assert_eq!(io::read(&assemble(&good)).unwrap().0, minimal_graph());

    // Ancillary sections are skipped wherever they are.
    let mut with_extra = good.to_vec();
    with_extra.insert(2, (ANCILLARY_SECTION | 7, b"future data".to_vec()));
    with_extra.push((0xff, vec![]));
    assert_eq!(io::read(&assemble(&with_extra)).unwrap().0, minimal_graph());

    // An unknown required section.
    let mut unknown = good.to_vec();
    unknown.insert(1, (9, vec![]));
    let (_, d) = decode_err(&assemble(&unknown));
    assert!(d.contains("unexpected section tag 9"), "{d}");

    // Out of order.
    let mut swapped = good.to_vec();
    swapped.swap(2, 3);
    let (_, d) = decode_err(&assemble(&swapped));
    assert!(d.contains("expected 'targets'"), "{d}");

    // Repeated.
    let mut repeated = good.to_vec();
    repeated.push((SECTION_NODES, nodes(&[output_node(&[], 0)])));
    let (_, d) = decode_err(&assemble(&repeated));
    assert!(d.contains("after the last required section"), "{d}");

    // Missing.
    let (_, d) = decode_err(&assemble(&good[..3]));
    assert!(d.contains("missing section 'nodes'"), "{d}");

    // The header's section count disagrees with the sections present.
    let (_, d) = decode_err(&assemble_with(FORMAT_VERSION, 0, 3, &good));
    assert!(d.contains("missing section 'nodes'"), "{d}");
    let (_, d) = decode_err(&assemble_with(FORMAT_VERSION, 0, 5, &good));
    assert!(d.contains("truncated (reading section tag)"), "{d}");
    let mut extra_bytes = good.to_vec();
    extra_bytes[3].1.push(0);
    let (_, d) = decode_err(&assemble(&extra_bytes));
    assert!(
        d.contains("1 byte(s) left unused at the end in section 'nodes'") && d.contains("'nodes'"),
        "{d}"
    );

    // Unknown header flags.
    let (offset, d) = decode_err(&assemble_with(FORMAT_VERSION, 4, 4, &good));
    assert_eq!(offset, 12);
    assert!(d.contains("unknown header flags 0x4"), "{d}");

    // A section that claims more bytes than it has: the node section's
    // count says 2 nodes but holds 1.
    let mut short = good.to_vec();
    short[3].1[0] = 2;
    let (_, d) = decode_err(&assemble(&short));
    assert!(d.contains("in section 'nodes'"), "{d}");
}

#[test]
fn truncated_node_names_its_section_and_node() {
    // Node 0, placeholder "x" with three int args, is fine; node 1 is cut
    // after its name (the bytes still pass the node count's size check).
    let placeholder = vec![0, 1, 0, 3, 2, 0, 2, 0, 2, 0, 0];
    let cut = vec![5, 0];
    let (_, d) = decode_err(&file_with_nodes(&[placeholder, cut]));
    assert_eq!(
        d,
        "truncated (reading node target) in section 'nodes' at node 1"
    );
}

#[test]
fn decoded_but_invalid_graphs_are_invalid_graph_errors() {
    // A forward reference: written fine, refused by validate on read.
    let mut g = minimal_graph();
    g.nodes.insert(
        0,
        node(
            OpCode::CallFunction,
            "f",
            TargetId(0),
            vec![Value::Node(NodeId(1))],
        ),
    );
    let err = io::read(&io::write(&g, &FileInfo::new())).unwrap_err();
    assert!(
        matches!(err, Error::InvalidGraph { node: Some(0), .. }),
        "{err}"
    );
    // An operator target without a schema.
    let mut g = minimal_graph();
    g.targets[0].kind = TargetKind::Operator;
    let err = io::read(&io::write(&g, &FileInfo::new())).unwrap_err();
    assert!(matches!(err, Error::InvalidGraph { .. }), "{err}");
    // No output node.
    let g = Graph::new();
    let err = io::read(&io::write(&g, &FileInfo::new())).unwrap_err();
    assert!(matches!(err, Error::InvalidGraph { .. }), "{err}");
}

// ----- size per node -------------------------------------------------------------------

#[test]
fn size_per_node() {
    // `cargo test --test fxir_io size_per_node -- --nocapture` prints the
    // numbers docs/fxir.md quotes.
    let mut report = Vec::new();
    for (label, g) in [
        ("rich_graph (tests)", rich_graph()),
        (
            "transformer_like 1000, meta+source",
            transformer_like(1000, true),
        ),
        ("transformer_like 1000, bare", transformer_like(1000, false)),
        (
            "transformer_like 20000, meta+source",
            transformer_like(20_000, true),
        ),
    ] {
        let bytes = io::write(&g, &info());
        assert_eq!(io::read(&bytes).unwrap().0, g);
        let n = g.len() as f64;
        let sizes = section_sizes(&bytes);
        let per_node = bytes.len() as f64 / n;
        report.push(format!(
            "{label}: {} nodes, {} targets, {} bytes = {per_node:.1} bytes/node \
             (strings {:.1}, targets {:.1}, nodes {:.1} per node)",
            g.len(),
            g.targets.len(),
            bytes.len(),
            sizes[0] as f64 / n,
            sizes[2] as f64 / n,
            sizes[3] as f64 / n,
        ));
        if label.starts_with("transformer_like") {
            assert!(per_node < 56.0, "{label}: {per_node:.1} bytes/node");
        }
    }
    eprintln!("{}", report.join("\n"));
}

/// Payload sizes of the four sections of a file `io::write` made.
fn section_sizes(bytes: &[u8]) -> [usize; 4] {
    let mut sizes = [0; 4];
    let mut pos = HEADER_LEN;
    for size in &mut sizes {
        pos += 1;
        let (mut len, mut shift) = (0usize, 0);
        loop {
            let b = bytes[pos];
            pos += 1;
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        *size = len;
        pos += len;
    }
    assert_eq!(pos + CHECKSUM_LEN, bytes.len());
    sizes
}

// ----- property tests -----------------------------------------------------------------

fn arb_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z_0-9]{1,12}",
        any::<String>().prop_map(|s| s.chars().take(20).collect()),
    ]
}

/// A value whose `Node` / `Target` payloads are raw numbers, fixed up by
/// `fix` to refer to earlier nodes and existing targets.
fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::None),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        prop_oneof![
            any::<f64>().prop_filter("not NaN", |f| !f.is_nan()),
            Just(-0.0)
        ]
        .prop_map(Value::Float),
        arb_string().prop_map(Value::Str),
        any::<u32>().prop_map(|n| Value::Node(NodeId(n))),
        arb_string().prop_map(Value::Dtype),
        arb_string().prop_map(Value::Device),
        arb_string().prop_map(Value::Layout),
        arb_string().prop_map(Value::MemoryFormat),
        any::<u32>().prop_map(|t| Value::Target(TargetId(t))),
        arb_string().prop_map(Value::Opaque),
    ];
    leaf.prop_recursive(6, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::List),
            prop::collection::vec(inner, 0..6).prop_map(Value::Tuple),
        ]
    })
}

fn fix(v: &mut Value, at: u32, n_targets: u32) {
    match v {
        Value::Node(n) if at == 0 => *v = Value::Int(i64::from(n.0)),
        Value::Node(n) => n.0 %= at,
        Value::Target(t) => t.0 %= n_targets,
        Value::List(items) | Value::Tuple(items) => {
            for item in items {
                fix(item, at, n_targets);
            }
        }
        _ => {}
    }
}

fn arb_alias() -> impl Strategy<Value = Option<AliasInfo>> {
    prop::option::of(
        (arb_string(), any::<bool>()).prop_map(|(set, is_write)| AliasInfo { set, is_write }),
    )
}

fn arb_arg_type() -> impl Strategy<Value = ArgType> {
    (0u8..4).prop_map(|c| ArgType::from_code(c).unwrap())
}

fn arb_schema() -> impl Strategy<Value = OpSchema> {
    (
        prop::collection::vec(
            (arb_string(), arb_arg_type(), arb_alias(), any::<bool>()).prop_map(
                |(name, ty, alias, kwarg_only)| SchemaArg {
                    name,
                    ty,
                    alias,
                    kwarg_only,
                },
            ),
            0..5,
        ),
        prop::collection::vec(
            (arb_arg_type(), arb_alias()).prop_map(|(ty, alias)| SchemaReturn { ty, alias }),
            0..3,
        ),
        0u8..8,
    )
        .prop_map(|(args, returns, bits)| OpSchema {
            args,
            returns,
            tags: OpTags::from_bits(bits),
        })
}

fn arb_target() -> impl Strategy<Value = Target> {
    (arb_string(), 0u8..6, arb_schema(), any::<bool>()).prop_map(|(name, k, schema, keep)| {
        let kind = TargetKind::from_code(k).unwrap();
        let schema = (kind == TargetKind::Operator || keep).then_some(schema);
        Target { name, kind, schema }
    })
}

fn arb_dims() -> impl Strategy<Value = Vec<i64>> {
    prop_oneof![
        prop::collection::vec(any::<i64>(), 0..5),
        prop::collection::vec(-1i64..70, 0..5),
    ]
}

fn arb_dim() -> impl Strategy<Value = Dim> {
    prop_oneof![
        3 => any::<i64>().prop_map(Dim::Static),
        1 => arb_string().prop_map(Dim::Symbolic),
    ]
}

fn arb_meta() -> impl Strategy<Value = TensorMeta> {
    (
        arb_string(),
        prop_oneof![
            arb_dims().prop_map(|d| static_dims(&d)),
            prop::collection::vec(arb_dim(), 0..5),
        ],
        // Strides: none (not strided), the contiguous ones, or any.
        0u8..3,
        prop::collection::vec(arb_dim(), 5),
        arb_dim(),
        any::<u32>(),
        prop::option::of(any::<u64>()),
        arb_string(),
    )
        .prop_map(
            |(dtype, sizes, strided, any_strides, offset, itemsize, storage, device)| {
                let rank = sizes.len();
                let shape: Option<Vec<i64>> = sizes.iter().map(Dim::as_static).collect();
                let strides = match (strided, shape) {
                    (0, _) => None,
                    // Often make the strides the contiguous ones (stored as a flag).
                    (1, Some(shape)) => Some(static_dims(&torch_contiguous(&shape))),
                    _ => Some(any_strides[..rank].to_vec()),
                };
                let offset = strides.is_some().then_some(offset);
                TensorMeta {
                    dtype,
                    sizes,
                    strides,
                    offset,
                    itemsize,
                    storage,
                    device,
                }
            },
        )
}

/// torch's contiguous strides (wrapping on overflow, which the writer then
/// stores explicitly).
fn torch_contiguous(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1i64;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc = acc.wrapping_mul(shape[i].max(1));
    }
    strides
}

fn arb_node() -> impl Strategy<Value = (Node, u32)> {
    (
        0u8..5,
        arb_string(),
        any::<u32>(),
        prop::collection::vec(arb_value(), 0..4),
        prop::collection::vec((arb_string(), arb_value()), 0..3),
        prop::option::of(arb_meta()),
        prop::option::of(arb_string()),
    )
        .prop_map(|(op, name, target, args, kwargs, meta, source)| {
            (
                Node {
                    op: OpCode::from_code(op).unwrap(),
                    name,
                    target: TargetId(0),
                    args,
                    kwargs,
                    meta,
                    source,
                },
                target,
            )
        })
}

fn arb_graph() -> impl Strategy<Value = Graph> {
    (
        prop::collection::vec(arb_target(), 1..5),
        prop::collection::vec(arb_node(), 0..12),
        prop::collection::vec(arb_value(), 0..3),
    )
        .prop_map(|(targets, raw_nodes, out_args)| {
            let nt = targets.len() as u32;
            let mut g = Graph {
                targets,
                nodes: vec![],
            };
            let raw_len = raw_nodes.len();
            for (i, (mut n, t)) in raw_nodes.into_iter().enumerate() {
                n.target = TargetId(t % nt);
                for a in n.args.iter_mut().chain(n.kwargs.iter_mut().map(|(_, v)| v)) {
                    fix(a, i as u32, nt);
                }
                g.nodes.push(n);
            }
            let mut out = node(OpCode::Output, "output", TargetId(0), out_args);
            for a in &mut out.args {
                fix(a, raw_len as u32, nt);
            }
            g.nodes.push(out);
            g
        })
}

fn arb_info() -> impl Strategy<Value = FileInfo> {
    prop::collection::vec((arb_string(), arb_string()), 0..4)
        .prop_map(|entries| FileInfo { entries })
}

proptest! {
    // 256 cases each by default; PROPTEST_CASES=N runs more. Fixed seed in
    // CI; a wider run is `FXREWRITE_PROPTEST_SEED=random` (common/seeds.rs).
    #![proptest_config(seeds::config(256))]

    #[test]
    fn random_graphs_round_trip(g in arb_graph(), i in arb_info()) {
        prop_assert_eq!(fxrewrite::ir::validate::validate(&g), Ok(()));
        let bytes = io::write(&g, &i);
        let (g2, i2) = io::read(&bytes).unwrap();
        prop_assert_eq!(&g2, &g);
        prop_assert_eq!(&i2, &i);
        prop_assert_eq!(io::write(&g2, &i2), bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = io::read(&bytes);
        // The same bytes behind a valid header, with a correct length and
        // checksum, so they reach the section parsers.
        let mut file = assemble(&[]);
        file.truncate(HEADER_LEN);
        file[16..20].copy_from_slice(&(u32::from(bytes.first().copied().unwrap_or(4)) % 8).to_le_bytes());
        file.extend_from_slice(&bytes);
        let total = (file.len() + CHECKSUM_LEN) as u64;
        file[20..28].copy_from_slice(&total.to_le_bytes());
        let crc = crc32(&file);
        file.extend_from_slice(&crc.to_le_bytes());
        if let Err(Error::Decode { offset, .. }) = io::read(&file) {
            prop_assert!(offset <= file.len() as u64);
        }
    }

    #[test]
    fn mutated_valid_files_never_panic(
        g in arb_graph(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        // Mutate the checksummed body, then repair length and checksum so the
        // damage reaches the decoder instead of stopping at the CRC.
        let file = io::write(&g, &FileInfo::new());
        let mut body = file[HEADER_LEN..file.len() - CHECKSUM_LEN].to_vec();
        for (at, b) in &edits {
            if !body.is_empty() {
                let k = at.index(body.len());
                body[k] = *b;
            }
        }
        if do_cut && !body.is_empty() {
            body.truncate(cut.index(body.len()));
        }
        let mut out = file[..HEADER_LEN].to_vec();
        out.extend_from_slice(&body);
        let total = (out.len() + CHECKSUM_LEN) as u64;
        out[20..28].copy_from_slice(&total.to_le_bytes());
        let crc = crc32(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        match io::read(&out) {
            Ok((g2, _)) => prop_assert_eq!(fxrewrite::ir::validate::validate(&g2), Ok(())),
            Err(Error::Decode { offset, .. }) => prop_assert!(offset <= out.len() as u64),
            Err(Error::InvalidGraph { .. }) => {}
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }
}

#[test]
fn zigzag_helper_matches_the_spec() {
    // The test file's own encoder (used for hand-built files) agrees with
    // the writer on signed ints.
    let mut g = minimal_graph();
    g.nodes[0].args = vec![Value::Int(-3)];
    let mut args = vec![2];
    varint(&mut args, zz(-3));
    assert_eq!(
        io::write(&g, &FileInfo::new()),
        file_with_strings_and_nodes(&["output"], &[output_node(&args, 1)])
    );
}
