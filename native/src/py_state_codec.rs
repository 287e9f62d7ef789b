//! PyO3 wrappers of the ordering-state codec (`crate::state_codec`): `decode_held`,
//! `encode_held`, `validate_held` and `load_image` with the Python API and refusals of the
//! reference `parsley/engine/state_codec.py` (docs/model.md, "The stored form").
//!
//! `encode_held` falls back to the Python reference (`reference_encode_held`) for any
//! input it does not take on itself (a non-bytes key or value, a timestamp or position
//! outside int64, a header key that is not encodable UTF-8), so its errors are the
//! reference's own.

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::py_wire::{channel_object, channel_objects, channel_of_object, refusal};
use crate::state_codec::{self, HeldRef, ImageLoader};
use crate::wire::Channel;

static HELD_MESSAGE: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static OBJECT_NEW: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static ORDERING_IMAGE: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static REFERENCE_ENCODE_HELD: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static UUID_TYPE: GILOnceCell<Py<PyAny>> = GILOnceCell::new();

/// The value of a `Result`, or `Ok(None)` from the enclosing function (the reference
/// decides).
macro_rules! or_none {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(_) => return Ok(None),
        }
    };
}

const MODULE: &str = "parsley.engine.state_codec";

/// `UNKNOWN_ORDERING_STATE_FORMAT` with `detail`.
pub fn unknown_format(py: Python<'_>, detail: &str) -> PyErr {
    refusal(py, "UNKNOWN_ORDERING_STATE_FORMAT", detail)
}

/// `f(bytes)` on a bytes object borrowed, or on `bytes(obj)` for any other buffer.
fn with_bytes<R>(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    f: impl FnOnce(&[u8]) -> PyResult<R>,
) -> PyResult<R> {
    if let Ok(b) = obj.downcast::<PyBytes>() {
        return f(b.as_bytes());
    }
    let copied = py.get_type::<PyBytes>().call1((obj,))?;
    f(copied.downcast::<PyBytes>()?.as_bytes())
}

fn optional_bytes<'py>(py: Python<'py>, v: Option<&[u8]>) -> Bound<'py, PyAny> {
    match v {
        None => py.None().into_bound(py),
        Some(b) => PyBytes::new(py, b).into_any(),
    }
}

/// The Python `HeldMessage` of a decoded blob.
pub fn held_object<'py>(py: Python<'py>, m: &HeldRef<'_>) -> PyResult<Bound<'py, PyAny>> {
    let headers = PyTuple::new(
        py,
        m.headers.iter().map(|(k, v)| {
            PyTuple::new(
                py,
                [PyString::new(py, k).into_any(), optional_bytes(py, *v)],
            )
            .expect("a pair")
        }),
    )?;
    let objects = channel_objects(py, &m.causes)?;
    let causes = PyTuple::new(
        py,
        m.causes.iter().zip(objects).map(|((_, position), ch)| {
            PyTuple::new(
                py,
                [
                    ch.into_bound(py),
                    position.into_pyobject(py).expect("int").into_any(),
                ],
            )
            .expect("a pair")
        }),
    )?;
    let cls = HELD_MESSAGE.import(py, MODULE, "HeldMessage")?;
    // `object.__new__` and a generic set of each slot, as the frozen dataclass's own
    // `__init__` does through `object.__setattr__`, without running its Python code.
    let obj = OBJECT_NEW
        .import(py, "builtins", "object")?
        .call_method1(pyo3::intern!(py, "__new__"), (cls,))?;
    let fields: [(&Bound<'py, PyString>, Bound<'py, PyAny>); 5] = [
        (
            pyo3::intern!(py, "timestamp_ms"),
            m.timestamp_ms.into_pyobject(py)?.into_any(),
        ),
        (pyo3::intern!(py, "key"), optional_bytes(py, m.key)),
        (pyo3::intern!(py, "value"), optional_bytes(py, m.value)),
        (pyo3::intern!(py, "headers"), headers.into_any()),
        (pyo3::intern!(py, "causes"), causes.into_any()),
    ];
    for (name, value) in fields {
        // SAFETY: three valid owned references, held for the call.
        let rc = unsafe {
            pyo3::ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), value.as_ptr())
        };
        if rc != 0 {
            return Err(PyErr::fetch(py));
        }
    }
    Ok(obj)
}

/// decode_held(blob, /)
/// --
///
/// Decode a held-message blob (the native implementation of
/// :func:`parsley.engine.state_codec.reference_decode_held`: same ``HeldMessage``, same
/// ``ParsleyFailClosedError(UNKNOWN_ORDERING_STATE_FORMAT, 'corrupt held blob: ...')``).
#[pyfunction]
pub fn decode_held<'py>(py: Python<'py>, blob: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    with_bytes(py, blob, |data| {
        let m = state_codec::decode_held(data).map_err(|d| unknown_format(py, &d))?;
        held_object(py, &m)
    })
}

/// validate_held(blob, /)
/// --
///
/// Run every :func:`decode_held` check without building the message (native
/// :func:`parsley.engine.state_codec.reference_validate_held`).
#[pyfunction]
pub fn validate_held(py: Python<'_>, blob: &Bound<'_, PyAny>) -> PyResult<()> {
    with_bytes(py, blob, |data| {
        state_codec::validate_held(data).map_err(|d| unknown_format(py, &d))
    })
}

/// The parts of a `HeldMessage` as the encoder takes them, or `None` for the reference.
#[allow(clippy::type_complexity)]
fn held_parts<'py>(
    py: Python<'py>,
    m: &Bound<'py, PyAny>,
) -> PyResult<
    Option<(
        i64,
        Option<Bound<'py, PyBytes>>,
        Option<Bound<'py, PyBytes>>,
        Vec<(Bound<'py, PyString>, Option<Bound<'py, PyBytes>>)>,
        Vec<(Channel, i64)>,
    )>,
> {
    let timestamp = or_none!(m
        .getattr(pyo3::intern!(py, "timestamp_ms"))?
        .extract::<i64>());
    let bytes_or_none = |v: Bound<'py, PyAny>| -> Result<Option<Bound<'py, PyBytes>>, ()> {
        if v.is_none() {
            Ok(None)
        } else {
            v.downcast_into::<PyBytes>().map(Some).map_err(|_| ())
        }
    };
    let key = or_none!(bytes_or_none(m.getattr(pyo3::intern!(py, "key"))?));
    let value = or_none!(bytes_or_none(m.getattr(pyo3::intern!(py, "value"))?));
    // Only tuples and lists: a one-pass iterable consumed here would reach the reference
    // empty.
    let sequence =
        |v: Bound<'py, PyAny>| v.is_instance_of::<PyTuple>() || v.is_instance_of::<PyList>();
    let raw_headers = m.getattr(pyo3::intern!(py, "headers"))?;
    let raw_causes = m.getattr(pyo3::intern!(py, "causes"))?;
    if !sequence(raw_headers.clone()) || !sequence(raw_causes.clone()) {
        return Ok(None);
    }
    let mut headers = Vec::new();
    for h in raw_headers.try_iter()? {
        let h = h?;
        let k = or_none!(h.get_item(0));
        let v = or_none!(h.get_item(1));
        if h.len().ok() != Some(2) {
            return Ok(None);
        }
        let k = or_none!(k.downcast_into::<PyString>());
        let v = or_none!(bytes_or_none(v));
        headers.push((k, v));
    }
    let mut causes = Vec::new();
    for c in raw_causes.try_iter()? {
        let c = c?;
        if c.len().ok() != Some(2) {
            return Ok(None);
        }
        let ch = or_none!(c.get_item(0));
        let p = or_none!(c.get_item(1));
        let ch = or_none!(channel_of_object(py, &ch));
        let p = or_none!(p.extract::<i64>());
        causes.push((ch, p));
    }
    Ok(Some((timestamp, key, value, headers, causes)))
}

/// encode_held(m, /)
/// --
///
/// Encode a held message as a version-1 blob (native
/// :func:`parsley.engine.state_codec.reference_encode_held`: same bytes, same errors).
#[pyfunction]
pub fn encode_held<'py>(py: Python<'py>, m: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(Some((timestamp, key, value, headers, causes))) = held_parts(py, m) {
        let mut texts: Vec<(&str, Option<&[u8]>)> = Vec::with_capacity(headers.len());
        let mut ok = true;
        for (k, v) in &headers {
            match k.to_str() {
                Ok(s) => texts.push((s, v.as_ref().map(|b| b.as_bytes()))),
                Err(_) => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            let blob = state_codec::encode_held_parts(
                timestamp,
                key.as_ref().map(|b| b.as_bytes()),
                value.as_ref().map(|b| b.as_bytes()),
                &texts,
                &causes,
            );
            return Ok(PyBytes::new(py, &blob).into_any());
        }
    }
    REFERENCE_ENCODE_HELD
        .import(py, MODULE, "reference_encode_held")?
        .call1((m,))
}

fn uuid_object<'py>(py: Python<'py>, topic: &[u8; 16]) -> PyResult<Bound<'py, PyAny>> {
    let kwargs = PyDict::new(py);
    kwargs.set_item("bytes", PyBytes::new(py, topic))?;
    UUID_TYPE
        .import(py, "uuid", "UUID")?
        .call((), Some(&kwargs))
}

fn long_map<'py>(py: Python<'py>, entries: &[(Channel, i64)]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for ((_, p), ch) in entries.iter().zip(channel_objects(py, entries)?) {
        d.set_item(ch.bind(py), *p)?;
    }
    Ok(d)
}

/// load_image(items, /)
/// --
///
/// Parse and validate every entry of one task's ordering state from an iterable of
/// ``(key, value)`` (native :func:`parsley.engine.state_codec.reference_load_image`: the
/// same ``OrderingImage`` and the same ``UNKNOWN_ORDERING_STATE_FORMAT`` refusals, held
/// blobs validated in Rust as they stream by, only their positions kept).
#[pyfunction]
pub fn load_image<'py>(py: Python<'py>, items: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let mut loader = ImageLoader::new();
    for item in items.try_iter()? {
        let item = item?;
        let (key, value) = match item.downcast::<PyTuple>() {
            Ok(t) if t.len() == 2 => (t.get_item(0)?, t.get_item(1)?),
            _ => {
                let mut it = item.try_iter()?;
                let k = it.next().ok_or_else(|| {
                    pyo3::exceptions::PyValueError::new_err("not enough values to unpack")
                })??;
                let v = it.next().ok_or_else(|| {
                    pyo3::exceptions::PyValueError::new_err("not enough values to unpack")
                })??;
                (k, v)
            }
        };
        with_bytes(py, &key, |k| {
            with_bytes(py, &value, |v| {
                loader.push(k, v);
                Ok(())
            })
        })?;
    }
    let image = loader.finish().map_err(|d| unknown_format(py, &d))?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("has_version", image.has_version)?;
    kwargs.set_item("fed", long_map(py, &image.fed.entries)?)?;
    kwargs.set_item("frontier", long_map(py, &image.frontier.entries)?)?;
    kwargs.set_item("past", long_map(py, &image.past.entries)?)?;
    let names = PyDict::new(py);
    for (name, topic) in &image.names.entries {
        names.set_item(name, uuid_object(py, topic)?)?;
    }
    kwargs.set_item("names", names)?;
    let held = PyDict::new(py);
    for (ch, positions) in &image.held.entries {
        held.set_item(channel_object(py, ch)?, PyList::new(py, positions)?)?;
    }
    kwargs.set_item("held", held)?;
    ORDERING_IMAGE
        .import(py, MODULE, "OrderingImage")?
        .call((), Some(&kwargs))
}

/// Register the ordering-state codec's functions on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_held, m)?)?;
    m.add_function(wrap_pyfunction!(validate_held, m)?)?;
    m.add_function(wrap_pyfunction!(encode_held, m)?)?;
    m.add_function(wrap_pyfunction!(load_image, m)?)?;
    Ok(())
}
