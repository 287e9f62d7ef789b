//! The worker's per-record path at the boundary, for the native core:
//!
//! * `split_errors`, the per-batch error filter (`workers/fetched.py` holds its
//!   pure-Python twin and documents the contract);
//! * `FastFrame.run`, the common case of a delivery batch handled in Rust
//!   (`workers/fastpath.py` documents what it covers and what it hands back to the
//!   Python handler frame; `workers/step.py` drives it).

use std::cell::Cell;
use std::collections::HashMap;
use std::time::Instant;

use pyo3::exceptions::PyException;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

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

/// Why `FastFrame.run` stopped before the end of the batch (the third element of its
/// result names the entry): see `workers/fastpath.py`.
const STOP_RECORD: u8 = 0; // the handler was not called: the Python frame runs the entry whole
const STOP_EFFECTS: u8 = 1; // the handler returned this object: the Python frame plans it
const STOP_RAISED: u8 = 2; // the handler raised this exception (an Exception)
const STOP_PRODUCE: u8 = 3; // produce() refused this planned send (nothing was queued)

/// `FastFrame.run`'s result: `(handled, sent, slowest_s, stop)`; `stop` is
/// `(index, kind, payload, spent_s)`, `spent_s` the time already spent on that entry.
type RunResult = (usize, usize, f64, Option<(usize, u8, PyObject, f64)>);

/// A received channel's plan: topic name, partition, handler, key and value decoders
/// (`None`: the built-in BYTES decoder, the identity on `bytes`).
struct InPlan {
    topic: Py<PyString>,
    partition: PyObject,
    handler: PyObject,
    decode_key: Option<PyObject>,
    decode_value: Option<PyObject>,
}

/// A declared output whose serdes are built in (bytes or None out, no headers hook):
/// topic name and key/value encoders (`None`: BYTES, the identity on `bytes`).
struct OutPlan {
    topic: Py<PyString>,
    encode_key: Option<PyObject>,
    encode_value: Option<PyObject>,
}

// SAFETY: Rust code reads and writes these fields (`Rc` counts, `Cell`s, maps) only
// while it holds the GIL: every method takes `Python<'_>` or runs under a PyO3
// borrow, nothing calls `allow_threads` (keep it so: with `Sync`, a closure over
// `self` inside `py.allow_threads` would now compile, and would be unsound), and the
// drop a cyclic garbage collection makes runs under the GIL too, on whichever thread
// triggered it. Python code that a method calls (a handler, sqlite3) may release the
// GIL, but then no Rust code of this object runs until it is taken back, and PyO3's
// borrow flag refuses a second `&mut`. The crate is built for the stable ABI (abi3),
// which no free-threaded CPython loads and PyO3 refuses to build for one, so the GIL
// is always there. `unsendable` would instead leak the object, with a RuntimeError printed,
// whenever a collection triggered on one of librdkafka's threads (an admin future
// resolved there runs Python) drops it.
unsafe impl Send for FastFrame {}
unsafe impl Sync for FastFrame {}

/// The common case of the handler frame and the step, per delivery batch.
#[pyclass(module = "parsley._native")]
struct FastFrame {
    inputs: HashMap<usize, InPlan>,
    outputs: HashMap<String, OutPlan>,
    frame: PyObject,
    state: PyObject,
    object_new: PyObject,
    delivery: Py<PyType>,
    effects: Py<PyType>,
    send: Py<PyType>,
    produce: PyObject,
    on_delivery: PyObject,
    causes_key: Py<PyString>,
    fields: Vec<Py<PyString>>,
    /// Entries handled and sends produced by the current (or last) `run` so far: what a
    /// `run` that raises had done (`partial`).
    handled: Cell<usize>,
    sent: Cell<usize>,
}

fn optional_decoder(py: Python<'_>, f: &Bound<'_, PyAny>) -> Option<PyObject> {
    // The BYTES decoder is the builtin `bytes` (parsley.serdes.decoder).
    if f.is(&py.get_type::<PyBytes>()) {
        None
    } else {
        Some(f.clone().unbind())
    }
}

/// Calls `f(value)` unless `f` is the identity on bytes and `value` is bytes or None;
/// `Ok(None)`: the value needs the Python path (not bytes for an identity decoder).
fn coded<'py>(
    f: &Option<PyObject>,
    value: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if value.is_none() {
        return Ok(Some(value.clone()));
    }
    match f {
        None => {
            if value.is_exact_instance_of::<PyBytes>() {
                Ok(Some(value.clone()))
            } else {
                Ok(None)
            }
        }
        Some(f) => Ok(Some(f.bind(value.py()).call1((value,))?)),
    }
}

#[pymethods]
impl FastFrame {
    /// `FastFrame(inputs, outputs, frame, state, classes, produce, on_delivery, causes_key)`:
    /// see `workers/fastpath.py`, which builds it from a `HandlerFrame`.
    ///
    /// `inputs`: `{id(channel): (topic, partition, handler, decode_key, decode_value)}`;
    /// `outputs`: `{name: (topic, encode_key, encode_value)}` for outputs whose serdes are
    /// built in (`None` for a BYTES encoder); `classes`: `(Delivery, Effects, Send)`.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        inputs: &Bound<'_, PyDict>,
        outputs: &Bound<'_, PyDict>,
        frame: PyObject,
        state: PyObject,
        classes: (Py<PyType>, Py<PyType>, Py<PyType>),
        produce: PyObject,
        on_delivery: PyObject,
        causes_key: Py<PyString>,
    ) -> PyResult<Self> {
        let mut ins = HashMap::new();
        for (k, v) in inputs.iter() {
            let id: usize = k.extract()?;
            let t = v.downcast::<PyTuple>()?;
            ins.insert(id, InPlan {
                topic: t.get_item(0)?.downcast::<PyString>()?.clone().unbind(),
                partition: t.get_item(1)?.unbind(),
                handler: t.get_item(2)?.unbind(),
                decode_key: optional_decoder(py, &t.get_item(3)?),
                decode_value: optional_decoder(py, &t.get_item(4)?),
            });
        }
        let mut outs = HashMap::new();
        for (k, v) in outputs.iter() {
            let name: String = k.extract()?;
            let t = v.downcast::<PyTuple>()?;
            let enc = |i: usize| -> PyResult<Option<PyObject>> {
                let f = t.get_item(i)?;
                Ok(if f.is_none() { None } else { Some(f.unbind()) })
            };
            outs.insert(name, OutPlan {
                topic: t.get_item(0)?.downcast::<PyString>()?.clone().unbind(),
                encode_key: enc(1)?,
                encode_value: enc(2)?,
            });
        }
        let fields = ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
            .iter()
            .map(|n| PyString::intern(py, n).unbind())
            .collect();
        Ok(FastFrame {
            inputs: ins,
            outputs: outs,
            frame,
            state,
            object_new: py.import("builtins")?.getattr("object")?.getattr("__new__")?.unbind(),
            delivery: classes.0,
            effects: classes.1,
            send: classes.2,
            produce,
            on_delivery,
            causes_key,
            fields,
            handled: Cell::new(0),
            sent: Cell::new(0),
        })
    }

    /// `(handled, sent)` of the current or last `run` so far: what a `run` that raised
    /// (a `BaseException` that is not an `Exception`, or a failure of its own) had done.
    fn partial(&self) -> (usize, usize) {
        (self.handled.get(), self.sent.get())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for plan in self.inputs.values() {
            visit.call(&plan.handler)?;
            visit.call(&plan.partition)?;
            if let Some(f) = &plan.decode_key {
                visit.call(f)?;
            }
            if let Some(f) = &plan.decode_value {
                visit.call(f)?;
            }
        }
        for out in self.outputs.values() {
            if let Some(f) = &out.encode_key {
                visit.call(f)?;
            }
            if let Some(f) = &out.encode_value {
                visit.call(f)?;
            }
        }
        visit.call(&self.frame)?;
        visit.call(&self.state)?;
        visit.call(&self.produce)?;
        visit.call(&self.on_delivery)?;
        Ok(())
    }

    /// Drop every reference `__traverse__` reports, so a reference cycle through this
    /// object (a handler that holds its own step, say) can be collected: the plans
    /// go, and the frame, state, `produce` and `on_delivery` become `None`. A cleared
    /// object is never run again (the collector clears only unreachable objects).
    fn __clear__(&mut self) {
        Python::with_gil(|py| {
            self.inputs.clear();
            self.outputs.clear();
            self.frame = py.None();
            self.state = py.None();
            self.produce = py.None();
            self.on_delivery = py.None();
        });
    }

    /// Handle the entries of `batch` (`ProcessEngine.deliver_batch`'s tuples) from
    /// `start`, in order, until one needs the Python frame.
    ///
    /// Returns `(handled, sent, slowest_s, stop)`: entries fully handled (their one send
    /// produced, or nothing to send), sends produced, the longest one entry took (s), and
    /// `None` at the end of the batch or `(index, kind, payload, spent_s)` for the entry
    /// that needs the Python frame (kinds and payloads: `workers/fastpath.py`; `spent_s`
    /// the time already spent on it, s).
    ///
    /// Raises `TypeError` when `batch` is not a list.
    ///
    /// Raises what is not an `Exception` (KeyboardInterrupt, SystemExit) as it is.
    fn run<'py>(
        &self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
        start: usize,
    ) -> PyResult<RunResult> {
        // Reset first: partial() must never report an earlier call's counts.
        self.handled.set(0);
        self.sent.set(0);
        let batch = batch.downcast::<PyList>()?;
        let frame = self.frame.bind(py);
        let latched = intern!(py, "_latched");
        let sends_name = intern!(py, "sends");
        let writes_name = intern!(py, "writes");
        let channel_name = intern!(py, "channel");
        let name_name = intern!(py, "name");
        let key_name = intern!(py, "key");
        let value_name = intern!(py, "value");
        let headers_name = intern!(py, "headers");
        let ts_name = intern!(py, "timestamp_ms");
        let on_delivery_name = intern!(py, "on_delivery");
        let timestamp_name = intern!(py, "timestamp");
        let delivery_type = self.delivery.bind(py);
        let effects_type = self.effects.bind(py);
        let send_type = self.send.bind(py);
        let produce = self.produce.bind(py);
        let mut handled = 0usize;
        let mut sent = 0usize;
        let mut slowest = 0f64;
        let n = batch.len();
        let mut i = start;
        while i < n {
            let began = Instant::now();
            // Hand entry `i` back to the Python frame (see workers/fastpath.py). The counters
            // are copied here: no stop may follow an update of them in this iteration.
            let stop = move |kind: u8, payload: PyObject| -> PyResult<RunResult> {
                Ok((handled, sent, slowest, Some((i, kind, payload, began.elapsed().as_secs_f64()))))
            };
            let entry = batch.get_item(i)?;
            let entry = entry.downcast::<PyTuple>()?;
            let ch = entry.get_item(0)?;
            let plan = match self.inputs.get(&(ch.as_ptr() as usize)) {
                Some(p) => p,
                None => return stop(STOP_RECORD, py.None()),
            };
            let position = entry.get_item(1)?;
            let ts = entry.get_item(2)?;
            let headers = entry.get_item(5)?;
            // Records without application headers only (the relay's case); the Python
            // frame strips and checks any others.
            let no_headers = headers.downcast::<PyTuple>().map(|t| t.is_empty()).unwrap_or(false);
            if !no_headers || !frame.getattr(latched)?.is_none() {
                return stop(STOP_RECORD, py.None());
            }
            // -- decode (pure: on a failure the Python frame decodes again and refuses)
            let key = match coded(&plan.decode_key, &entry.get_item(3)?) {
                Ok(Some(k)) => k,
                _ => return stop(STOP_RECORD, py.None()),
            };
            let value = match coded(&plan.decode_value, &entry.get_item(4)?) {
                Ok(Some(v)) => v,
                _ => return stop(STOP_RECORD, py.None()),
            };
            // -- the Delivery, slot by slot as its own __init__ would
            let delivery = self.object_new.bind(py).call1((delivery_type,))?;
            let values: [&Bound<'_, PyAny>; 7] = [
                plan.topic.bind(py).as_any(),
                plan.partition.bind(py),
                &position,
                &ts,
                &key,
                &value,
                &headers,
            ];
            for (name, value) in self.fields.iter().zip(values.iter()) {
                // SAFETY: three valid object pointers, held by bound references for the call.
                let rc = unsafe {
                    pyo3::ffi::PyObject_GenericSetAttr(
                        delivery.as_ptr(),
                        name.as_ptr(),
                        value.as_ptr(),
                    )
                };
                if rc != 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            // -- the handler
            let effects = match plan.handler.bind(py).call1((delivery, self.state.bind(py))) {
                Ok(e) => e,
                Err(err) => {
                    if err.is_instance_of::<PyException>(py) {
                        let exc = err.into_value(py).into_any();
                        return stop(STOP_RAISED, exc);
                    }
                    return Err(err);
                }
            };
            let to_python = move |effects: Bound<'py, PyAny>| stop(STOP_EFFECTS, effects.unbind());
            if !effects.get_type().is(effects_type) || !frame.getattr(latched)?.is_none() {
                return to_python(effects);
            }
            let writes = effects.getattr(writes_name)?;
            let sends = effects.getattr(sends_name)?;
            let (writes, sends) = match (writes.downcast::<PyTuple>(), sends.downcast::<PyTuple>()) {
                (Ok(w), Ok(s)) => (w.clone(), s.clone()),
                _ => return to_python(effects),
            };
            if !writes.is_empty() || sends.len() > 1 {
                return to_python(effects);
            }
            if sends.len() == 1 {
                let send = sends.get_item(0)?;
                if !send.get_type().is(send_type) {
                    return to_python(effects);
                }
                let name = send.getattr(channel_name)?.getattr(name_name)?;
                let out = match name.downcast::<PyString>() {
                    Ok(s) => match self.outputs.get(s.to_str()?) {
                        Some(o) => o,
                        None => return to_python(effects),
                    },
                    Err(_) => return to_python(effects),
                };
                let send_headers = send.getattr(headers_name)?;
                if !send_headers.downcast::<PyTuple>().map(|t| t.is_empty()).unwrap_or(false) {
                    return to_python(effects);
                }
                // Serializers are pure and their failures are refusals the Python frame
                // words: on anything but bytes or None out, it plans the send again.
                let k = match coded(&out.encode_key, &send.getattr(key_name)?) {
                    Ok(Some(k)) if k.is_none() || k.is_exact_instance_of::<PyBytes>() => k,
                    _ => return to_python(effects),
                };
                let v = match coded(&out.encode_value, &send.getattr(value_name)?) {
                    Ok(Some(v)) if v.is_none() || v.is_exact_instance_of::<PyBytes>() => v,
                    _ => return to_python(effects),
                };
                if !frame.getattr(latched)?.is_none() {
                    return to_python(effects);
                }
                let own_ts = send.getattr(ts_name)?;
                let send_ts = if own_ts.is_none() { ts.clone() } else { own_ts };
                let stamp = PyTuple::new(py, [self.causes_key.bind(py).as_any(), &entry.get_item(6)?])?;
                let stamped = PyList::new(py, [stamp])?;
                let kwargs = PyDict::new(py);
                kwargs.set_item(on_delivery_name, self.on_delivery.bind(py))?;
                kwargs.set_item(timestamp_name, &send_ts)?;
                kwargs.set_item(headers_name, &stamped)?;
                if let Err(err) = produce.call((out.topic.bind(py), &v, &k), Some(&kwargs)) {
                    if !err.is_instance_of::<PyException>(py) {
                        return Err(err);
                    }
                    let planned = PyTuple::new(py, [
                        out.topic.bind(py).as_any().clone(),
                        k,
                        v,
                        stamped.into_any(),
                        send_ts,
                    ])?;
                    return stop(STOP_PRODUCE, planned.into_any().unbind());
                }
                sent += 1;
                self.sent.set(sent);
            }
            handled += 1;
            self.handled.set(handled);
            let took = began.elapsed().as_secs_f64();
            if took > slowest {
                slowest = took;
            }
            i += 1;
        }
        Ok((handled, sent, slowest, None))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(split_errors, m)?)?;
    m.add_class::<FastFrame>()?;
    Ok(())
}
