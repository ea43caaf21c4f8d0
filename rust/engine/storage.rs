//! Storage classes and geometry: which nodes share memory (a union-find
//! over nodes), how a node's view derives from its root, and the layout a
//! node's metadata gives.

use super::*;

impl Context<'_> {
    pub(super) fn find(&mut self, n: NodeId) -> usize {
        let mut r = n.idx();
        while self.parent[r] as usize != r {
            r = self.parent[r] as usize;
        }
        let mut c = n.idx();
        while self.parent[c] as usize != r {
            let next = self.parent[c] as usize;
            self.parent[c] = u32::try_from(r).unwrap_or(u32::MAX);
            c = next;
        }
        r
    }

    pub(super) fn union(&mut self, a: NodeId, b: NodeId) -> usize {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return ra;
        }
        let (big, small) = if self.members[ra].len() >= self.members[rb].len() {
            (ra, rb)
        } else {
            (rb, ra)
        };
        self.parent[small] = u32::try_from(big).unwrap_or(u32::MAX);
        let moved = std::mem::take(&mut self.members[small]);
        self.members[big].extend(moved);
        let moved_inputs = std::mem::take(&mut self.inputs[small]);
        self.inputs[big].extend(moved_inputs);
        self.latest[big] = self.latest[big].max(self.latest[small]);
        big
    }

    pub(super) fn geometry(&self, n: NodeId) -> Geometry {
        let mut steps_rev: Vec<&ViewStep> = Vec::new();
        let mut cur = n;
        loop {
            match &self.link[cur.idx()] {
                Link::Root => break,
                Link::Same(m) => cur = *m,
                Link::Step(m, s) => {
                    steps_rev.push(s);
                    cur = *m;
                }
            }
        }
        let mut g = Geometry {
            root: cur,
            steps: Vec::new(),
        };
        for s in steps_rev.into_iter().rev() {
            g = g.then(s);
        }
        g
    }

    pub(super) fn same_target(&self, n: NodeId) -> NodeId {
        match &self.link[n.idx()] {
            Link::Same(m) => *m,
            _ => n,
        }
    }

    /// The node whose metadata gives `n`'s layout: `n` itself, or when it
    /// has none, the node it is the same memory and geometry as (a result
    /// bound to its buffer).
    pub(super) fn layout_source(&self, n: NodeId) -> NodeId {
        let mut cur = n;
        while self.graph.node(cur).meta.is_none() {
            match (self.link[cur.idx()].clone(), self.same_layout.get(&cur)) {
                (Link::Same(m), _) if m != cur => cur = m,
                (_, Some(&m)) if m != cur => cur = m,
                _ => break,
            }
        }
        cur
    }

    pub(super) fn resolve(&self, n: NodeId) -> ValueRef {
        self.replaced.get(&n).copied().unwrap_or(ValueRef::Old(n))
    }

    /// Geometry of a view that may not be walked yet: its chain of view
    /// steps back to a node at or before position `p`, whose geometry is known.
    pub(super) fn view_geometry(&self, n: NodeId, p: i64) -> Geometry {
        let mut steps: Vec<&ViewStep> = Vec::new();
        let mut cur = n;
        while self.pos[cur.idx()] > p {
            match &self.roles[cur.idx()] {
                Role::View { src, step, .. } => {
                    steps.extend(step.iter());
                    cur = *src;
                }
                _ => break,
            }
        }
        let mut g = self.geometry(cur);
        for s in steps.into_iter().rev() {
            g = g.then(s);
        }
        g
    }

    pub(super) fn overlapping_view(&self, n: NodeId) -> bool {
        let mut cur = n;
        while let Role::View {
            src, overlapping, ..
        } = &self.roles[cur.idx()]
        {
            if *overlapping {
                return true;
            }
            cur = *src;
            if let Link::Same(m) = self.link[cur.idx()] {
                cur = m;
            }
        }
        let meta = self.graph.node(n).meta.as_ref();
        meta.and_then(|m| {
            Some(
                m.shape
                    .as_ref()?
                    .iter()
                    .zip(m.stride.as_ref()?)
                    .any(|(&s, &st)| st == 0 && s > 1),
            )
        })
        .unwrap_or(false)
    }
}

/// The node at the top of `n`'s chain of structural views.
pub(super) fn structural_root(roles: &[Role], n: NodeId) -> NodeId {
    let mut cur = n;
    while let Role::View { src, .. } = &roles[cur.idx()] {
        cur = *src;
    }
    cur
}
