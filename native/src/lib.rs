//! `parsley._native`: the native causal core of Parsley for Python.
//!
//! The pure-Python modules (`parsley/wire.py`, `parsley/engine/`) are the reference
//! implementation; this crate implements the same API with byte-identical headers and
//! ordering-state records (docs/wire-format.md, docs/model.md "The stored form").
//! `parsley/engine/__init__.py` chooses between them (`PARSLEY_ENGINE`).

use pyo3::prelude::*;

/// The crate's version, for `parsley._native.version()`.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
