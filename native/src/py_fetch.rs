//! The worker's per-record path at the boundary, for the native core:
//!
//! * `split_errors`, the per-batch error filter (`workers/fetched.py` holds its
//!   pure-Python twin and documents the contract);
//! * `FastFrame.run`, the common case of a delivery batch handled in Rust
//!   (`workers/fastpath.py` documents what it covers and what it hands back to the
//!   Python handler frame; `workers/step.py` drives it).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::Instant;

use pyo3::exceptions::PyException;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use crate::py_effects::{
    alloc, check_allocatable, Slots, CHANNEL, EFFECTS_FIELDS, HEADERS, KEY, SENDS, SEND_FIELDS,
    TIMESTAMP_MS, VALUE, WRITES,
};
use crate::py_methods::Methods;

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
    let mut error = Methods::new(["error"]);
    let errors = PyList::empty(py);
    let mut first_error: Option<usize> = None;
    for (i, rec) in records.iter().enumerate() {
        if !error.call(&rec, 0)?.is_none() {
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
        } else if i == first || !error.call(&rec, 0)?.is_none() {
            errors.append(rec)?;
        } else {
            good.append(rec)?;
        }
    }
    Ok((good, errors))
}

/// Why `FastFrame.run` stopped before the end of the batch (the last element of its
/// result names the entry): see `workers/fastpath.py`.
const STOP_RECORD: u8 = 0; // the handler was not called: the Python frame runs the entry whole
const STOP_EFFECTS: u8 = 1; // the handler returned this object: the Python frame plans it
const STOP_RAISED: u8 = 2; // the handler raised this exception (an Exception)
const STOP_PRODUCE: u8 = 3; // produce() refused a planned send (nothing of it was queued)

/// The entry `FastFrame.run` hands back: `(index, kind, payload, spent_s)`, `spent_s` the
/// time already spent on that entry (on the run of a batch handler it starts).
type Stop = (usize, u8, PyObject, f64);

/// `FastFrame.run`'s result: `(handled, sent, calls, slowest_s, stop)`.
type RunResult = (usize, usize, usize, f64, Option<Stop>);

/// A received channel's plan: topic name, partition, handler, key and value decoders
/// (`None`: the built-in BYTES decoder, the identity on `bytes`), and the batch
/// handler's `max_records` (`None`: a per-record handler).
struct InPlan {
    topic: Py<PyString>,
    partition: PyObject,
    handler: PyObject,
    decode_key: Option<PyObject>,
    decode_value: Option<PyObject>,
    max_records: Option<usize>,
}

/// A declared output whose serdes are built in (bytes or None out, no headers hook):
/// topic name and key/value encoders (`None`: BYTES, the identity on `bytes`).
struct OutPlan {
    topic: Py<PyString>,
    encode_key: Option<PyObject>,
    encode_value: Option<PyObject>,
}

/// A send planned in Rust, ready to produce: its output, the serialized key and value
/// (`bytes` or `None`) and its timestamp (ms; its own, else the delivery's default).
struct Planned<'a, 'py> {
    out: &'a OutPlan,
    key: Bound<'py, PyAny>,
    value: Bound<'py, PyAny>,
    ts: Bound<'py, PyAny>,
}

// SAFETY: Rust code reads and writes these fields (`Rc` counts, `Cell`s, maps) only
// while it holds the GIL: every method takes `Python<'_>` or runs under a PyO3
// borrow, nothing calls `allow_threads` (keep it so: with `Sync`, a closure over
// `self` inside `py.allow_threads` would now compile, and would be unsound), and the
// drop a cyclic garbage collection makes runs under the GIL too, on whichever thread
// triggered it. Python code that a method calls (a handler, sqlite3) may release the
// GIL, but then no Rust code of this object runs until it is taken back, and PyO3's
// borrow flag refuses a second `&mut`. The module does not declare itself free of the
// GIL (`#[pymodule]` keeps PyO3's default `gil_used = true`), so a free-threaded
// CPython turns its GIL back on when it imports the module (`PYTHON_GIL=0` forcing it
// off is the user's own unsafety, as for any such module), so the GIL is always there.
// `unsendable` would instead leak the object, with a RuntimeError printed,
// whenever a collection triggered on one of librdkafka's threads (an admin future
// resolved there runs Python) drops it.
unsafe impl Send for FastFrame {}
unsafe impl Sync for FastFrame {}

/// How many channel objects `FastFrame::output` remembers, the oldest forgotten first (a
/// handler that makes a new `Channel` per send reads each one's name).
const OUT_CACHE: usize = 8;

/// The common case of the handler frame and the step, per delivery batch.
#[pyclass(module = "parsley._native")]
struct FastFrame {
    inputs: HashMap<usize, InPlan>,
    /// Declared outputs with built-in serdes, and their index by topic name.
    outputs: Vec<OutPlan>,
    by_name: HashMap<String, usize>,
    /// Channel objects of exactly the class `Channel` seen in sends, and the index of
    /// their output: a handler sends to the same few channel objects, and a `Channel` is
    /// frozen, so its name is read once ([`OUT_CACHE`] at most, the oldest forgotten).
    out_cache: RefCell<Vec<(PyObject, usize)>>,
    channel: Py<PyType>,
    frame: PyObject,
    state: PyObject,
    delivery: Py<PyType>,
    effects: Py<PyType>,
    send: Py<PyType>,
    produce: PyObject,
    on_delivery: PyObject,
    causes_key: Py<PyString>,
    delivery_fields: Slots,
    effects_fields: Slots,
    send_fields: Slots,
    /// Entries handled, sends produced and batch-handler calls made (counted once the
    /// handler was called, returned or raised) by the current (or last) `run` so far: what
    /// a `run` that raises had done (`partial`).
    handled: Cell<usize>,
    sent: Cell<usize>,
    calls: Cell<usize>,
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

/// Whether `err` is an `Exception`: a serde's failure, which the Python frame decodes or
/// serializes again and refuses. Anything else (KeyboardInterrupt, SystemExit) must be
/// raised as it is: handing the entry back would lose it.
fn is_exception(py: Python<'_>, err: &PyErr) -> bool {
    err.is_instance_of::<PyException>(py)
}

/// Whether `value` is an empty tuple (a record's or a send's headers: none).
fn no_headers(value: &Bound<'_, PyAny>) -> bool {
    value.downcast::<PyTuple>().map(|t| t.is_empty()).unwrap_or(false)
}

/// Whether `entry` (a `deliver_batch` tuple) may be plain as far as can be told without
/// calling a decoder: no application headers, and a key and value that `plan`'s identity
/// (BYTES) decoders take, `bytes` or `None`. `FastFrame::decoded` checks the same again.
fn shaped(plan: &InPlan, entry: &Bound<'_, PyTuple>) -> PyResult<bool> {
    if !no_headers(&entry.get_item(5)?) {
        return Ok(false);
    }
    let takes = |f: &Option<PyObject>, v: Bound<'_, PyAny>| {
        f.is_some() || v.is_none() || v.is_exact_instance_of::<PyBytes>()
    };
    Ok(takes(&plan.decode_key, entry.get_item(3)?) && takes(&plan.decode_value, entry.get_item(4)?))
}

/// The end (exclusive) of the run of a batch handler's entries from `start`: consecutive
/// entries of `batch[start]`'s channel object, at most `limit`. The same rule as
/// `workers.step._run_end`, which the step applies to the runs handed back.
fn run_end(batch: &Bound<'_, PyList>, start: usize, limit: usize) -> PyResult<usize> {
    let ch = batch.get_item(start)?.downcast::<PyTuple>()?.get_item(0)?;
    let stop = batch.len().min(start.saturating_add(limit));
    let mut end = start + 1;
    while end < stop && batch.get_item(end)?.downcast::<PyTuple>()?.get_item(0)?.is(&ch) {
        end += 1;
    }
    Ok(end)
}

impl FastFrame {
    /// Whether the frame holds a latched refusal (`HandlerFrame._latched`).
    fn latched(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(!self.frame.bind(py).getattr(intern!(py, "_latched"))?.is_none())
    }

    /// Key and value of `entry` (a `deliver_batch` tuple) through `plan`'s decoders, or
    /// `None` when the entry is not plain: it has application headers, or a value is not
    /// what the decoder takes, or a decode failed with an `Exception` (built-in decoders
    /// are pure: the Python frame decodes again and refuses, `HandlerFrame._decode`).
    /// Raises what a decoder raises that is not an `Exception` (KeyboardInterrupt).
    fn decoded<'py>(
        &self,
        plan: &InPlan,
        entry: &Bound<'py, PyTuple>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
        // Records without application headers only (the relay's case); the Python
        // frame strips and checks any others.
        if !no_headers(&entry.get_item(5)?) {
            return Ok(None);
        }
        let key = match coded(&plan.decode_key, &entry.get_item(3)?) {
            Ok(Some(k)) => k,
            Err(err) if !is_exception(entry.py(), &err) => return Err(err),
            _ => return Ok(None),
        };
        let value = match coded(&plan.decode_value, &entry.get_item(4)?) {
            Ok(Some(v)) => v,
            Err(err) if !is_exception(entry.py(), &err) => return Err(err),
            _ => return Ok(None),
        };
        Ok(Some((key, value)))
    }

    /// The `parsley.Delivery` of `entry` with the decoded `key` and `value`, allocated as
    /// `object.__new__` does and set slot by slot as `parsley.effects.new_delivery` does.
    fn delivery<'py>(
        &self,
        py: Python<'py>,
        plan: &InPlan,
        entry: &Bound<'py, PyTuple>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let delivery = alloc(py, self.delivery.bind(py))?;
        let position = entry.get_item(1)?;
        let ts = entry.get_item(2)?;
        let headers = entry.get_item(5)?;
        let values: [&Bound<'_, PyAny>; 7] = [
            plan.topic.bind(py).as_any(),
            plan.partition.bind(py),
            &position,
            &ts,
            key,
            value,
            &headers,
        ];
        self.delivery_fields.set_all(&delivery, &values)?;
        Ok(delivery)
    }

    /// The output a send's `channel` names (matched by name, as `HandlerFrame.plan`
    /// does), or `None` when it names none with built-in serdes (or its name is not a
    /// `str`). A channel object of exactly the class `Channel` is remembered.
    fn output(&self, py: Python<'_>, channel: &Bound<'_, PyAny>) -> PyResult<Option<&OutPlan>> {
        if let Some(&(_, i)) = self.out_cache.borrow().iter().find(|(c, _)| c.is(channel)) {
            return Ok(Some(&self.outputs[i]));
        }
        let name = channel.getattr(intern!(py, "name"))?;
        let i = match name.downcast::<PyString>() {
            Ok(s) => match self.by_name.get(s.to_str()?) {
                Some(&i) => i,
                None => return Ok(None),
            },
            Err(_) => return Ok(None),
        };
        if channel.get_type().is(self.channel.bind(py)) {
            let evicted = {
                let mut cache = self.out_cache.borrow_mut();
                let oldest = if cache.len() == OUT_CACHE { Some(cache.remove(0)) } else { None };
                cache.push((channel.clone().unbind(), i));
                oldest
            };
            // Dropped once the borrow has ended: a decref may run Python code.
            drop(evicted);
        }
        Ok(Some(&self.outputs[i]))
    }

    /// The sends of `effects` planned as `HandlerFrame.plan` plans them, or `None` when
    /// the Python frame must plan them (then it does all of its checks and refusals again:
    /// built-in serializers are pure). Plain: an exact `parsley.Effects`, no latched
    /// refusal, no store write, at most `max_sends` sends, each an exact `parsley.Send`
    /// without headers to a declared output whose serdes are built in and whose key and
    /// value serialize to `bytes` or `None`; a send without a timestamp gets `default_ts`
    /// (ms). Every send is planned before any is produced, as the Python frame plans the
    /// whole `Effects` before the step writes any of it. Raises what a serializer raises
    /// that is not an `Exception` (KeyboardInterrupt), as the Python frame does.
    fn plan_sends<'a, 'py>(
        &'a self,
        py: Python<'py>,
        effects: &Bound<'py, PyAny>,
        default_ts: &Bound<'py, PyAny>,
        max_sends: usize,
    ) -> PyResult<Option<Vec<Planned<'a, 'py>>>> {
        if !effects.get_type().is(self.effects.bind(py)) || self.latched(py)? {
            return Ok(None);
        }
        let writes = self.effects_fields.get(effects, WRITES)?;
        let sends = self.effects_fields.get(effects, SENDS)?;
        let (writes, sends) = match (writes.downcast::<PyTuple>(), sends.downcast::<PyTuple>()) {
            (Ok(w), Ok(s)) => (w.clone(), s.clone()),
            _ => return Ok(None),
        };
        if !writes.is_empty() || sends.len() > max_sends {
            return Ok(None);
        }
        let send_type = self.send.bind(py);
        let mut planned = Vec::with_capacity(sends.len());
        for send in sends.iter() {
            if !send.get_type().is(send_type) {
                return Ok(None);
            }
            let out = match self.output(py, &self.send_fields.get(&send, CHANNEL)?)? {
                Some(o) => o,
                None => return Ok(None),
            };
            if !no_headers(&self.send_fields.get(&send, HEADERS)?) {
                return Ok(None);
            }
            // Serializers are pure and their failures are refusals the Python frame
            // words: on anything but bytes or None out, it plans the sends again.
            let key = match coded(&out.encode_key, &self.send_fields.get(&send, KEY)?) {
                Ok(Some(k)) if k.is_none() || k.is_exact_instance_of::<PyBytes>() => k,
                Err(err) if !is_exception(py, &err) => return Err(err),
                _ => return Ok(None),
            };
            let value = match coded(&out.encode_value, &self.send_fields.get(&send, VALUE)?) {
                Ok(Some(v)) if v.is_none() || v.is_exact_instance_of::<PyBytes>() => v,
                Err(err) if !is_exception(py, &err) => return Err(err),
                _ => return Ok(None),
            };
            let own_ts = self.send_fields.get(&send, TIMESTAMP_MS)?;
            let ts = if own_ts.is_none() { default_ts.clone() } else { own_ts };
            planned.push(Planned { out, key, value, ts });
        }
        if self.latched(py)? {
            return Ok(None);
        }
        Ok(Some(planned))
    }

    /// Produce `planned` in order, each with a new header list holding only
    /// `(parsley.causes, causes)`, as `TaskStep.drain` produces a frame's sends; counts
    /// each in `sent`. `Some(payload)`: `produce` raised an `Exception` for one send and
    /// queued nothing; `payload` is `(that send, rest)`, the send stamped as
    /// `(topic, key, value, headers, timestamp_ms)` for `TaskTransaction.send_counted`, and
    /// `rest` the sends after it, not yet produced, as the frame plans them (`[]` headers,
    /// for the step to stamp and produce). Anything else `produce` raises is raised.
    fn produce_all(
        &self,
        py: Python<'_>,
        planned: Vec<Planned<'_, '_>>,
        causes: &Bound<'_, PyAny>,
    ) -> PyResult<Option<PyObject>> {
        if planned.is_empty() {
            return Ok(None);
        }
        let produce = self.produce.bind(py);
        let on_delivery = self.on_delivery.bind(py);
        // One stamp for every send of the entry (or run), as the step shares its tuple.
        let stamp = PyTuple::new(py, [self.causes_key.bind(py).as_any(), causes])?;
        let mut rest = planned.into_iter();
        while let Some(p) = rest.next() {
            let stamped = PyList::new(py, [&stamp])?;
            let topic = p.out.topic.bind(py);
            // Every argument by position, no keyword dict to build and parse per send:
            // `Producer.produce(topic, value, key, partition, callback, on_delivery,
            // timestamp, headers)`, confluent-kafka's own order (`Producer_produce` in its
            // `Producer.c`, the same from 2.5 on), with the partition left to the
            // partitioner (-1, `PARTITION_UA`) and the ledger's callback as `callback` (an
            // `on_delivery` beside a given `callback`, even `None`, is ignored).
            let args = (topic, &p.value, &p.key, -1i32, on_delivery, py.None(), &p.ts, &stamped);
            if let Err(err) = produce.call1(args) {
                if !err.is_instance_of::<PyException>(py) {
                    return Err(err);
                }
                let refused = PyTuple::new(py, [
                    topic.as_any().clone(),
                    p.key,
                    p.value,
                    stamped.into_any(),
                    p.ts,
                ])?;
                let unsent = PyList::empty(py);
                for q in rest {
                    unsent.append((q.out.topic.bind(py), q.key, q.value, PyList::empty(py), q.ts))?;
                }
                let payload = PyTuple::new(py, [refused.into_any(), unsent.into_any()])?;
                return Ok(Some(payload.into_any().unbind()));
            }
            self.sent.set(self.sent.get() + 1);
        }
        Ok(None)
    }

    /// One per-record handler's entry (`HandlerFrame.run` and the step's send): `None`
    /// when handled, else the stop kind and payload for the Python frame.
    fn run_record<'py>(
        &self,
        py: Python<'py>,
        plan: &InPlan,
        entry: &Bound<'py, PyTuple>,
    ) -> PyResult<Option<(u8, PyObject)>> {
        if self.latched(py)? {
            return Ok(Some((STOP_RECORD, py.None())));
        }
        let (key, value) = match self.decoded(plan, entry)? {
            Some(kv) => kv,
            None => return Ok(Some((STOP_RECORD, py.None()))),
        };
        let delivery = self.delivery(py, plan, entry, &key, &value)?;
        let effects = match plan.handler.bind(py).call1((delivery, self.state.bind(py))) {
            Ok(e) => e,
            Err(err) => return raised(py, err),
        };
        let planned = match self.plan_sends(py, &effects, &entry.get_item(2)?, 1)? {
            Some(p) => p,
            None => return Ok(Some((STOP_EFFECTS, effects.unbind()))),
        };
        Ok(self
            .produce_all(py, planned, &entry.get_item(6)?)?
            .map(|payload| (STOP_PRODUCE, payload)))
    }

    /// The run `batch[start..end]` of a batch handler's entries (`HandlerFrame.run_batch`
    /// and the step's send): every entry decoded into the list of `parsley.Delivery` the
    /// handler gets in one call; a send without a timestamp gets the last entry's, and
    /// every send carries the last entry's `parsley.causes`. `None` when handled, else the
    /// stop kind and payload for the whole run: any entry that is not plain hands the run
    /// back before the handler is called (`STOP_RECORD`).
    fn run_batch<'py>(
        &self,
        py: Python<'py>,
        plan: &InPlan,
        batch: &Bound<'py, PyList>,
        start: usize,
        end: usize,
    ) -> PyResult<Option<(u8, PyObject)>> {
        if self.latched(py)? {
            return Ok(Some((STOP_RECORD, py.None())));
        }
        // What hands the run back and costs no decoder call first: an entry with
        // application headers anywhere in the run, or a key or value the identity decoder
        // does not take, before any entry is decoded or any Delivery built.
        for j in start..end {
            if !shaped(plan, &batch.get_item(j)?.downcast_into::<PyTuple>()?)? {
                return Ok(Some((STOP_RECORD, py.None())));
            }
        }
        let deliveries = PyList::empty(py);
        for j in start..end {
            let entry = batch.get_item(j)?.downcast_into::<PyTuple>()?;
            let (key, value) = match self.decoded(plan, &entry)? {
                Some(kv) => kv,
                None => return Ok(Some((STOP_RECORD, py.None()))),
            };
            deliveries.append(self.delivery(py, plan, &entry, &key, &value)?)?;
        }
        let called = plan.handler.bind(py).call1((deliveries, self.state.bind(py)));
        // Counted once called, returned or raised, whatever its sends then come to (as
        // the step counts a run the Python frame calls the handler for).
        self.calls.set(self.calls.get() + 1);
        let effects = match called {
            Ok(e) => e,
            Err(err) => return raised(py, err),
        };
        let last = batch.get_item(end - 1)?.downcast_into::<PyTuple>()?;
        let planned = match self.plan_sends(py, &effects, &last.get_item(2)?, usize::MAX)? {
            Some(p) => p,
            None => return Ok(Some((STOP_EFFECTS, effects.unbind()))),
        };
        Ok(self
            .produce_all(py, planned, &last.get_item(6)?)?
            .map(|payload| (STOP_PRODUCE, payload)))
    }
}

/// A handler's error: an `Exception` is handed back (`STOP_RAISED`), anything else
/// (KeyboardInterrupt, SystemExit) raised.
fn raised(py: Python<'_>, err: PyErr) -> PyResult<Option<(u8, PyObject)>> {
    if err.is_instance_of::<PyException>(py) {
        return Ok(Some((STOP_RAISED, err.into_value(py).into_any())));
    }
    Err(err)
}

#[pymethods]
impl FastFrame {
    /// `FastFrame(inputs, outputs, frame, state, classes, produce, on_delivery, causes_key)`:
    /// see `workers/fastpath.py`, which builds it from a `HandlerFrame`.
    ///
    /// `inputs`: `{id(channel): (topic, partition, handler, decode_key, decode_value,
    /// max_records)}`, `max_records` `None` for a per-record handler; `outputs`: `{name:
    /// (topic, encode_key, encode_value)}` for outputs whose serdes are built in (`None`
    /// for a BYTES encoder); `classes`: `(Delivery, Effects, Send, Channel)`.
    ///
    /// Raises `ValueError` for a `max_records` below 1 (`OverflowError` for one past the
    /// platform's `size_t`), and what the tuples' reading raises (`TypeError`,
    /// `IndexError`) for plans of another shape; `TypeError` when `Delivery` is not a
    /// class `object.__new__` allocates with `PyType_GenericAlloc`.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        inputs: &Bound<'_, PyDict>,
        outputs: &Bound<'_, PyDict>,
        frame: PyObject,
        state: PyObject,
        classes: (Py<PyType>, Py<PyType>, Py<PyType>, Py<PyType>),
        produce: PyObject,
        on_delivery: PyObject,
        causes_key: Py<PyString>,
    ) -> PyResult<Self> {
        check_allocatable(classes.0.bind(py))?;
        let mut ins = HashMap::new();
        for (k, v) in inputs.iter() {
            let id: usize = k.extract()?;
            let t = v.downcast::<PyTuple>()?;
            let limit = t.get_item(5)?;
            let max_records: Option<usize> = if limit.is_none() {
                None
            } else if limit.lt(1)? {
                // Checked before the conversion, which would take a negative one for an
                // OverflowError.
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "a batch handler's max_records must be at least 1",
                ));
            } else {
                Some(limit.extract()?)
            };
            ins.insert(id, InPlan {
                topic: t.get_item(0)?.downcast::<PyString>()?.clone().unbind(),
                partition: t.get_item(1)?.unbind(),
                handler: t.get_item(2)?.unbind(),
                decode_key: optional_decoder(py, &t.get_item(3)?),
                decode_value: optional_decoder(py, &t.get_item(4)?),
                max_records,
            });
        }
        let mut outs = Vec::new();
        let mut by_name = HashMap::new();
        for (k, v) in outputs.iter() {
            let name: String = k.extract()?;
            let t = v.downcast::<PyTuple>()?;
            let enc = |i: usize| -> PyResult<Option<PyObject>> {
                let f = t.get_item(i)?;
                Ok(if f.is_none() { None } else { Some(f.unbind()) })
            };
            by_name.insert(name, outs.len());
            outs.push(OutPlan {
                topic: t.get_item(0)?.downcast::<PyString>()?.clone().unbind(),
                encode_key: enc(1)?,
                encode_value: enc(2)?,
            });
        }
        let delivery_fields = Slots::of(
            classes.0.bind(py),
            &["topic", "partition", "offset", "timestamp", "key", "value", "headers"],
        )?;
        let effects_fields = Slots::of(classes.1.bind(py), &EFFECTS_FIELDS)?;
        let send_fields = Slots::of(classes.2.bind(py), &SEND_FIELDS)?;
        Ok(FastFrame {
            inputs: ins,
            outputs: outs,
            by_name,
            out_cache: RefCell::new(Vec::new()),
            channel: classes.3,
            frame,
            state,
            delivery: classes.0,
            effects: classes.1,
            send: classes.2,
            produce,
            on_delivery,
            causes_key,
            delivery_fields,
            effects_fields,
            send_fields,
            handled: Cell::new(0),
            sent: Cell::new(0),
            calls: Cell::new(0),
        })
    }

    /// `(handled, sent, calls)` of the current or last `run` so far: what a `run` that
    /// raised (a `BaseException` that is not an `Exception`, or a failure of its own) had
    /// done.
    fn partial(&self) -> (usize, usize, usize) {
        (self.handled.get(), self.sent.get(), self.calls.get())
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
        // (`try_borrow`: a collection never runs inside `output`'s short borrow, which
        // calls no Python code, but a traversal must not panic if one ever did.)
        if let Ok(cache) = self.out_cache.try_borrow() {
            for (channel, _) in cache.iter() {
                visit.call(channel)?;
            }
        }
        for out in self.outputs.iter() {
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
            self.by_name.clear();
            self.out_cache.get_mut().clear();
            self.frame = py.None();
            self.state = py.None();
            self.produce = py.None();
            self.on_delivery = py.None();
        });
    }

    /// Handle the entries of `batch` (`ProcessEngine.deliver_batch`'s tuples) from
    /// `start`, in order, until one needs the Python frame. An entry of a per-record
    /// handler is handled alone; one of a batch handler starts a run (consecutive entries
    /// of its channel, at most its `max_records`: `run_end`) handled in one handler call,
    /// or handed back whole.
    ///
    /// Returns `(handled, sent, calls, slowest_s, stop)`: entries fully handled (their
    /// sends produced, or nothing to send), sends produced, batch-handler calls made (each
    /// counted once the handler was called, returned or raised: a run handed back after
    /// its call, `STOP_EFFECTS`, `STOP_RAISED` or `STOP_PRODUCE`, is counted here),
    /// the longest one entry took (s; a run's time divided by its entries), and `None` at
    /// the end of the batch or `(index, kind, payload, spent_s)` for the entry that needs
    /// the Python frame, the first of its run for a batch handler (kinds and payloads:
    /// `workers/fastpath.py`; `spent_s` the time already spent on it, s). The sends a
    /// stopped run or entry produced before `produce` refused one count in `sent`.
    ///
    /// Raises `TypeError` when `batch` is not a list of tuples.
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
        self.calls.set(0);
        let batch = batch.downcast::<PyList>()?;
        let mut slowest = 0f64;
        let n = batch.len();
        let mut i = start;
        while i < n {
            let began = Instant::now();
            let entry = batch.get_item(i)?.downcast_into::<PyTuple>()?;
            let ch = entry.get_item(0)?;
            let stopped = match self.inputs.get(&(ch.as_ptr() as usize)) {
                None => Some((STOP_RECORD, py.None())),
                Some(plan) => match plan.max_records {
                    None => match self.run_record(py, plan, &entry)? {
                        None => {
                            self.handled.set(self.handled.get() + 1);
                            i += 1;
                            None
                        }
                        stop => stop,
                    },
                    Some(limit) => {
                        let end = run_end(batch, i, limit)?;
                        match self.run_batch(py, plan, batch, i, end)? {
                            None => {
                                self.handled.set(self.handled.get() + (end - i));
                                let took = began.elapsed().as_secs_f64() / (end - i) as f64;
                                if took > slowest {
                                    slowest = took;
                                }
                                i = end;
                                continue;
                            }
                            stop => stop,
                        }
                    }
                },
            };
            if let Some((kind, payload)) = stopped {
                let spent = began.elapsed().as_secs_f64();
                let stop = (i, kind, payload, spent);
                return Ok((self.handled.get(), self.sent.get(), self.calls.get(), slowest, Some(stop)));
            }
            let took = began.elapsed().as_secs_f64();
            if took > slowest {
                slowest = took;
            }
        }
        Ok((self.handled.get(), self.sent.get(), self.calls.get(), slowest, None))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(split_errors, m)?)?;
    m.add_class::<FastFrame>()?;
    Ok(())
}
