//! Benches of the `.fxir` file format, `fxrewrite::ir::io::{write, read}`
//! (`read` includes the validation of the decoded graph), on generated MoE
//! decoder graphs of 10^3, 10^4 and 10^5 nodes (10^6 with
//! `FXREWRITE_BENCH_LARGE=1`) in both forms. Before timing, every graph is
//! checked to read back equal to what was written.

#[allow(dead_code)]
mod common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fxrewrite::ir::io::{read, write, FileInfo};

fn decode(c: &mut Criterion) {
    let cases = common::cases();
    let info = FileInfo::provenance(
        "2.15.0",
        concat!("fxrewrite ", env!("CARGO_PKG_VERSION")),
        "benches/decode.rs",
    );
    let files: Vec<Vec<u8>> = cases.iter().map(|case| write(&case.graph, &info)).collect();
    for (case, bytes) in cases.iter().zip(&files) {
        match read(bytes) {
            Ok((g, i)) if g == case.graph && i == info => {
                eprintln!(
                    "decode/{}: {} nodes, {} bytes ({:.1} bytes/node)",
                    case.id(),
                    case.nodes(),
                    bytes.len(),
                    bytes.len() as f64 / case.nodes() as f64
                );
            }
            Ok(_) => eprintln!(
                "decode/{}: the graph read back differs from the one written",
                case.id()
            ),
            Err(e) => eprintln!("decode/{}: reading back failed: {e}", case.id()),
        }
    }

    let mut group = c.benchmark_group("write");
    for case in &cases {
        group.throughput(Throughput::Elements(case.nodes()));
        group.bench_with_input(
            BenchmarkId::from_parameter(case.id()),
            &case.graph,
            |b, g| {
                b.iter(|| write(black_box(g), black_box(&info)));
            },
        );
    }
    group.finish();

    let mut group = c.benchmark_group("read");
    for (case, bytes) in cases.iter().zip(&files) {
        group.throughput(Throughput::Elements(case.nodes()));
        group.bench_with_input(BenchmarkId::from_parameter(case.id()), bytes, |b, bytes| {
            b.iter(|| read(black_box(bytes)).map(|(g, _)| g.len()));
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = decode
}
criterion_main!(benches);
