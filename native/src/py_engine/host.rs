//! The Python side of `EngineCore`: the payloads and Python objects it keeps, and
//! `PyHost`, the engine core's host (the ordering store, the warning callback,
//! `describe_channel` for warnings), with the mapping of core faults to exceptions (a
//! refusal's detail written by `parsley.engine.details`).

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};

use super::convert::{bytes_of, channel_of, optional_bytes};
use crate::engine::fx::FxMap;
use crate::engine::{Core, Fault, HeldParts, Host, Refusal};
use crate::state_codec::HeldRef;
use crate::wire::Channel;

const OBJECT_CACHE_ENTRIES: usize = 4096;
const CHANNEL_CACHE_ENTRIES: usize = 65_536;

/// A held message's payload as the application gave it: key, value, headers (a tuple of
/// `(str, bytes | None)` pairs, `parsley.*` ones removed).
pub(super) struct PyPayload {
    pub(super) key: PyObject,
    pub(super) value: PyObject,
    pub(super) headers: PyObject,
}

/// Python objects the engine calls: refusals, detail rendering, results.
pub(super) struct Refs {
    pub(super) error: PyObject,
    pub(super) reason: PyObject,
    pub(super) describe_channel: PyObject,
    pub(super) details: PyObject,
    pub(super) describe_key: PyObject,
    pub(super) cached_channel: PyObject,
    pub(super) deliverable: PyObject,
    pub(super) deliverable_fields: Vec<Py<PyString>>,
    pub(super) object_new: PyObject,
    pub(super) accepted: PyObject,
    pub(super) dropped: PyObject,
}

/// The adapter's Python-side state, apart from the core so both can be borrowed at once.
#[derive(Default)]
pub(super) struct PyState {
    pub(super) refs: Option<Refs>,
    pub(super) store: Option<PyObject>,
    pub(super) on_warning: Option<PyObject>,
    pub(super) labels: Option<PyObject>,
    /// The host's own `ChannelId` of each received channel, by rank and by channel.
    pub(super) py_by_rank: Vec<PyObject>,
    pub(super) received: FxMap<Channel, PyObject>,
    /// `ChannelId` objects by identity -> rank (hosts reuse theirs), and built ones.
    pub(super) obj_rank: FxMap<usize, (PyObject, Option<usize>)>,
    pub(super) py_channels: FxMap<Channel, PyObject>,
    /// The `parsley.causes` bytes object of the core's header generation.
    pub(super) header: Option<(u64, Py<PyBytes>)>,
}

/// The core's host for one call: the GIL token and the Python-side state.
pub(super) struct PyHost<'a, 'py> {
    pub(super) py: Python<'py>,
    pub(super) state: &'a mut PyState,
}

/// A blob the store returned, as `bytes`.
pub(super) struct PyBlob<'py>(Bound<'py, PyBytes>);

impl AsRef<[u8]> for PyBlob<'_> {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl PyState {
    pub(super) fn refs(&self) -> &Refs {
        self.refs
            .as_ref()
            .expect("EngineCore used before its setup")
    }

    /// The Python exception of a core fault.
    pub(super) fn error(&mut self, py: Python<'_>, fault: Fault<PyErr>) -> PyErr {
        match fault {
            Fault::Host(err) => err,
            Fault::Misuse(text) => PyRuntimeError::new_err(text),
            Fault::Refused(refusal) => {
                let made = self.detail(py, &refusal).and_then(|detail| {
                    let refs = self.refs();
                    let reason = refs.reason.bind(py).getattr(refusal.reason().name())?;
                    refs.error.bind(py).call1((reason, detail))
                });
                match made {
                    Ok(err) => PyErr::from_value(err),
                    Err(err) => err,
                }
            }
        }
    }

    /// A refusal's detail, written by the function of `parsley.engine.details` its
    /// variant names (the one text both engines give).
    fn detail(&mut self, py: Python<'_>, refusal: &Refusal) -> PyResult<String> {
        let names = match &self.labels {
            Some(l) => l.clone_ref(py),
            None => PyDict::new(py).into_any().unbind(),
        };
        let details = self.refs().details.clone_ref(py);
        let details = details.bind(py);
        let text = match refusal {
            Refusal::Undecodable {
                ch,
                position,
                diagnosis,
            } => {
                let ch = self.py_channel(py, ch)?;
                let args = (ch, names, *position, diagnosis.as_str());
                details.call_method1(intern!(py, "undecodable"), args)?
            }
            Refusal::HeaderOverBudget {
                ch,
                position,
                size,
                budget,
            } => {
                let ch = self.py_channel(py, ch)?;
                let args = (ch, names, *position, *size, *budget);
                details.call_method1(intern!(py, "header_over_budget"), args)?
            }
            Refusal::FrontierOverBudget {
                size,
                channels,
                budget,
            } => {
                let args = (*size, *channels, *budget);
                details.call_method1(intern!(py, "frontier_over_budget"), args)?
            }
            Refusal::EmissionOverBudget {
                size,
                channels,
                budget,
            } => {
                let args = (*size, *channels, *budget);
                details.call_method1(intern!(py, "emission_over_budget"), args)?
            }
            Refusal::FedAfterPosition {
                ch,
                position,
                fed_before,
            } => {
                let ch = self.py_channel(py, ch)?;
                let args = (ch, names, *position, *fed_before);
                details.call_method1(intern!(py, "fed_after_position"), args)?
            }
            Refusal::FedGoneChannel { ch, position } => {
                let ch = self.py_channel(py, ch)?;
                let args = (ch, names, *position);
                details.call_method1(intern!(py, "fed_gone_channel"), args)?
            }
            Refusal::CoveredPositionFed {
                ch,
                position,
                fed_up_to,
                floor,
            } => {
                let ch = self.py_channel(py, ch)?;
                let args = (ch, names, *position, *fed_up_to, *floor);
                details.call_method1(intern!(py, "covered_position_fed"), args)?
            }
            Refusal::CrossPartitionCause {
                ch,
                position,
                key,
                cause,
                cause_at,
            } => {
                let ch = self.py_channel(py, ch)?;
                let cause = self.py_channel(py, cause)?;
                let args = (ch, names, *position, key.as_str(), cause, *cause_at);
                details.call_method1(intern!(py, "cross_partition_cause"), args)?
            }
            Refusal::HeldBodyMissing { ch, position } => {
                let ch = self.py_channel(py, ch)?;
                let args = (ch, names, *position);
                details.call_method1(intern!(py, "held_body_missing"), args)?
            }
            Refusal::CorruptHeld { diagnosis } => return Ok(diagnosis.clone()),
        };
        text.extract()
    }

    /// The Python `ChannelId` of `ch` (the host's own object for a received channel).
    pub(super) fn py_channel(&mut self, py: Python<'_>, ch: &Channel) -> PyResult<PyObject> {
        if let Some(obj) = self.received.get(ch) {
            return Ok(obj.clone_ref(py));
        }
        if let Some(obj) = self.py_channels.get(ch) {
            return Ok(obj.clone_ref(py));
        }
        if self.py_channels.len() >= CHANNEL_CACHE_ENTRIES {
            self.py_channels.clear();
        }
        let obj = self
            .refs()
            .cached_channel
            .bind(py)
            .call1((PyBytes::new(py, &ch.topic), ch.partition))?
            .unbind();
        self.py_channels.insert(*ch, obj.clone_ref(py));
        Ok(obj)
    }

    /// The rank of a received `ChannelId` object, by identity first (hosts reuse theirs).
    pub(super) fn rank_of_obj(
        &mut self,
        core: &Core<PyPayload>,
        obj: &Bound<'_, PyAny>,
    ) -> Option<usize> {
        let key = obj.as_ptr() as usize;
        if let Some((_, r)) = self.obj_rank.get(&key) {
            return *r;
        }
        let r = channel_of(obj).and_then(|ch| core.rank_of(&ch));
        if self.obj_rank.len() >= OBJECT_CACHE_ENTRIES {
            self.obj_rank.clear();
        }
        self.obj_rank.insert(key, (obj.clone().unbind(), r));
        r
    }

    pub(super) fn causes_tuple<'py>(
        &mut self,
        py: Python<'py>,
        causes: &[(Channel, i64)],
    ) -> PyResult<Bound<'py, PyTuple>> {
        let mut items = Vec::with_capacity(causes.len());
        for (c, p) in causes {
            let obj = self.py_channel(py, c)?;
            items.push((obj, *p).into_pyobject(py)?);
        }
        PyTuple::new(py, items)
    }

    pub(super) fn map_dict<'py, 'c>(
        &mut self,
        py: Python<'py>,
        entries: impl Iterator<Item = (&'c Channel, i64)>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (c, p) in entries {
            d.set_item(self.py_channel(py, c)?, p)?;
        }
        Ok(d)
    }
}

impl<'py> Host for PyHost<'_, 'py> {
    type Payload = PyPayload;
    type Error = PyErr;
    type Blob = PyBlob<'py>;

    fn describe(&mut self, ch: &Channel, position: Option<i64>) -> String {
        let py = self.py;
        let state = &mut *self.state;
        let rendered = (|| -> PyResult<String> {
            let obj = state.py_channel(py, ch)?;
            let labels = match &state.labels {
                Some(l) => l.clone_ref(py).into_bound(py).into_any(),
                None => PyDict::new(py).into_any(),
            };
            state
                .refs()
                .describe_channel
                .bind(py)
                .call1((obj, labels, position))?
                .extract()
        })();
        rendered.unwrap_or_else(|e| format!("{ch:?} ({e})"))
    }

    fn describe_key(&mut self, payload: &PyPayload) -> PyResult<String> {
        let refs = self.state.refs();
        refs.describe_key
            .bind(self.py)
            .call1((payload.key.bind(self.py),))?
            .extract()
    }

    fn wants_warnings(&self) -> bool {
        self.state.on_warning.is_some()
    }

    fn warn(&mut self, text: String) -> PyResult<()> {
        if let Some(cb) = &self.state.on_warning {
            cb.bind(self.py).call1((text,))?;
        }
        Ok(())
    }

    fn held_blob(&mut self, key: &[u8]) -> PyResult<Option<PyBlob<'py>>> {
        let py = self.py;
        let store = self.state.store.as_ref().expect("store set").clone_ref(py);
        let blob = store
            .bind(py)
            .call_method1(intern!(py, "get"), (PyBytes::new(py, key),))?;
        if blob.is_none() {
            return Ok(None);
        }
        Ok(Some(PyBlob(bytes_of(&blob)?)))
    }

    fn payload(&mut self, held: &HeldRef<'_>) -> PyResult<PyPayload> {
        let py = self.py;
        let optional = |v: Option<&[u8]>| -> PyObject {
            match v {
                Some(b) => PyBytes::new(py, b).into_any().unbind(),
                None => py.None(),
            }
        };
        let mut headers = Vec::with_capacity(held.headers.len());
        for (k, v) in &held.headers {
            headers.push((PyString::new(py, k), optional(*v)).into_pyobject(py)?);
        }
        Ok(PyPayload {
            key: optional(held.key),
            value: optional(held.value),
            headers: PyTuple::new(py, headers)?.into_any().unbind(),
        })
    }

    fn lend_parts(
        &mut self,
        payload: &PyPayload,
        encode: &mut dyn FnMut(HeldParts<'_>),
    ) -> PyResult<()> {
        let py = self.py;
        let key = optional_bytes(payload.key.bind(py))?;
        let value = optional_bytes(payload.value.bind(py))?;
        let mut parts: Vec<(Bound<'_, PyString>, Option<Bound<'_, PyBytes>>)> = Vec::new();
        for h in payload.headers.bind(py).try_iter()? {
            let h = h?;
            let k = h.get_item(0)?.downcast_into::<PyString>()?;
            k.to_str()?; // checked here, in the order the parts are read
            let v = optional_bytes(&h.get_item(1)?)?;
            parts.push((k, v));
        }
        let mut headers: Vec<(&str, Option<&[u8]>)> = Vec::with_capacity(parts.len());
        for (k, v) in &parts {
            headers.push((k.to_str()?, v.as_ref().map(|b| b.as_bytes())));
        }
        encode(HeldParts {
            key: key.as_ref().map(|b| b.as_bytes()),
            value: value.as_ref().map(|b| b.as_bytes()),
            headers: &headers,
        });
        Ok(())
    }
}
