//! Benches of the analysis stages the engine runs before planning, one
//! Criterion group per stage, on generated MoE decoder graphs of 10^3, 10^4
//! and 10^5 nodes (10^6 with `FXREWRITE_BENCH_LARGE=1`) in both forms:
//! `ir::validate::validate`, `analysis::alias::classify`,
//! `analysis::uses::Uses::build` and `analysis::liveness::last_reads`.

#[allow(dead_code)]
mod common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fxrewrite::analysis::alias::classify;
use fxrewrite::analysis::liveness::last_reads;
use fxrewrite::analysis::uses::Uses;
use fxrewrite::ir::validate::validate;

fn analyse(c: &mut Criterion) {
    let cases = common::cases();

    let mut group = c.benchmark_group("validate");
    for case in &cases {
        group.throughput(Throughput::Elements(case.nodes()));
        group.bench_with_input(
            BenchmarkId::from_parameter(case.id()),
            &case.graph,
            |b, g| {
                b.iter(|| validate(black_box(g)).is_ok());
            },
        );
    }
    group.finish();

    let mut group = c.benchmark_group("classify");
    for case in &cases {
        group.throughput(Throughput::Elements(case.nodes()));
        group.bench_with_input(
            BenchmarkId::from_parameter(case.id()),
            &case.graph,
            |b, g| {
                b.iter(|| classify(black_box(g)));
            },
        );
    }
    group.finish();

    let mut group = c.benchmark_group("uses");
    for case in &cases {
        group.throughput(Throughput::Elements(case.nodes()));
        group.bench_with_input(
            BenchmarkId::from_parameter(case.id()),
            &case.graph,
            |b, g| {
                b.iter(|| Uses::build(black_box(g)));
            },
        );
    }
    group.finish();

    let mut group = c.benchmark_group("last_reads");
    for case in &cases {
        let roles = classify(&case.graph);
        let uses = Uses::build(&case.graph);
        group.throughput(Throughput::Elements(case.nodes()));
        group.bench_with_input(
            BenchmarkId::from_parameter(case.id()),
            &(roles, uses),
            |b, (roles, uses)| {
                b.iter(|| last_reads(black_box(roles), black_box(uses)));
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = analyse
}
criterion_main!(benches);
