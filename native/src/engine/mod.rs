//! The ordering engine's pure-Rust parts: the maps' hasher, the frontier's incremental
//! encoding, insertion-ordered maps and sets, and the flat keys and held blobs of the
//! ordering changelog (docs/model.md, "The stored form"). The PyO3 class that drives them,
//! with the same API as `parsley.engine.engine.ProcessEngine`, is `crate::py_engine`.

pub mod frontier;
pub mod fx;
pub mod ordered;
pub mod rows;
