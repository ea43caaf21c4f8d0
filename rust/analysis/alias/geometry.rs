//! Geometry of a view: its root and the canonical steps from there, and the
//! proofs built on it (emptiness, disjointness) that let the engine skip
//! clones for readers of memory a call does not write.

use super::steps::{Dim, ViewStep};
use crate::ir::NodeId;

/// The canonical geometry of a node: the node at the top of its view chain
/// and the steps from there, with identity steps dropped and absolute
/// `as_strided` steps cutting the chain.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Geometry {
    /// The node whose memory this is a view of (itself for a non-view).
    pub root: NodeId,
    /// Steps from `root`, outermost first.
    pub steps: Vec<ViewStep>,
}

impl Geometry {
    /// This geometry followed by one more step.
    #[must_use]
    pub fn then(&self, step: &ViewStep) -> Geometry {
        let mut g = self.clone();
        match (g.steps.last(), step) {
            (_, ViewStep::AsStrided { .. }) => g.steps.clear(),
            // Squeezing the dimension just added gives the view back.
            (Some(ViewStep::Unsqueeze { dim: a }), ViewStep::Squeeze { dim: b }) if a == b => {
                g.steps.pop();
                return g;
            }
            // Both are views of one memory in row-major order: the last
            // shape alone defines the elements.
            (Some(ViewStep::Reshape { .. }), ViewStep::Reshape { .. }) => {
                g.steps.pop();
            }
            _ => {}
        }
        g.steps.push(step.clone());
        g
    }

    /// True when the view provably has no element: a step leaves a size 0
    /// (an empty slice range, an `as_strided` or reshape to a size 0), and
    /// every step after it keeps the element count at 0 (slices, selects,
    /// reshapes, `unsqueeze`/`squeeze` do; an opaque view might be an
    /// `as_strided` that reaches elements again).
    #[must_use]
    pub fn provably_empty(&self) -> bool {
        let mut empty = false;
        for s in &self.steps {
            match s {
                ViewStep::Slice { start, end, .. } if end <= start => empty = true,
                ViewStep::Reshape { shape } if shape.contains(&Dim::Int(0)) => empty = true,
                ViewStep::AsStrided { size, .. } => empty = size.contains(&0),
                ViewStep::Opaque(_) => empty = false,
                ViewStep::Slice { .. }
                | ViewStep::Select { .. }
                | ViewStep::Reshape { .. }
                | ViewStep::Unsqueeze { .. }
                | ViewStep::Squeeze { .. } => {}
            }
        }
        empty
    }

    /// True when the two views provably touch disjoint elements: one of them
    /// has no element, or after a common prefix of steps, the next steps
    /// select disjoint ranges of one dimension (whatever follows them).
    #[must_use]
    pub fn provably_disjoint(&self, other: &Geometry) -> bool {
        if self.provably_empty() || other.provably_empty() {
            return true;
        }
        if self.root != other.root {
            return false;
        }
        let k = self
            .steps
            .iter()
            .zip(&other.steps)
            .take_while(|(x, y)| x == y)
            .count();
        match (self.steps.get(k), other.steps.get(k)) {
            (Some(_), Some(y)) => {
                let mine = Geometry {
                    root: self.root,
                    steps: self.steps[..=k].to_vec(),
                };
                let theirs = Geometry {
                    root: other.root,
                    steps: [&self.steps[..k], std::slice::from_ref(y)].concat(),
                };
                mine.disjoint_from(&theirs)
            }
            _ => false,
        }
    }

    /// True when the two views provably touch disjoint elements: one of them
    /// has no element, or the same chain up to a last step that selects
    /// disjoint ranges of one dimension.
    #[must_use]
    pub fn disjoint_from(&self, other: &Geometry) -> bool {
        if self.provably_empty() || other.provably_empty() {
            return true;
        }
        if self.root != other.root || self.steps.len() != other.steps.len() || self.steps.is_empty()
        {
            return false;
        }
        let n = self.steps.len() - 1;
        if self.steps[..n] != other.steps[..n] {
            return false;
        }
        let range = |s: &ViewStep| match s {
            ViewStep::Slice {
                dim,
                start,
                end,
                step: 1,
            } => Some((*dim, *start, *end)),
            ViewStep::Select { dim, index } => Some((*dim, *index, index + 1)),
            _ => None,
        };
        match (range(&self.steps[n]), range(&other.steps[n])) {
            (Some((d1, s1, e1)), Some((d2, s2, e2))) => d1 == d2 && (e1 <= s2 || e2 <= s1),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(root: u32, steps: Vec<ViewStep>) -> Geometry {
        Geometry {
            root: NodeId(root),
            steps,
        }
    }

    /// `x[..., start:end]` along `dim`, step 1.
    fn slice(dim: i64, start: i64, end: i64) -> ViewStep {
        ViewStep::Slice {
            dim,
            start,
            end,
            step: 1,
        }
    }

    #[test]
    fn disjoint_slices_and_selects() {
        let a = g(0, vec![slice(1, 0, 4)]);
        let b = g(0, vec![slice(1, 4, 8)]);
        let c = g(0, vec![slice(1, 3, 8)]);
        assert!(a.disjoint_from(&b));
        assert!(!a.disjoint_from(&c));
        let s0 = g(0, vec![ViewStep::Select { dim: 0, index: 0 }]);
        let s1 = g(0, vec![ViewStep::Select { dim: 0, index: 1 }]);
        assert!(s0.disjoint_from(&s1));
        assert!(!s0.disjoint_from(&s0));
        assert!(!a.disjoint_from(&g(1, b.steps.clone())));
    }

    #[test]
    fn squeeze_undoes_unsqueeze_and_reshapes_collapse() {
        let cut = slice(1, 16, 24);
        let base = g(0, vec![cut.clone()]);
        let round_trip = base
            .then(&ViewStep::Unsqueeze { dim: 1 })
            .then(&ViewStep::Squeeze { dim: 1 });
        assert_eq!(round_trip, base);
        // Another dimension is another view.
        let other = base
            .then(&ViewStep::Unsqueeze { dim: 1 })
            .then(&ViewStep::Squeeze { dim: 0 });
        assert_ne!(other, base);
        let shape = |v: &[i64]| ViewStep::Reshape {
            shape: v.iter().map(|&d| Dim::Int(d)).collect(),
        };
        let twice = g(0, vec![])
            .then(&shape(&[5, 2, 24]))
            .then(&shape(&[10, 24]));
        assert_eq!(twice, g(0, vec![shape(&[10, 24])]));
        // A reshape after a slice is not merged with one before it.
        let sliced = g(0, vec![])
            .then(&shape(&[5, 2, 24]))
            .then(&cut)
            .then(&shape(&[80]));
        assert_eq!(sliced.steps.len(), 3);
    }

    #[test]
    fn empty_views_touch_nothing() {
        let rows = |start, end| slice(0, start, end);
        let empty = g(0, vec![rows(2, 2)]);
        let whole = g(0, vec![]);
        let other_root = g(1, vec![rows(0, 4)]);
        assert!(empty.provably_empty());
        assert!(g(0, vec![rows(3, 1)]).provably_empty());
        assert!(!g(0, vec![rows(1, 3)]).provably_empty());
        assert!(!whole.provably_empty());
        // Emptiness survives later views, not an as_strided or opaque one.
        assert!(empty
            .then(&ViewStep::Select { dim: 1, index: 0 })
            .then(&ViewStep::Unsqueeze { dim: 0 })
            .provably_empty());
        assert!(!empty.then(&ViewStep::Opaque(NodeId(7))).provably_empty());
        let strided = |size: Vec<i64>| ViewStep::AsStrided {
            size,
            stride: vec![8, 1],
            offset: 16,
        };
        assert!(!empty.then(&strided(vec![2, 3])).provably_empty());
        assert!(whole.then(&strided(vec![0, 3])).provably_empty());
        let reshape0 = ViewStep::Reshape {
            shape: vec![Dim::Int(4), Dim::Int(0)],
        };
        assert!(whole.then(&reshape0).provably_empty());
        // An empty view is disjoint from anything, itself included.
        assert!(empty.provably_disjoint(&whole));
        assert!(whole.provably_disjoint(&empty));
        assert!(empty.provably_disjoint(&empty));
        assert!(empty.disjoint_from(&other_root));
        assert!(!whole.provably_disjoint(&g(0, vec![rows(1, 3)])));
    }

    #[test]
    fn as_strided_cuts_the_chain() {
        let base = g(0, vec![ViewStep::Select { dim: 0, index: 1 }]);
        let st = ViewStep::AsStrided {
            size: vec![2],
            stride: vec![1],
            offset: 4,
        };
        assert_eq!(base.then(&st), g(0, vec![st.clone()]));
    }
}
