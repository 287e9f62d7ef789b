//! Fetched records at the boundary: `split_errors`, the worker's per-batch error filter
//! (`workers/fetched.py` holds its pure-Python twin and documents the contract).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyList;

/// `split_errors(records) -> (good, errors)`: the records whose `error()` is `None`, and
/// the others, each in fetch order. When no record has an error, `good` is `records`
/// itself (no copy) and `errors` is an empty list.
///
/// Raises whatever a record's `error()` raises (a value without the method:
/// `AttributeError`).
#[pyfunction]
fn split_errors<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyList>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let name = intern!(py, "error");
    let errors = PyList::empty(py);
    let mut first_error: Option<usize> = None;
    for (i, rec) in records.iter().enumerate() {
        if !rec.call_method0(name)?.is_none() {
            first_error = Some(i);
            break;
        }
    }
    let first = match first_error {
        None => return Ok((records.clone(), errors)),
        Some(i) => i,
    };
    let good = PyList::empty(py);
    for (i, rec) in records.iter().enumerate() {
        if i < first {
            good.append(rec)?;
        } else if i == first || !rec.call_method0(name)?.is_none() {
            errors.append(rec)?;
        } else {
            good.append(rec)?;
        }
    }
    Ok((good, errors))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(split_errors, m)?)?;
    Ok(())
}
