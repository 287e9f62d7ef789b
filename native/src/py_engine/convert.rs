//! Conversions at the Python boundary of `EngineCore`: bytes, `ChannelId`s, the
//! headers of a received record split by role, and `start` entries, with the reference's
//! errors.

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};

use crate::engine::{header_role, HeaderRole, RESERVED_PREFIX};
use crate::wire::{Channel, TopicId};

pub(super) fn bytes_of<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    match obj.downcast::<PyBytes>() {
        Ok(b) => Ok(b.clone()),
        Err(_) => {
            let builtins = obj.py().import("builtins")?;
            Ok(builtins
                .getattr("bytes")?
                .call1((obj,))?
                .downcast_into::<PyBytes>()?)
        }
    }
}

pub(super) fn optional_bytes<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    if obj.is_none() {
        Ok(None)
    } else {
        bytes_of(obj).map(Some)
    }
}

/// The channel a Python `ChannelId` names, or `None` for anything else.
pub(super) fn channel_of(obj: &Bound<'_, PyAny>) -> Option<Channel> {
    let py = obj.py();
    let topic = obj
        .getattr(intern!(py, "topic_id"))
        .ok()?
        .getattr(intern!(py, "bytes"))
        .ok()?;
    let raw = topic.downcast::<PyBytes>().ok()?.as_bytes();
    let topic: TopicId = raw.try_into().ok()?;
    let partition: i32 = obj.getattr(intern!(py, "partition")).ok()?.extract().ok()?;
    Some(Channel { topic, partition })
}

/// `(channel, position)` entries of a dict of `ChannelId` -> int; `what` names a bad key.
pub(super) fn channel_entries(d: &Bound<'_, PyDict>, what: &str) -> PyResult<Vec<(Channel, i64)>> {
    let mut out = Vec::with_capacity(d.len());
    for (k, v) in d.iter() {
        let ch =
            channel_of(&k).ok_or_else(|| PyValueError::new_err(format!("bad {what} channel")))?;
        out.push((ch, v.extract()?));
    }
    Ok(out)
}

/// A record's headers split at receipt: the causes header's value, and the application's
/// headers (`headers` itself when nothing was removed and it is a tuple).
pub(super) struct Split<'py> {
    pub(super) causes: SplitCauses<'py>,
    pub(super) app: Bound<'py, PyAny>,
}

pub(super) enum SplitCauses<'py> {
    Absent,
    Duplicate,
    Value(Bound<'py, PyAny>),
}

/// `key, value = h` as Python unpacks it (same errors), for a header that is not a
/// 2-tuple; returns the pair.
pub(super) fn unpack_pair<'py>(
    py: Python<'py>,
    h: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let code = std::ffi::CString::new("lambda h: [(k, v) for k, v in (h,)][0]")
        .expect("no NUL in the unpacking lambda");
    let unpack = py.eval(&code, None, None)?;
    Ok(unpack.call1((h,))?.downcast_into::<PyTuple>()?)
}

/// Split a record's headers by `crate::engine::header_role`, in one pass.
pub(super) fn split_headers<'py>(
    py: Python<'py>,
    headers: &Bound<'py, PyAny>,
) -> PyResult<Split<'py>> {
    let n = headers.len()?;
    if n == 0 {
        return Ok(Split {
            causes: SplitCauses::Absent,
            app: PyTuple::empty(py).into_any(),
        });
    }
    let mut causes = SplitCauses::Absent;
    let mut reserved = false;
    // Allocated at the first application header only: a relay's records carry none.
    let mut kept: Vec<Bound<'py, PyAny>> = Vec::new();
    for h in headers.try_iter()? {
        let h = h?;
        let (k, v) = match h.downcast::<PyTuple>() {
            Ok(t) if t.len() == 2 => (t.get_item(0)?, Some(t.clone())),
            // Anything else is unpacked as the reference does (`key, value = h`),
            // so a wrong arity raises the same error.
            _ => (unpack_pair(py, &h)?.get_item(0)?, None),
        };
        let role = match k.downcast::<PyString>() {
            Ok(t) => header_role(t.to_str()?),
            // A non-str key never equals the causes key; `startswith` raises what the
            // reference's `key.startswith(...)` raises.
            Err(_) => {
                let prefix = RESERVED_PREFIX;
                if k.call_method1(intern!(py, "startswith"), (prefix,))?
                    .is_truthy()?
                {
                    HeaderRole::Reserved
                } else {
                    HeaderRole::Application
                }
            }
        };
        match role {
            HeaderRole::Causes => {
                if let SplitCauses::Value(_) = causes {
                    causes = SplitCauses::Duplicate;
                    break;
                }
                causes = SplitCauses::Value(match v {
                    Some(t) => t.get_item(1)?,
                    None => h.get_item(1)?,
                });
            }
            HeaderRole::Reserved => reserved = true,
            HeaderRole::Application => kept.push(h),
        }
    }
    let found = !matches!(causes, SplitCauses::Absent);
    let app = if found || reserved {
        if kept.is_empty() {
            PyTuple::empty(py).into_any()
        } else {
            PyTuple::new(py, kept)?.into_any()
        }
    } else if headers.is_instance_of::<PyTuple>() {
        headers.clone()
    } else {
        PyTuple::new(py, kept)?.into_any()
    };
    Ok(Split { causes, app })
}

/// A `start_positions` entry: the channel and its start position (>= 0, below 2^63).
pub(super) fn start_entry(
    py: Python<'_>,
    item: &Bound<'_, PyAny>,
) -> PyResult<(Option<Channel>, i64)> {
    let obj = item.get_item(0)?;
    let start_obj = item.get_item(1)?;
    let start: i64 = match start_obj.extract() {
        Ok(v) => v,
        Err(e) if e.is_instance_of::<PyOverflowError>(py) => {
            let text = obj.str()?.to_string();
            let bound = if start_obj.lt(0)? {
                "must be >= 0"
            } else {
                "must be below 2^63"
            };
            return Err(PyValueError::new_err(format!(
                "start position of {text} {bound}, got {}",
                start_obj.str()?
            )));
        }
        Err(e) => return Err(e),
    };
    if start < 0 {
        let text = obj.str()?.to_string();
        return Err(PyValueError::new_err(format!(
            "start position of {text} must be >= 0, got {start}"
        )));
    }
    Ok((channel_of(&obj), start))
}
