//! Memory sharing between the arguments of one call. The rewritten call
//! must see exactly the sharing eager's call saw: a kernel may rely on it
//! (`op(x, out=x)` reads what it just wrote), and a kernel given sharing
//! eager never gave it reads memory it is writing.
//!
//! The graph as it arrives cannot tell the two apart: Inductor's
//! `remove_noop_ops` deletes the user's clones, so `y = x.clone();
//! op(out=y, x=x)` arrives as `op(out=x, x=x)` (pytorch#198031). What decides
//! is the call's record of alias groups (`fxrewrite.pre_pass`, made before
//! the cleanups): slots of one group shared memory in the program, slots of
//! different groups did not. Slots that share memory here and are in one
//! group form a *unit*, written in place together or re-derived together
//! from one copy; slots that share memory here but are in different groups
//! are split, by a copy of the written one's unit. Without a record, a call
//! whose arguments share memory is left to Inductor.

use crate::analysis::alias::arrival_storages;
use crate::forms::call::MutationCall;

use super::clone_reason::CloneReason;
use super::{Context, LeftReason};

/// One tensor slot of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// A written buffer (index into [`MutationCall::buffers`]).
    Buffer(usize),
    /// A read slot (index into [`MutationCall::read_nodes`]).
    Read(usize),
}

/// How the slots of one call share memory, and what the rewrite must keep.
#[derive(Debug)]
pub(super) struct Sharing {
    /// Per buffer, its unit: buffers of one unit are written in place
    /// together or cloned together, from one copy.
    pub(super) unit_of_buffer: Vec<usize>,
    /// Read slots (index into [`MutationCall::read_nodes`]) in a unit with a
    /// buffer, and the unit: re-derived from the unit's copy when it is
    /// cloned.
    pub(super) unit_reads: Vec<(usize, usize)>,
    /// Per buffer, why it must not keep the memory it has here: it shares
    /// it with a slot that did not share memory with it in the program.
    pub(super) split: Vec<Option<CloneReason>>,
}

impl Sharing {
    /// Every buffer its own unit, nothing to keep or split: the slots share
    /// no memory.
    fn none(nb: usize) -> Self {
        Self {
            unit_of_buffer: (0..nb).collect(),
            unit_reads: Vec::new(),
            split: vec![None; nb],
        }
    }

    /// The buffers of the unit of buffer `b`.
    pub(super) fn unit_buffers(&self, b: usize) -> impl Iterator<Item = usize> + '_ {
        let u = self.unit_of_buffer[b];
        (0..self.unit_of_buffer.len()).filter(move |&o| self.unit_of_buffer[o] == u)
    }

    /// The read slots of unit `u`.
    pub(super) fn unit_read_slots(&self, u: usize) -> impl Iterator<Item = usize> + '_ {
        self.unit_reads
            .iter()
            .filter(move |(_, ru)| *ru == u)
            .map(|(r, _)| *r)
    }
}

impl Context<'_> {
    /// The sharing of `call`'s slots, or why the call must be left: its
    /// slots share memory and no record attributes the sharing.
    pub(super) fn sharing(
        &mut self,
        call: &MutationCall,
    ) -> std::result::Result<Sharing, LeftReason> {
        let nb = call.buffers.len();
        let pairs = self.sharing_pairs(call);
        if pairs.is_empty() {
            return Ok(Sharing::none(nb));
        }
        // A buffer is named as the user wrote it: a base (v2) by the
        // written arguments cut from it.
        let label = |s: Slot| match s {
            Slot::Buffer(b) => {
                let names = call.labels_naming_buffer(b);
                if names.is_empty() {
                    call.buffers[b].label.clone()
                } else {
                    names.join("`, `")
                }
            }
            Slot::Read(r) => call.read_nodes[r].0.clone(),
        };
        let Some(groups) = call.alias_groups.as_ref() else {
            let (a, b) = pairs[0];
            return Err(LeftReason::NoRecord {
                first: label(a),
                second: label(b),
            });
        };
        self.check_record(call, groups)?;
        let group_of_label = |l: &str| groups.iter().position(|g| g.iter().any(|s| s == l));
        let group = |s: Slot| -> std::result::Result<usize, LeftReason> {
            let labels: Vec<String> = match s {
                Slot::Buffer(b) => call
                    .labels_naming_buffer(b)
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                other => vec![label(other)],
            };
            let mut found = None;
            for l in &labels {
                let g = group_of_label(l)
                    .ok_or_else(|| LeftReason::UnrecordedArgument { arg: l.clone() })?;
                if found.is_some_and(|f| f != g) {
                    return Err(LeftReason::BaseInSeveralGroups { base: label(s) });
                }
                found = Some(g);
            }
            found.ok_or_else(|| LeftReason::NoWrittenArgument { base: label(s) })
        };
        let slot_index = |s: Slot| match s {
            Slot::Buffer(b) => b,
            Slot::Read(r) => nb + r,
        };
        let mut parent: Vec<usize> = (0..nb + call.read_nodes.len()).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        let mut split: Vec<Option<CloneReason>> = vec![None; nb];
        for &(a, b) in &pairs {
            if group(a)? == group(b)? {
                let (ra, rb) = (
                    root(&mut parent, slot_index(a)),
                    root(&mut parent, slot_index(b)),
                );
                parent[ra.max(rb)] = ra.min(rb);
                continue;
            }
            let why = |other: Slot| CloneReason::SplitSharing {
                other: label(other),
                read: matches!(other, Slot::Read(_)),
            };
            match (a, b) {
                (Slot::Buffer(x), other @ Slot::Read(_))
                | (other @ Slot::Read(_), Slot::Buffer(x)) => {
                    split[x].get_or_insert_with(|| why(other));
                }
                (Slot::Buffer(x), Slot::Buffer(y)) => {
                    let (first, second) = (x.min(y), x.max(y));
                    split[second].get_or_insert_with(|| why(Slot::Buffer(first)));
                }
                (Slot::Read(_), Slot::Read(_)) => {}
            }
        }
        let unit_of_buffer: Vec<usize> = (0..nb).map(|b| root(&mut parent, b)).collect();
        let unit_reads = (0..call.read_nodes.len())
            .filter_map(|r| {
                let u = root(&mut parent, nb + r);
                (u < nb).then_some((r, u))
            })
            .collect();
        Ok(Sharing {
            unit_of_buffer,
            unit_reads,
            split,
        })
    }

    /// Refuses a record the pre pass cannot have made: one group naming
    /// slots on two storages of the graph as it arrives (the pre pass groups
    /// by storage, and Inductor's cleanups only merge storages after it; see
    /// `analysis::alias::arrival_storages`). Trusting it would give the
    /// kernel sharing the program may never have had.
    fn check_record(
        &mut self,
        call: &MutationCall,
        groups: &[Vec<String>],
    ) -> std::result::Result<(), LeftReason> {
        let arrival = self
            .arrival
            .get_or_insert_with(|| arrival_storages(self.facts.graph, &self.facts.roles));
        for g in groups {
            let mut first: Option<(&str, usize)> = None;
            for l in g {
                let Some(node) = call.slot_node(l) else {
                    continue;
                };
                let st = arrival[node.idx()];
                match first {
                    None => first = Some((l, st)),
                    Some((f, fs)) if fs != st => {
                        return Err(LeftReason::ImpossibleRecord {
                            first: f.to_string(),
                            second: l.clone(),
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// The pairs of slots that may share memory in the graph as it arrives
    /// (at least one of them written): a read slot and a buffer whose
    /// written region it may overlap, two buffers on one memory (for v1,
    /// unless their geometries are provably disjoint). The written
    /// arguments of one v2 base are one buffer: they shared their base in
    /// the program too, since functionalization made it from eager's tensors.
    fn sharing_pairs(&mut self, call: &MutationCall) -> Vec<(Slot, Slot)> {
        let nb = call.buffers.len();
        let roots: Vec<usize> = call
            .buffers
            .iter()
            .map(|b| self.classes.find(b.node))
            .collect();
        let mut pairs = Vec::new();
        for b in 0..nb {
            for (r, &(_, rn)) in call.read_nodes.iter().enumerate() {
                if self.classes.find(rn) == roots[b] && !self.model().read_is_disjoint(call, b, rn)
                {
                    pairs.push((Slot::Buffer(b), Slot::Read(r)));
                }
            }
            for o in 0..b {
                if roots[o] == roots[b]
                    && (call.form.buffers_are_bases()
                        || !self
                            .model()
                            .geometry(call.buffers[o].node)
                            .provably_disjoint(&self.model().geometry(call.buffers[b].node)))
                {
                    pairs.push((Slot::Buffer(o), Slot::Buffer(b)));
                }
            }
        }
        pairs
    }
}

/// Extends the clones in `clone` to whole units: the buffers of a unit are
/// written in place together or re-derived together from one copy, so a
/// buffer whose unit mate is cloned is cloned with it (the report shows one
/// note per unit: [`super::Facts::unit_notes`]).
pub(super) fn clone_whole_units(sharing: &Sharing, clone: &mut [Option<CloneReason>]) {
    for b in 0..clone.len() {
        if clone[b].is_none() {
            if let Some(o) = sharing.unit_buffers(b).find(|&o| clone[o].is_some()) {
                clone[b] = clone[o].clone();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::nid;
    use super::*;
    use crate::analysis::test_graph::{n, rms, B};
    use crate::engine::left::NO_RECORD;
    use crate::forms::FormCall;
    use crate::ir::Graph;
    use crate::ir::NodeId;
    use crate::ir::Value;

    /// `rms(out=t, x=t)` on a fresh `t`, with the pre pass's record
    /// `groups` (none: no record); the graph and the call.
    fn one_memory(groups: Option<&[&[&str]]>) -> (Graph, NodeId) {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let nt = b.rms_on_one_memory("af", t, groups);
        let g = b.output(&[nt]);
        (g, NodeId(nt.0 - 1))
    }

    /// The sharing of call `af`, on the walk of `g` up to it.
    fn sharing_of(g: &Graph, af: NodeId) -> std::result::Result<Sharing, LeftReason> {
        let mut cx = Context::new(g);
        for i in 0..af.idx() {
            cx.step(nid(i)).unwrap();
        }
        let Some(Ok(FormCall::Mutation(call))) = crate::forms::parse(g, af).map(|(_, c)| c) else {
            panic!("a mutation call");
        };
        cx.sharing(&call)
    }

    #[test]
    fn slots_one_group_recorded_as_sharing_are_one_unit() {
        let (g, af) = one_memory(Some(&[&["out", "x"]]));
        let s = sharing_of(&g, af).unwrap();
        assert_eq!(s.unit_of_buffer, [0]);
        assert_eq!(s.unit_reads, [(0, 0)]);
        assert_eq!(s.split, [None]);
        assert_eq!(s.unit_read_slots(0).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn slots_recorded_in_different_groups_split_the_buffer() {
        let (g, af) = one_memory(Some(&[&["out"], &["x"]]));
        let s = sharing_of(&g, af).unwrap();
        assert!(s.unit_reads.is_empty());
        assert_eq!(
            s.split,
            [Some(CloneReason::SplitSharing {
                other: "x".into(),
                read: true
            })]
        );
    }

    #[test]
    fn sharing_with_no_record_or_a_record_missing_a_slot_is_refused() {
        let (g, af) = one_memory(None);
        let why = sharing_of(&g, af).unwrap_err();
        assert_eq!(
            why,
            LeftReason::NoRecord {
                first: "out".into(),
                second: "x".into()
            }
        );
        assert_eq!(why.cause(), crate::plan::LeftCause::UnattributedSharing);
        let text = why.note(&g);
        assert!(
            text.starts_with("arguments `out` and `x` share memory in the graph as it arrives"),
            "{text}"
        );
        assert!(text.ends_with(NO_RECORD), "{text}");
        let (g, af) = one_memory(Some(&[&["x"]]));
        let why = sharing_of(&g, af).unwrap_err();
        assert_eq!(why, LeftReason::UnrecordedArgument { arg: "out".into() });
        let text = why.note(&g);
        assert!(text.contains("does not name argument `out`"), "{text}");
    }

    #[test]
    fn slots_on_separate_memory_share_nothing() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let u = b.fresh("u", x);
        let af = b.af(
            "af",
            true,
            &rms(),
            vec![
                ("x", n(u)),
                ("_out_base_index", Value::Int(0)),
                ("_all_bases", Value::List(vec![n(t)])),
            ],
        );
        let g = b.output(&[af]);
        let s = sharing_of(&g, af).unwrap();
        assert_eq!(
            (s.unit_of_buffer, s.unit_reads, s.split),
            (vec![0], vec![], vec![None])
        );
    }

    #[test]
    fn a_clone_extends_to_the_whole_unit_and_no_further() {
        let sharing = Sharing {
            unit_of_buffer: vec![0, 1, 0, 1],
            unit_reads: vec![],
            split: vec![None; 4],
        };
        let why = CloneReason::OverlappingView;
        let mut clone = vec![None, None, Some(why.clone()), None];
        clone_whole_units(&sharing, &mut clone);
        assert_eq!(clone, [Some(why.clone()), None, Some(why), None]);
        assert_eq!(sharing.unit_buffers(3).collect::<Vec<_>>(), [1, 3]);
    }
}
