//! Bench of the whole engine, `fxrewrite::plan` (validate, analyse, plan),
//! on generated MoE decoder graphs of 10^3, 10^4 and 10^5 nodes (10^6 with
//! `FXREWRITE_BENCH_LARGE=1`) in both forms. Before timing, every graph is
//! checked to plan with every auto_functionalized node re-inplaced, no clone
//! and none left; a graph that fails the check is reported and not timed.

#[allow(dead_code)]
mod common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

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
