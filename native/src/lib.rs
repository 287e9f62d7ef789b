//! `parsley._native`: the native causal core of Parsley for Python.
//!
//! The pure-Python modules (`parsley/wire.py`, `parsley/engine/`) are the reference
//! implementation; this crate implements the same API with byte-identical headers and
//! ordering-state records (docs/wire-format.md, docs/model.md "The stored form").
//! `parsley/native.py` chooses between them (`PARSLEY_ENGINE`).
//!
//! Pure-Rust modules (`wire`, `state_codec`, `engine`) carry no PyO3 and are tested with
//! `cargo test`; the PyO3 wrappers (`py_*`) and the `#[pymodule]` compile only with the
//! feature `python`, which setuptools-rust turns on (pyproject.toml).
//!
//! The crate builds with Debian 12's toolchain (rustc 1.63, cargo 1.65; `rust-version` in
//! Cargo.toml, Cargo.lock v3): no let-else, `Option::is_some_and`, `std::hint::black_box` or
//! other later features. Check with Debian's toolchain first on PATH when it is installed:
//! `PATH=/usr/bin:$PATH CARGO_UNSTABLE_SPARSE_REGISTRY=true RUSTC_BOOTSTRAP=1 \
//! cargo build --features python`.

pub mod state_codec;
pub mod wire;
pub mod engine;
#[cfg(feature = "python")]
mod py_effects;
#[cfg(feature = "python")]
mod py_engine;
#[cfg(feature = "python")]
mod py_fetch;
#[cfg(feature = "python")]
mod py_methods;

#[cfg(feature = "python")]
pub mod py_state_codec;
#[cfg(feature = "python")]
pub mod py_wire;

#[cfg(feature = "python")]
use pyo3::prelude::*;

/// The crate's version, for `parsley._native.version()`.
#[cfg(feature = "python")]
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[cfg(feature = "python")]
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(version, m)?)?;
    py_effects::register(m)?;
    py_engine::register(m)?;
    py_fetch::register(m)?;
    py_wire::register(m)?;
    py_state_codec::register(m)?;
    Ok(())
}
