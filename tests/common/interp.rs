//! A reference interpreter: runs the original graph with torch's functional
//! semantics for auto_functionalized nodes, and the planned program with real
//! in-place calls on shared memory, so the two can be compared.
use std::collections::HashMap;

use fxrewrite::forms::Form;
use fxrewrite::ir::{ArgType, Graph, NodeId, OpCode, OpSchema, TargetKind, TensorMeta, Value};
use fxrewrite::plan::{Callee, NewId, PlanArg, ValueRef};
use fxrewrite::{Edit, Plan};

/// A strided view of one storage.
#[derive(Clone, Debug, PartialEq)]
pub struct Tv {
    st: usize,
    off: i64,
    size: Vec<i64>,
    stride: Vec<i64>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum V {
    T(Tv),
    Seq(Vec<V>),
    Int(i64),
    None,
    Other,
}

type R<T> = Result<T, String>;

#[derive(Default)]
pub struct Mem {
    st: Vec<Vec<i64>>,
}

fn contiguous(size: &[i64]) -> Vec<i64> {
    let mut stride = vec![1i64; size.len()];
    for i in (0..size.len().saturating_sub(1)).rev() {
        stride[i] = stride[i + 1] * size[i + 1].max(1);
    }
    stride
}

/// A view's size with its one `-1` made what the element count `numel`
/// leaves, as torch's `infer_size`.
fn infer_size(size: &[i64], numel: i64) -> R<Vec<i64>> {
    let known: i64 = size.iter().filter(|&&s| s != -1).product();
    let mut out = size.to_vec();
    match size.iter().filter(|&&s| s == -1).count() {
        0 => {}
        1 if known != 0 && numel % known == 0 => {
            for s in &mut out {
                if *s == -1 {
                    *s = numel / known;
                }
            }
        }
        _ => return Err(format!("cannot infer {size:?} for {numel} elements")),
    }
    if out.iter().product::<i64>() != numel {
        return Err(format!("shape {size:?} is invalid for {numel} elements"));
    }
    Ok(out)
}

/// The strides of `new` viewing a tensor of `old` size and `stride`, or
/// `None` where no strides can (torch's `computeStride`, which `view`
/// uses): the old dims fall into chunks that are each one arithmetic run
/// of the storage, and each chunk must be cut into whole new dims.
fn view_strides(old: &[i64], stride: &[i64], new: &[i64]) -> Option<Vec<i64>> {
    if old.is_empty() {
        return Some(vec![1; new.len()]);
    }
    let numel: i64 = old.iter().product();
    if numel == 0 {
        return Some(if old == new {
            stride.to_vec()
        } else {
            contiguous(new)
        });
    }
    let mut out = vec![0i64; new.len()];
    let mut view_d = new.len();
    let mut chunk_base = *stride.last()?;
    let (mut tensor_numel, mut view_numel) = (1i64, 1i64);
    for d in (0..old.len()).rev() {
        tensor_numel *= old[d];
        let chunk_ends = d == 0 || (old[d - 1] != 1 && stride[d - 1] != tensor_numel * chunk_base);
        if !chunk_ends {
            continue;
        }
        while view_d > 0 && (view_numel < tensor_numel || new[view_d - 1] == 1) {
            view_d -= 1;
            out[view_d] = view_numel * chunk_base;
            view_numel *= new[view_d];
        }
        if view_numel != tensor_numel {
            return None;
        }
        if d > 0 {
            chunk_base = stride[d - 1];
            tensor_numel = 1;
            view_numel = 1;
        }
    }
    (view_d == 0).then_some(out)
}

fn tv(v: &V) -> R<Tv> {
    match v {
        V::T(t) => Ok(t.clone()),
        other => Err(format!("expected a tensor, got {other:?}")),
    }
}

fn int(v: &V) -> R<i64> {
    match v {
        V::Int(i) => Ok(*i),
        other => Err(format!("expected an int, got {other:?}")),
    }
}

fn int_list(v: &V) -> R<Vec<i64>> {
    match v {
        V::Seq(items) => items.iter().map(int).collect(),
        other => Err(format!("expected ints, got {other:?}")),
    }
}

impl Mem {
    /// Storage indices of `t`'s elements, row-major.
    fn idx(&self, t: &Tv) -> R<Vec<usize>> {
        let mut out = vec![t.off];
        for (&s, &st) in t.size.iter().zip(&t.stride) {
            out = out
                .iter()
                .flat_map(|&o| (0..s).map(move |i| o + i * st))
                .collect();
        }
        let len = self.st[t.st].len();
        out.into_iter()
            .map(|i| {
                usize::try_from(i)
                    .ok()
                    .filter(|&u| u < len)
                    .ok_or_else(|| format!("index {i} out of storage of {len}"))
            })
            .collect()
    }

    fn read(&self, t: &Tv) -> R<Vec<i64>> {
        Ok(self.idx(t)?.into_iter().map(|i| self.st[t.st][i]).collect())
    }

    fn fresh(&mut self, size: &[i64], vals: Vec<i64>) -> Tv {
        self.st.push(vals);
        Tv {
            st: self.st.len() - 1,
            off: 0,
            size: size.to_vec(),
            stride: contiguous(size),
        }
    }

    fn clone_t(&mut self, t: &Tv) -> R<Tv> {
        let vals = self.read(t)?;
        Ok(self.fresh(&t.size, vals))
    }

    /// torch's `clone_preserve_strides`.
    fn clone_preserve(&mut self, t: &Tv) -> R<Tv> {
        let needed = if t.size.contains(&0) {
            0
        } else {
            t.off
                + t.size
                    .iter()
                    .zip(&t.stride)
                    .map(|(s, st)| (s - 1) * st)
                    .sum::<i64>()
                + 1
        };
        let needed = usize::try_from(needed).map_err(|e| e.to_string())?;
        let src = &self.st[t.st];
        if needed > src.len() {
            return Err("clone_preserve_strides past the storage".into());
        }
        self.st.push(src[..needed].to_vec());
        Ok(Tv {
            st: self.st.len() - 1,
            ..t.clone()
        })
    }

    fn dim(t: &Tv, dim: i64) -> R<usize> {
        let r = i64::try_from(t.size.len()).unwrap();
        let d = if dim < 0 { dim + r } else { dim };
        if d < 0 || d >= r {
            return Err(format!("dim {dim} out of range for rank {r}"));
        }
        Ok(usize::try_from(d).unwrap())
    }

    fn slice(t: &Tv, dim: i64, start: Option<i64>, end: Option<i64>) -> R<Tv> {
        Self::slice_step(t, dim, start, end, 1)
    }

    /// `aten::slice.Tensor` with its step: bounds clamped as torch does,
    /// every `step`-th element from `start` (a view, no copy).
    fn slice_step(t: &Tv, dim: i64, start: Option<i64>, end: Option<i64>, step: i64) -> R<Tv> {
        if step <= 0 {
            return Err(format!("slice step {step} must be positive"));
        }
        let d = Self::dim(t, dim)?;
        let s = t.size[d];
        let clamp = |v: i64| if v < 0 { (v + s).max(0) } else { v.min(s) };
        let start = clamp(start.unwrap_or(0));
        let end = clamp(end.unwrap_or(s)).max(start);
        let mut v = t.clone();
        v.off += start * t.stride[d];
        v.size[d] = (end - start + step - 1) / step;
        v.stride[d] *= step;
        Ok(v)
    }

    /// `aten::view` (and `_unsafe_view`, and `reshape` where it views):
    /// the same elements in row-major order under a new size, on the same
    /// storage and offset, with the strides torch computes; an error where
    /// torch's `view` raises (no strides give those elements).
    fn view(t: &Tv, size: &[i64]) -> R<Tv> {
        let size = infer_size(size, t.size.iter().product())?;
        let stride = view_strides(&t.size, &t.stride, &size).ok_or_else(|| {
            format!(
                "view of size {:?} stride {:?} as {size:?}",
                t.size, t.stride
            )
        })?;
        Ok(Tv {
            size,
            stride,
            ..t.clone()
        })
    }

    /// `aten::reshape`: a view where one exists, else a row-major copy.
    fn reshape(&mut self, t: &Tv, size: &[i64]) -> R<Tv> {
        match Self::view(t, size) {
            Ok(v) => Ok(v),
            Err(_) => {
                let copy = self.clone_t(t)?;
                Self::view(&copy, size)
            }
        }
    }

    /// `aten::expand`: new leading dims and size-1 dims broadcast with
    /// stride 0, so many elements of the view are one storage element.
    fn expand(t: &Tv, size: &[i64]) -> R<Tv> {
        let lead = size
            .len()
            .checked_sub(t.size.len())
            .ok_or_else(|| format!("expand of rank {} to {size:?}", t.size.len()))?;
        let mut v = Tv {
            size: Vec::with_capacity(size.len()),
            stride: Vec::with_capacity(size.len()),
            ..t.clone()
        };
        for (i, &want) in size.iter().enumerate() {
            let (have, st) = match i.checked_sub(lead) {
                Some(j) => (t.size[j], t.stride[j]),
                None if want >= 0 => (1, 0),
                None => return Err(format!("expand: -1 for the new dim {i}")),
            };
            let (n, st) = match want {
                -1 => (have, st),
                w if w == have => (have, st),
                w if have == 1 => (w, 0),
                w => return Err(format!("expand of size {have} to {w} in dim {i}")),
            };
            v.size.push(n);
            v.stride.push(st);
        }
        Ok(v)
    }

    /// `aten::permute`: the dims reordered, same storage.
    fn permute(t: &Tv, dims: &[i64]) -> R<Tv> {
        if dims.len() != t.size.len() {
            return Err(format!("permute {dims:?} of rank {}", t.size.len()));
        }
        let mut v = Tv {
            size: vec![],
            stride: vec![],
            ..t.clone()
        };
        for &d in dims {
            let d = Self::dim(t, d)?;
            v.size.push(t.size[d]);
            v.stride.push(t.stride[d]);
        }
        Ok(v)
    }

    fn select(t: &Tv, dim: i64, index: i64) -> R<Tv> {
        let d = Self::dim(t, dim)?;
        let s = t.size[d];
        let i = if index < 0 { index + s } else { index };
        if i < 0 || i >= s {
            return Err("select index out of range".into());
        }
        let mut v = t.clone();
        v.off += i * t.stride[d];
        v.size.remove(d);
        v.stride.remove(d);
        Ok(v)
    }

    /// Element `j` (cyclic) of `t`, read now.
    fn at(&self, idx: &[usize], st: usize, j: usize) -> i64 {
        if idx.is_empty() {
            0
        } else {
            self.st[st][idx[j % idx.len()]]
        }
    }

    /// The mutating operators, with sequential element-wise kernels that
    /// read their other operands at shifted indices, so that any aliasing
    /// the functional program does not have changes the result.
    fn mutating(&mut self, op: &str, a: &[V]) -> R<V> {
        match op {
            "mylib::rms.default" => {
                let (out, x, w) = (tv(&a[0])?, tv(&a[1])?, tv(&a[2])?);
                let (io, ix, iw) = (self.idx(&out)?, self.idx(&x)?, self.idx(&w)?);
                for (i, &o) in io.iter().enumerate() {
                    let v = self.st[out.st][o]
                        .wrapping_mul(2)
                        .wrapping_add(self.at(&ix, x.st, i * 7 + 3))
                        .wrapping_add(self.at(&iw, w.st, i));
                    self.st[out.st][o] = v;
                }
                Ok(V::None)
            }
            "mylib::rot.default" => {
                let (q, k, c) = (tv(&a[0])?, tv(&a[1])?, tv(&a[2])?);
                let (iq, ik, ic) = (self.idx(&q)?, self.idx(&k)?, self.idx(&c)?);
                for (i, &o) in iq.iter().enumerate() {
                    let v = self.st[q.st][o].wrapping_add(
                        self.at(&ik, k.st, i + 1)
                            .wrapping_mul(self.at(&ic, c.st, i)),
                    );
                    self.st[q.st][o] = v;
                }
                for (i, &o) in ik.iter().enumerate() {
                    let v = self.st[k.st][o].wrapping_sub(self.at(&iq, q.st, i + 2));
                    self.st[k.st][o] = v;
                }
                Ok(V::None)
            }
            "mylib::add_rms.default" => {
                let (x, res, w) = (tv(&a[0])?, tv(&a[1])?, tv(&a[2])?);
                let (ix, ir, iw) = (self.idx(&x)?, self.idx(&res)?, self.idx(&w)?);
                for (i, &o) in ir.iter().enumerate() {
                    let v = self.st[res.st][o].wrapping_add(self.at(&ix, x.st, i + 1));
                    self.st[res.st][o] = v;
                }
                for (i, &o) in ix.iter().enumerate() {
                    let v = self
                        .at(&ir, res.st, i + 3)
                        .wrapping_mul(self.at(&iw, w.st, i));
                    self.st[x.st][o] = v;
                }
                let ret: Vec<i64> = self.read(&x)?.iter().map(|v| v.wrapping_add(1)).collect();
                Ok(V::T(self.fresh(&x.size, ret)))
            }
            "mylib::opt.default" => {
                let (x, w) = (tv(&a[0])?, tv(&a[2])?);
                let (ix, iw) = (self.idx(&x)?, self.idx(&w)?);
                let res = match &a[1] {
                    V::T(r) => Some((r.clone(), self.idx(r)?)),
                    _ => None,
                };
                for (i, &o) in ix.iter().enumerate() {
                    let v = self.st[x.st][o].wrapping_add(self.at(&iw, w.st, i + 1));
                    self.st[x.st][o] = v;
                }
                if let Some((r, ir)) = res {
                    for (i, &o) in ir.iter().enumerate() {
                        let v = self.st[r.st][o].wrapping_add(self.at(&ix, x.st, i));
                        self.st[r.st][o] = v;
                    }
                }
                Ok(V::None)
            }
            "mylib::foreach.default" => {
                let V::Seq(xs) = &a[0] else {
                    return Err("foreach without a list".into());
                };
                let w = tv(&a[1])?;
                let iw = self.idx(&w)?;
                for x in xs {
                    let x = tv(x)?;
                    let ix = self.idx(&x)?;
                    for (i, &o) in ix.iter().enumerate() {
                        let v = self.st[x.st][o]
                            .wrapping_add(self.at(&iw, w.st, i))
                            .wrapping_add(self.at(&ix, x.st, i + 1));
                        self.st[x.st][o] = v;
                    }
                }
                Ok(V::None)
            }
            "mylib::mk.default" => {
                let (x, out) = (tv(&a[0])?, tv(&a[1])?);
                let (ix, io) = (self.idx(&x)?, self.idx(&out)?);
                for (i, &o) in io.iter().enumerate() {
                    self.st[out.st][o] = self.at(&ix, x.st, i).wrapping_mul(3);
                }
                Ok(V::T(out))
            }
            other => Err(format!("no kernel for {other}")),
        }
    }

    /// The pure and view operators.
    fn pure_op(&mut self, op: &str, a: &[V]) -> R<V> {
        self.pure_op_shaped(op, a, None)
    }

    /// A pure operator; fresh element-wise results take `shape` (the
    /// node's metadata) when given.
    fn pure_op_shaped(&mut self, op: &str, a: &[V], shape: Option<&Vec<i64>>) -> R<V> {
        let get = |i: usize| a.get(i).cloned().unwrap_or(V::None);
        let opt = |i: usize| match get(i) {
            V::Int(v) => Ok(Some(v)),
            V::None => Ok(None),
            other => Err(format!("expected an optional int, got {other:?}")),
        };
        match op {
            "aten::sym_size.int" | "aten::sym_stride.int" => {
                let t = tv(&a[0])?;
                let d = usize::try_from(opt(1)?.ok_or("no dim")?).map_err(|e| e.to_string())?;
                let v = if op == "aten::sym_size.int" {
                    &t.size
                } else {
                    &t.stride
                };
                Ok(V::Int(*v.get(d).ok_or("dim out of range")?))
            }
            "aten::mm.default" | "aten::add.Tensor" | "aten::mul.Tensor" => {
                let (x, y) = (tv(&a[0])?, tv(&a[1])?);
                let (vx, vy) = (self.read(&x)?, self.read(&y)?);
                let f = |p: i64, q: i64| match op {
                    "aten::mm.default" => p.wrapping_mul(q).wrapping_add(1),
                    "aten::add.Tensor" => p.wrapping_add(q),
                    _ => p.wrapping_mul(q),
                };
                let size = shape
                    .cloned()
                    .unwrap_or_else(|| match (op, &x.size[..], &y.size[..]) {
                        // Without a static shape in the metadata (symbolic
                        // sizes), a matmul's own: [m, k] @ [k, n] is [m, n].
                        ("aten::mm.default", &[m, k], &[k2, n]) if k == k2 => vec![m, n],
                        // Operands torch would reject (the random graphs'
                        // `mm` of two [4, 8]): the first operand's size, as the
                        // generator records it.
                        _ => x.size.clone(),
                    });
                let size = &size;
                let n = usize::try_from(size.iter().product::<i64>()).unwrap();
                let cyc = |v: &[i64], i: usize| if v.is_empty() { 0 } else { v[i % v.len()] };
                let vals = (0..n).map(|i| f(cyc(&vx, i), cyc(&vy, i))).collect();
                Ok(V::T(self.fresh(size, vals)))
            }
            "aten::empty.memory_format" => {
                let size = int_list(&a[0])?;
                let n: i64 = size.iter().product();
                Ok(V::T(
                    self.fresh(&size, vec![0; usize::try_from(n).unwrap()]),
                ))
            }
            "aten::empty_strided.default" => {
                let (size, stride) = (int_list(&a[0])?, int_list(&a[1])?);
                let t = Tv {
                    st: 0,
                    off: 0,
                    size,
                    stride,
                };
                let needed = if t.size.contains(&0) {
                    0
                } else {
                    t.size
                        .iter()
                        .zip(&t.stride)
                        .map(|(s, st)| (s - 1) * st)
                        .sum::<i64>()
                        + 1
                };
                self.st.push(vec![0; usize::try_from(needed).unwrap()]);
                Ok(V::T(Tv {
                    st: self.st.len() - 1,
                    ..t
                }))
            }
            "aten::slice.Tensor" => Ok(V::T(Self::slice_step(
                &tv(&a[0])?,
                opt(1)?.unwrap_or(0),
                opt(2)?,
                opt(3)?,
                opt(4)?.unwrap_or(1),
            )?)),
            "aten::view.default" | "aten::_unsafe_view.default" => {
                Ok(V::T(Self::view(&tv(&a[0])?, &int_list(&a[1])?)?))
            }
            "aten::reshape.default" => Ok(V::T(self.reshape(&tv(&a[0])?, &int_list(&a[1])?)?)),
            "aten::expand.default" => Ok(V::T(Self::expand(&tv(&a[0])?, &int_list(&a[1])?)?)),
            "aten::permute.default" => Ok(V::T(Self::permute(&tv(&a[0])?, &int_list(&a[1])?)?)),
            "aten::neg.default" => {
                let x = tv(&a[0])?;
                let vals = self.read(&x)?.iter().map(|v| v.wrapping_neg()).collect();
                Ok(V::T(self.fresh(&x.size, vals)))
            }
            "aten::select.int" => Ok(V::T(Self::select(&tv(&a[0])?, int(&a[1])?, int(&a[2])?)?)),
            "aten::alias.default" => Ok(V::T(tv(&a[0])?)),
            "aten::as_strided.default" => {
                let t = tv(&a[0])?;
                let v = Tv {
                    st: t.st,
                    off: opt(3)?.unwrap_or(t.off),
                    size: int_list(&a[1])?,
                    stride: int_list(&a[2])?,
                };
                self.idx(&v)?;
                Ok(V::T(v))
            }
            "aten::clone.default" => Ok(V::T(self.clone_t(&tv(&a[0])?)?)),
            "aten::split_with_sizes.default" => {
                let t = tv(&a[0])?;
                let sizes = int_list(&a[1])?;
                let dim = opt(2)?.unwrap_or(0);
                let d = Self::dim(&t, dim)?;
                if sizes.iter().sum::<i64>() != t.size[d] {
                    return Err(format!(
                        "split sizes do not add up: {sizes:?} on {:?} dim {d}",
                        t.size
                    ));
                }
                let mut start = 0;
                let mut out = Vec::new();
                for s in sizes {
                    out.push(V::T(Self::slice(&t, dim, Some(start), Some(start + s))?));
                    start += s;
                }
                Ok(V::Seq(out))
            }
            "aten::slice_scatter.default" | "aten::select_scatter.default" => {
                let (base, src) = (tv(&a[0])?, tv(&a[1])?);
                let out = self.clone_t(&base)?;
                let view = if op == "aten::slice_scatter.default" {
                    Self::slice_step(
                        &out,
                        opt(2)?.unwrap_or(0),
                        opt(3)?,
                        opt(4)?,
                        opt(5)?.unwrap_or(1),
                    )?
                } else {
                    Self::select(&out, int(&a[2])?, int(&a[3])?)?
                };
                if view.size != src.size {
                    return Err("scatter shape mismatch".into());
                }
                let vals = self.read(&src)?;
                for (o, v) in self.idx(&view)?.into_iter().zip(vals) {
                    self.st[out.st][o] = v;
                }
                Ok(V::T(out))
            }
            "aten::copy_.default" => {
                let (dst, src) = (tv(&a[0])?, tv(&a[1])?);
                let vals = self.read(&src)?;
                let idx = self.idx(&dst)?;
                if vals.is_empty() && !idx.is_empty() {
                    return Err("copy_ from an empty tensor".into());
                }
                for (i, o) in idx.into_iter().enumerate() {
                    self.st[dst.st][o] = vals[i % vals.len()];
                }
                Ok(V::T(dst))
            }
            other => Err(format!("no kernel for {other}")),
        }
    }
}

/// Converts a graph value, looking nodes up with `env`.
fn value(v: &Value, env: &dyn Fn(NodeId) -> R<V>) -> R<V> {
    Ok(match v {
        Value::Node(n) => env(*n)?,
        Value::Int(i) => V::Int(*i),
        Value::None => V::None,
        Value::List(items) | Value::Tuple(items) => {
            V::Seq(items.iter().map(|i| value(i, env)).collect::<R<Vec<V>>>()?)
        }
        _ => V::Other,
    })
}

/// Schema-ordered arguments of a call: positional, then by name.
fn schema_args(s: &OpSchema, args: &[V], kwargs: &[(String, V)]) -> Vec<V> {
    s.args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            if !a.kwarg_only {
                if let Some(v) = args.get(i) {
                    return v.clone();
                }
            }
            kwargs
                .iter()
                .find(|(k, _)| k == &a.name)
                .map_or(V::None, |(_, v)| v.clone())
        })
        .collect()
}

fn returns_part(s: &OpSchema, ret: V) -> Vec<V> {
    match (s.returns.len(), ret) {
        (0, _) => vec![V::None],
        (1, r) => vec![r],
        (_, V::Seq(items)) => items,
        (_, r) => vec![r],
    }
}

/// Runs one original node with the original (functional) semantics.
/// The memory eager's call saw, where the node carries a record of alias
/// groups (`fxrewrite.pre_pass`) and is run as eager ran it: every group gets
/// one copy of each storage its slots lie on, shared by all of them, so slots
/// of one group share memory and slots of different groups never do.
/// Otherwise (no record, or a node left to Inductor, which decomposes it
/// so), torch's functional semantics: a copy per written argument.
struct EagerMemory {
    groups: Option<Vec<Vec<String>>>,
    copies: HashMap<(usize, usize), usize>,
}

impl EagerMemory {
    fn of(node: &fxrewrite::ir::Node, eager: bool) -> Self {
        let groups = node
            .kwarg(fxrewrite::forms::call::ALIAS_GROUPS)
            .and_then(|v| match v {
                Value::List(gs) => gs
                    .iter()
                    .map(|g| match g {
                        Value::List(ls) => ls
                            .iter()
                            .map(|l| match l {
                                Value::Str(s) => Some(s.clone()),
                                _ => None,
                            })
                            .collect(),
                        _ => None,
                    })
                    .collect(),
                _ => None,
            })
            .filter(|_| eager);
        Self {
            groups,
            copies: HashMap::new(),
        }
    }

    fn group(&self, label: &str) -> Option<usize> {
        self.groups
            .as_ref()?
            .iter()
            .position(|g| g.iter().any(|l| l == label))
    }

    /// The tensor of slot `label` as the call sees it; `written` slots with
    /// no group get torch's functional copy.
    fn slot(&mut self, mem: &mut Mem, label: &str, t: &Tv, written: bool) -> R<Tv> {
        let Some(g) = self.group(label) else {
            return if written {
                mem.clone_preserve(t)
            } else {
                Ok(t.clone())
            };
        };
        let st = match self.copies.get(&(g, t.st)) {
            Some(&st) => st,
            None => {
                let copy = mem.st[t.st].clone();
                mem.st.push(copy);
                self.copies.insert((g, t.st), mem.st.len() - 1);
                mem.st.len() - 1
            }
        };
        Ok(Tv { st, ..t.clone() })
    }

    fn arg(&mut self, mem: &mut Mem, name: &str, v: V, written: bool) -> R<V> {
        Ok(match v {
            V::T(t) => V::T(self.slot(mem, name, &t, written)?),
            V::Seq(items) => V::Seq(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, item)| match item {
                        V::T(t) => Ok(V::T(self.slot(
                            mem,
                            &format!("{name}[{i}]"),
                            &t,
                            written,
                        )?)),
                        other => Ok(other),
                    })
                    .collect::<R<_>>()?,
            ),
            other => other,
        })
    }
}

fn run_node(
    mem: &mut Mem,
    g: &Graph,
    id: NodeId,
    env: &dyn Fn(NodeId) -> R<V>,
    eager: bool,
) -> R<V> {
    let node = g.node(id);
    let t = g.target_of(id);
    let args: Vec<V> = node.args.iter().map(|a| value(a, env)).collect::<R<_>>()?;
    let kwargs: Vec<(String, V)> = node
        .kwargs
        .iter()
        .map(|(k, v)| Ok((k.clone(), value(v, env)?)))
        .collect::<R<_>>()?;
    let kw = |k: &str| kwargs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    match (node.op, t.kind) {
        (OpCode::Placeholder, _) => unreachable!("placeholders are set up front"),
        (OpCode::Output, _) => Ok(args.into_iter().next().unwrap_or(V::None)),
        (_, TargetKind::Getitem) => match (&args[0], &args[1]) {
            (V::Seq(items), V::Int(i)) => items
                .get(usize::try_from(*i).map_err(|e| e.to_string())?)
                .cloned()
                .ok_or_else(|| "getitem out of range".into()),
            other => Err(format!("bad getitem {other:?}")),
        },
        (_, TargetKind::Operator) => {
            let s = t.schema.as_ref().unwrap();
            let a = schema_args(s, &args, &kwargs);
            if s.is_mutable() && t.name != "aten::copy_.default" {
                mem.mutating(&t.name, &a)
            } else {
                let shape = node.meta.as_ref().and_then(TensorMeta::shape);
                mem.pure_op_shaped(&t.name, &a, shape.as_ref())
            }
        }
        (_, kind) if Form::of_kind(kind) == Some(Form::V1) => {
            let Some(Value::Target(op)) = node.args.first() else {
                return Err("af without an operator".into());
            };
            let op = &g.targets[op.idx()];
            let s = op.schema.as_ref().unwrap();
            let mut call = Vec::new();
            let mut new_vals = Vec::new();
            let mut eager = EagerMemory::of(node, eager);
            for a in &s.args {
                let v = kw(&a.name).unwrap_or(V::None);
                let c = eager.arg(mem, &a.name, v, a.is_written())?;
                if a.is_written() {
                    new_vals.push(c.clone());
                }
                call.push(c);
            }
            let ret = mem.mutating(&op.name, &call)?;
            let mut out = returns_part(s, ret);
            out.extend(new_vals);
            Ok(V::Seq(out))
        }
        (_, kind) if Form::of_kind(kind) == Some(Form::V2) => {
            let Some(Value::Target(op)) = node.args.first() else {
                return Err("af without an operator".into());
            };
            let op = &g.targets[op.idx()];
            let s = op.schema.as_ref().unwrap();
            let Some(V::Seq(bases)) = kw("_all_bases") else {
                return Err("no _all_bases".into());
            };
            if s.tags.out {
                let mut call = Vec::new();
                for a in &s.args {
                    if a.is_written() {
                        let p = format!("_{}", a.name);
                        let b = mem.pure_op(
                            "aten::empty_strided.default",
                            &[
                                kw(&format!("{p}_size")).unwrap_or(V::None),
                                kw(&format!("{p}_stride")).unwrap_or(V::None),
                            ],
                        )?;
                        call.push(b);
                    } else {
                        call.push(kw(&a.name).unwrap_or(V::None));
                    }
                }
                return mem.mutating(&op.name, &call);
            }
            // A base is in the group of the written arguments cut from it.
            let mut eager = EagerMemory::of(node, eager);
            let mut base_label: Vec<Option<String>> = vec![None; bases.len()];
            for a in s.args.iter().filter(|a| a.is_written()) {
                let prefixes: Vec<(String, String)> = match kw(&format!("_{}_length", a.name)) {
                    Some(V::Int(len)) => (0..len)
                        .map(|i| (format!("{}[{i}]", a.name), format!("_{}_{i}", a.name)))
                        .collect(),
                    _ => vec![(a.name.clone(), format!("_{}", a.name))],
                };
                for (label, p) in prefixes {
                    if let Some(V::Int(i)) = kw(&format!("{p}_base_index")) {
                        if let Some(slot) = base_label.get_mut(usize::try_from(i).unwrap()) {
                            slot.get_or_insert(label);
                        }
                    }
                }
            }
            let new_bases: Vec<V> = bases
                .iter()
                .zip(&base_label)
                .map(|(b, label)| match (b, label) {
                    (V::T(t), Some(l)) => Ok(V::T(eager.slot(mem, l, t, true)?)),
                    (V::T(t), None) => Ok(V::T(mem.clone_preserve(t)?)),
                    (other, _) => Ok(other.clone()),
                })
                .collect::<R<_>>()?;
            let view_of = |mem: &mut Mem, p: &str| -> R<V> {
                let bi = match kw(&format!("{p}_base_index")) {
                    Some(V::Int(i)) => usize::try_from(i).unwrap(),
                    _ => return Ok(V::None),
                };
                let base = new_bases[bi].clone();
                let k = |s: &str| kw(&format!("{p}_{s}")).unwrap_or(V::None);
                if kw(&format!("{p}_alias")).is_some() {
                    Ok(base)
                } else if kw(&format!("{p}_storage_offset")).is_some() {
                    mem.pure_op(
                        "aten::as_strided.default",
                        &[base, k("size"), k("stride"), k("storage_offset")],
                    )
                } else if kw(&format!("{p}_slice_dim")).is_some() {
                    mem.pure_op(
                        "aten::slice.Tensor",
                        &[base, k("slice_dim"), k("slice_start"), k("slice_end")],
                    )
                } else {
                    Ok(base)
                }
            };
            let mut call = Vec::new();
            for a in &s.args {
                if !a.is_written() {
                    let v = kw(&a.name).unwrap_or(V::None);
                    call.push(eager.arg(mem, &a.name, v, false)?);
                } else if a.ty == ArgType::TensorList {
                    match kw(&format!("_{}_length", a.name)) {
                        Some(V::Int(len)) => {
                            let items = (0..len)
                                .map(|i| view_of(mem, &format!("_{}_{i}", a.name)))
                                .collect::<R<_>>()?;
                            call.push(V::Seq(items));
                        }
                        _ => call.push(V::None),
                    }
                } else {
                    call.push(view_of(mem, &format!("_{}", a.name))?);
                }
            }
            let ret = mem.mutating(&op.name, &call)?;
            let mut out = returns_part(s, ret);
            out.extend(new_bases);
            Ok(V::Seq(out))
        }
        // SymInt arithmetic (`operator.add(s, 0)` ...).
        (_, TargetKind::Other) => match (t.name.as_str(), args.as_slice()) {
            ("_operator.add", [V::Int(x), V::Int(y)]) => Ok(V::Int(x + y)),
            ("_operator.sub", [V::Int(x), V::Int(y)]) => Ok(V::Int(x - y)),
            ("_operator.mul", [V::Int(x), V::Int(y)]) => Ok(V::Int(x * y)),
            ("_operator.floordiv", [V::Int(x), V::Int(y)]) if *y > 0 => {
                Ok(V::Int(x.div_euclid(*y)))
            }
            _ => Err(format!("cannot run {} ({})", node.name, t.name)),
        },
        _ => Err(format!("cannot run {} ({})", node.name, t.name)),
    }
}

/// What a program leaves behind: its outputs and its inputs' contents.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    pub outputs: Vec<(Vec<i64>, Vec<i64>)>,
    pub inputs: Vec<Vec<i64>>,
}

fn setup_inputs(mem: &mut Mem, g: &Graph) -> HashMap<ValueRef, V> {
    let mut env = HashMap::new();
    // Values by the input's place among the placeholders, not by node
    // index: a graph and its rewrite (nodes inserted before a later
    // placeholder) get the same inputs.
    let mut ordinal: i64 = 0;
    for (i, node) in g.nodes.iter().enumerate() {
        if node.op == OpCode::Placeholder {
            let k = ordinal;
            ordinal += 1;
            let shape = node
                .meta
                .as_ref()
                .and_then(TensorMeta::shape)
                .unwrap_or_else(|| vec![4, 8]);
            let m = node.meta.as_ref();
            let stride = m
                .and_then(TensorMeta::stride)
                .unwrap_or_else(|| contiguous(&shape));
            let off = m.and_then(TensorMeta::storage_offset).unwrap_or(0);
            let len = off
                + shape
                    .iter()
                    .zip(&stride)
                    .map(|(s, st)| (s - 1).max(0) * st)
                    .sum::<i64>()
                + 1;
            let vals = (0..len).map(|j| k * 100 + j * 3 + 1).collect();
            let mut t = mem.fresh(&shape, vals);
            t.stride = stride;
            t.off = off;
            env.insert(ValueRef::Old(NodeId(u32::try_from(i).unwrap())), V::T(t));
        }
    }
    env
}

fn finish(mem: &Mem, g: &Graph, env: &HashMap<ValueRef, V>, out: &V) -> R<Outcome> {
    fn flatten(mem: &Mem, v: &V, out: &mut Vec<(Vec<i64>, Vec<i64>)>) -> R<()> {
        match v {
            V::T(t) => out.push((t.size.clone(), mem.read(t)?)),
            V::Seq(items) => {
                for i in items {
                    flatten(mem, i, out)?;
                }
            }
            _ => {}
        }
        Ok(())
    }
    let mut outputs = Vec::new();
    flatten(mem, out, &mut outputs)?;
    let mut inputs = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        if node.op == OpCode::Placeholder {
            let t = tv(&env[&ValueRef::Old(NodeId(u32::try_from(i).unwrap()))])?;
            inputs.push(mem.read(&t)?);
        }
    }
    Ok(Outcome { outputs, inputs })
}

/// Runs the original graph, every auto_functionalized node with torch's
/// functional semantics.
pub fn run_original(g: &Graph) -> R<Outcome> {
    run_eager(g, &[])
}

/// Runs the original graph, the auto_functionalized nodes named in `eager`
/// on the memory eager's call saw, as their records of alias groups say
/// ([`EagerMemory`]): what a rewrite of those nodes must compute.
pub fn run_eager(g: &Graph, eager: &[String]) -> R<Outcome> {
    let mut mem = Mem::default();
    let mut env = setup_inputs(&mut mem, g);
    let mut last = V::None;
    for i in 0..g.len() {
        let id = NodeId(u32::try_from(i).unwrap());
        if g.node(id).op == OpCode::Placeholder {
            continue;
        }
        let v = {
            let lookup = |n: NodeId| {
                env.get(&ValueRef::Old(n))
                    .cloned()
                    .ok_or_else(|| format!("no value for {n:?}"))
            };
            run_node(&mut mem, g, id, &lookup, eager.contains(&g.node(id).name))?
        };
        last = v.clone();
        env.insert(ValueRef::Old(id), v);
    }
    finish(&mem, g, &env, &last)
}

fn plan_arg(a: &PlanArg, g: &Graph, env: &dyn Fn(ValueRef) -> R<V>) -> R<V> {
    Ok(match a {
        PlanArg::Ref(r) => env(*r)?,
        PlanArg::FromKwarg { node, key } => {
            let v = g
                .node(*node)
                .kwarg(key)
                .ok_or_else(|| format!("no kwarg {key}"))?;
            value(v, &|n| env(ValueRef::Old(n)))?
        }
        PlanArg::FromArg { node, index } => {
            let v = g
                .node(*node)
                .args
                .get(*index)
                .ok_or_else(|| format!("no argument {index}"))?;
            value(v, &|n| env(ValueRef::Old(n)))?
        }
        PlanArg::Int(i) => V::Int(*i),
        PlanArg::IntList(v) => V::Seq(v.iter().map(|&i| V::Int(i)).collect()),
        PlanArg::None => V::None,
        PlanArg::List(items) => V::Seq(
            items
                .iter()
                .map(|i| plan_arg(i, g, env))
                .collect::<R<_>>()?,
        ),
    })
}

/// Applies the plan and runs the resulting program.
pub fn run_planned(g: &Graph, p: &Plan) -> R<Outcome> {
    let mut order: Vec<ValueRef> = (0..g.len())
        .map(|i| ValueRef::Old(NodeId(u32::try_from(i).unwrap())))
        .collect();
    let mut inserts: HashMap<NewId, &Edit> = HashMap::new();
    let mut repl: HashMap<NodeId, ValueRef> = HashMap::new();
    let pos = |order: &Vec<ValueRef>, r: ValueRef| order.iter().position(|x| *x == r);
    for e in &p.edits {
        match e {
            Edit::Move { node, before } => {
                let from = pos(&order, ValueRef::Old(*node)).ok_or("move of a missing node")?;
                order.remove(from);
                let to = pos(&order, ValueRef::Old(*before)).ok_or("move before a missing node")?;
                order.insert(to, ValueRef::Old(*node));
            }
            Edit::Insert { id, before, .. } => {
                let to =
                    pos(&order, ValueRef::Old(*before)).ok_or("insert before a missing node")?;
                order.insert(to, ValueRef::New(*id));
                inserts.insert(*id, e);
            }
            Edit::Replace { node, with } => {
                // Earlier replacements pointing at `node` follow it.
                for v in repl.values_mut() {
                    if *v == ValueRef::Old(*node) {
                        *v = *with;
                    }
                }
                repl.insert(*node, *with);
            }
            Edit::Erase { node } => {
                let at = pos(&order, ValueRef::Old(*node)).ok_or("erase of a missing node")?;
                order.remove(at);
            }
            // A scheduling hint: no value changes.
            Edit::Realize { .. } | Edit::RealizeNew { .. } => {}
        }
    }
    let resolve = |r: ValueRef| -> ValueRef {
        let mut cur = r;
        for _ in 0..1000 {
            match cur {
                ValueRef::Old(n) => match repl.get(&n) {
                    Some(w) => cur = *w,
                    None => return cur,
                },
                ValueRef::New(_) => return cur,
            }
        }
        cur
    };
    let mut mem = Mem::default();
    let mut env = setup_inputs(&mut mem, g);
    let mut last = V::None;
    for r in order {
        if matches!(r, ValueRef::Old(n) if g.node(n).op == OpCode::Placeholder) {
            continue;
        }
        let v = {
            let lookup = |x: ValueRef| {
                env.get(&resolve(x))
                    .cloned()
                    .ok_or_else(|| format!("{x:?} used before it is computed"))
            };
            match r {
                ValueRef::Old(id) => run_node(
                    &mut mem,
                    g,
                    id,
                    &|n: NodeId| lookup(ValueRef::Old(n)),
                    false,
                )?,
                ValueRef::New(id) => {
                    let Edit::Insert {
                        callee,
                        args,
                        kwargs,
                        ..
                    } = inserts[&id]
                    else {
                        unreachable!()
                    };
                    let a: Vec<V> = args
                        .iter()
                        .map(|a| plan_arg(a, g, &lookup))
                        .collect::<R<_>>()?;
                    let k: Vec<(String, V)> = kwargs
                        .iter()
                        .map(|(n, a)| Ok((n.clone(), plan_arg(a, g, &lookup)?)))
                        .collect::<R<_>>()?;
                    match callee {
                        Callee::Target(t) => {
                            let tg = &g.targets[t.idx()];
                            let s = tg.schema.as_ref().unwrap();
                            let call = schema_args(s, &a, &k);
                            mem.mutating(&tg.name, &call)?
                        }
                        Callee::Aten(name) => mem.pure_op(name, &a)?,
                        Callee::Operator(op) => match (&a[0], &a[1], *op) {
                            (V::Int(x), V::Int(y), "add") => V::Int(x + y),
                            (V::Int(x), V::Int(y), "sub") => V::Int(x - y),
                            (V::Int(x), V::Int(y), "mul") => V::Int(x * y),
                            other => return Err(format!("bad operator call {other:?}")),
                        },
                        Callee::Getitem => match (&a[0], &a[1]) {
                            (V::Seq(items), V::Int(i)) => {
                                items[usize::try_from(*i).unwrap()].clone()
                            }
                            other => return Err(format!("bad getitem {other:?}")),
                        },
                    }
                }
            }
        };
        last = v.clone();
        env.insert(r, v);
    }
    finish(&mem, g, &env, &last)
}
