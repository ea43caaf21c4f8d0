//! Analyses over the IR: use/def index, alias classes and geometry, readers.

pub mod alias;
pub mod liveness;
pub mod uses;
