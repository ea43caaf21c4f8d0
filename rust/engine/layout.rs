//! The layout a clone must reproduce, from a node's metadata.

use super::*;

/// Static (size, stride, storage offset) of a node, from its metadata.
pub(super) fn strided_layout(graph: &Graph, n: NodeId) -> Option<(Vec<i64>, Vec<i64>, i64)> {
    let m = graph.node(n).meta.as_ref()?;
    Some((m.shape.clone()?, m.stride.clone()?, m.storage_offset?))
}

/// The layout a clone of a node must reproduce.
pub(super) enum CloneLayout {
    /// Every size and stride and the storage offset are known numbers.
    Static {
        size: Vec<i64>,
        stride: Vec<i64>,
        offset: i64,
    },
    /// Sizes or strides are symbolic: read them at run time.
    Symbolic { rank: u32, offset: i64 },
}

/// How a clone of `n` gets its exact layout, or why it cannot.
pub(super) fn clone_layout(
    graph: &Graph,
    n: NodeId,
) -> std::result::Result<CloneLayout, &'static str> {
    let Some(m) = graph.node(n).meta.as_ref() else {
        return Err("the graph carries no tensor metadata for it");
    };
    let Some(offset) = m.storage_offset else {
        return Err("its storage offset is symbolic");
    };
    Ok(match (&m.shape, &m.stride) {
        (Some(size), Some(stride)) => CloneLayout::Static {
            size: size.clone(),
            stride: stride.clone(),
            offset,
        },
        _ => CloneLayout::Symbolic {
            rank: m.rank,
            offset,
        },
    })
}

/// Elements a strided tensor needs from its storage, as
/// `torch._prims_common.compute_required_storage_length`.
pub(super) fn required_storage(size: &[i64], stride: &[i64], offset: i64) -> i64 {
    if size.contains(&0) {
        return 0;
    }
    offset
        + size
            .iter()
            .zip(stride)
            .map(|(s, st)| (s - 1) * st)
            .sum::<i64>()
        + 1
}
