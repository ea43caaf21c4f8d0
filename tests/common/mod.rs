//! Support code shared by the Rust integration tests (`tests/*.rs`) and the
//! benches (`benches/common/`), so that each piece exists once:
//! - [`ops`]: operator schemas as torch spells them;
//! - [`builder`]: the graph builder ([`builder::B`]);
//! - [`graphs`]: the graph shapes many engine tests start from;
//! - [`random`]: the random graph generator (a proptest strategy);
//! - [`interp`]: the reference interpreter that runs an original graph and
//!   its planned program, so the two can be compared;
//! - [`plans`]: reading plans and the oracles every plan must pass.
//! - [`seeds`]: the fixed seeds of the property tests (CI is deterministic).
//!
//! A test file pulls it in with `mod common;`, a bench with
//! `#[path = "../../tests/common/mod.rs"]`. Each includes all of it and uses a
//! part, hence `dead_code`; it is test code, hence the panicking helpers.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs
)]

pub mod builder;
pub mod graphs;
pub mod interp;
pub mod ops;
pub mod plans;
pub mod random;
pub mod seeds;
