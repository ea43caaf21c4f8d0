//! Bench of the whole engine, `fxrewrite::plan` (validate, analyse, plan),
//! on generated MoE decoder graphs of 10^3, 10^4 and 10^5 nodes (10^6 with
//! `FXREWRITE_BENCH_LARGE=1`) in both forms. Before timing, every graph is
//! checked to plan with every auto_functionalized node re-inplaced, no clone
//! and none left; a graph that fails the check is reported and not timed.
//!
//! Peak memory: the bench counts heap allocations (`peak_alloc`, a counting
//! wrapper around the system allocator) and prints, per graph, the peak heap the engine adds
//! during one plan, in total and per node: the figure docs/speed.md reports
//! beside the time per node.

#[allow(dead_code)]
mod common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use peak_alloc::PeakAlloc;

#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc;

/// Peak heap bytes added by one plan of `g`, above what was live before.
fn peak_heap_of_plan(g: &fxrewrite::ir::Graph) -> usize {
    let before = ALLOCATOR.current_usage();
    ALLOCATOR.reset_peak_usage();
    let plan = fxrewrite::plan(g);
    let peak = ALLOCATOR.peak_usage();
    drop(plan);
    peak.saturating_sub(before)
}

fn plan(c: &mut Criterion) {
    let cases = common::cases();
    let mut group = c.benchmark_group("plan");
    for case in &cases {
        match common::check_plan(&case.graph) {
            Ok(_) => {}
            Err(e) => {
                eprintln!(
                    "plan/{}: generated graph does not plan cleanly, not timed: {e}",
                    case.id()
                );
                continue;
            }
        }
        let peak = peak_heap_of_plan(&case.graph);
        #[allow(clippy::cast_precision_loss)]
        let (mib, per_node) = (
            peak as f64 / (1024.0 * 1024.0),
            peak as f64 / case.nodes() as f64,
        );
        eprintln!(
            "plan/{}: peak heap {mib:.1} MiB, {per_node:.0} bytes per node",
            case.id()
        );
        group.throughput(Throughput::Elements(case.nodes()));
        group.bench_with_input(
            BenchmarkId::from_parameter(case.id()),
            &case.graph,
            |b, g| {
                b.iter(|| fxrewrite::plan(black_box(g)).map(|p| p.edits.len()));
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = plan
}
criterion_main!(benches);
