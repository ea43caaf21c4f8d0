//! Analyses over the IR: use/def index, alias classes and geometry, readers.

pub mod alias;
pub mod liveness;
#[cfg(test)]
pub(crate) mod test_graph;
pub mod uses;
