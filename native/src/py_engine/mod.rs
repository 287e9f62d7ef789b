//! `parsley._native.EngineCore`: the PyO3 adapter of the engine core (`crate::engine`).
//!
//! It converts arguments (Python `ChannelId`s to ranks and channels, records to
//! positions, payloads and the causes header), keeps the Python objects (payloads, one
//! `ChannelId` per channel, the header's `bytes`), serves the core as its `Host` (the
//! store, the warning callback, `describe_channel` for warnings) and maps its faults to
//! Python exceptions: refusals are `parsley.refusals.ParsleyFailClosedError` with the
//! Python engine's `Reason` and the detail `parsley.engine.details` writes for both. `parsley/engine/native_engine.py` subclasses
//! this class and adds the cold parts in Python (restore from the store's image, name
//! bindings, identity verdicts, diagnosis), so the API is that of
//! `parsley.engine.engine.ProcessEngine`.

mod convert;
mod host;

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFrozenSet, PyIterator, PyList, PyString, PyTuple};

use self::convert::{
    bytes_of, channel_entries, channel_of, split_headers, start_entry, SplitCauses,
};
use self::host::{PyHost, PyPayload, PyState, Refs};
use crate::engine::fx::FxSet;
use crate::engine::{encodable_position, CausesHeader, Config, Core, Delivered, Fault, Restore};
use crate::py_methods::Methods;
use crate::wire::TopicId;

/// The most entries `deliver_batch` reserves room for before it knows how many heads are
/// deliverable (a worker asks for at most `workers.pacing.MAX_BATCH`).
const DELIVER_BATCH_RESERVE: i64 = 1024;

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
unsafe impl Send for EngineCore {}
unsafe impl Sync for EngineCore {}

/// One task's ordering state and delivery decisions; see the module docs.
#[pyclass(subclass, module = "parsley._native", name = "EngineCore")]
pub struct EngineCore {
    core: Core<PyPayload>,
    py: PyState,
    /// The accessors `feed_records` calls on every record, in the order of `RECORD_*`.
    record: Methods<6>,
}

const RECORD_TOPIC: usize = 0;
const RECORD_OFFSET: usize = 1;
const RECORD_HEADERS: usize = 2;
const RECORD_TIMESTAMP: usize = 3;
const RECORD_KEY: usize = 4;
const RECORD_VALUE: usize = 5;

impl EngineCore {
    fn fail(&mut self, py: Python<'_>, fault: Fault<PyErr>) -> PyErr {
        self.py.error(py, fault)
    }

    fn undeclared(obj: &Bound<'_, PyAny>) -> PyErr {
        let text = obj.str().map(|s| s.to_string()).unwrap_or_default();
        PyValueError::new_err(format!("received on undeclared channel {text}"))
    }

    fn rank_of_obj(&mut self, obj: &Bound<'_, PyAny>) -> Option<usize> {
        self.py.rank_of_obj(&self.core, obj)
    }

    /// The position and timestamp of a record to feed, as `receive` checks them in the
    /// reference: after the session floor, a position no `parsley.causes` header can
    /// carry and a timestamp outside an int64 are a `ValueError` with the reference's text.
    fn checked_feed(
        &mut self,
        py: Python<'_>,
        r: usize,
        q_obj: &Bound<'_, PyAny>,
        ts_obj: &Bound<'_, PyAny>,
    ) -> PyResult<(i64, i64)> {
        self.core.require_started().map_err(|f| self.fail(py, f))?;
        let ch = self.core.received()[r];
        let q: Option<i64> = match q_obj.extract::<i64>() {
            Ok(q) if encodable_position(q) => Some(q),
            Ok(_) => None,
            Err(e) if e.is_instance_of::<PyOverflowError>(py) => None,
            Err(e) => return Err(e),
        };
        let q = match q {
            Some(q) => q,
            None => {
                let text = self.py.py_channel(py, &ch)?.bind(py).str()?.to_string();
                return Err(PyValueError::new_err(format!(
                    "position {} on {text} cannot be encoded: it must be in 0..2^63-2",
                    q_obj.str()?
                )));
            }
        };
        match ts_obj.extract::<i64>() {
            Ok(ts) => Ok((q, ts)),
            Err(e) if e.is_instance_of::<PyOverflowError>(py) => {
                let text = self.py.py_channel(py, &ch)?.bind(py).str()?.to_string();
                Err(PyValueError::new_err(format!(
                    "timestamp {} of position {q} on {text} does not fit an int64",
                    ts_obj.str()?
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// Receive one record (the body of `receive` and `feed_records`); true when accepted.
    #[allow(clippy::too_many_arguments)]
    fn feed_one(
        &mut self,
        py: Python<'_>,
        r: usize,
        q: i64,
        ts: i64,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.core.require_started().map_err(|f| self.fail(py, f))?;
        let split = split_headers(py, headers)?;
        let raw = match &split.causes {
            SplitCauses::Value(v) if !v.is_none() => Some(bytes_of(v)?),
            _ => None,
        };
        let header = match (&split.causes, &raw) {
            (SplitCauses::Absent, _) => CausesHeader::Absent,
            (SplitCauses::Duplicate, _) => CausesHeader::Duplicate,
            (SplitCauses::Value(_), None) => CausesHeader::Null,
            (SplitCauses::Value(_), Some(b)) => CausesHeader::Value(b.as_bytes()),
        };
        let payload = PyPayload {
            key: key.clone().unbind(),
            value: value.clone().unbind(),
            headers: split.app.unbind(),
        };
        let mut host = PyHost {
            py,
            state: &mut self.py,
        };
        let fed = self.core.feed(&mut host, r, q, ts, header, payload);
        fed.map_err(|f| self.fail(py, f))
    }

    /// The header's `bytes`, one object per header generation.
    fn header_bytes(&mut self, py: Python<'_>) -> PyResult<Py<PyBytes>> {
        let (generation, bytes) = match self.core.causes_header() {
            Ok(h) => h,
            Err(f) => return Err(self.py.error(py, f)),
        };
        if let Some((g, h)) = &self.py.header {
            if *g == generation {
                return Ok(h.clone_ref(py));
            }
        }
        let h = PyBytes::new(py, bytes).unbind();
        self.py.header = Some((generation, h.clone_ref(py)));
        Ok(h)
    }

    fn deliver_one(&mut self, py: Python<'_>) -> PyResult<Option<Delivered<PyPayload>>> {
        let mut host = PyHost {
            py,
            state: &mut self.py,
        };
        let delivered = self.core.deliver_one(&mut host);
        delivered.map_err(|f| self.fail(py, f))
    }
}

#[pymethods]
impl EngineCore {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        EngineCore {
            core: Core::new(Config::default(), Vec::new()),
            py: PyState::default(),
            record: Methods::new(["topic", "offset", "headers", "timestamp", "key", "value"]),
        }
    }

    /// Build the state from a restored image (called once, by the Python subclass).
    ///
    /// Args: store; received channels in channel order; budget bytes; warning callback;
    /// whether cross-partition causes refuse; sabotage mode (0 for none); whether the
    /// version entry must be stamped; fed, frontier and past dicts (channel -> position,
    /// in the image's order); held dict (received channel -> ascending positions);
    /// labels dict (topic id -> name) for details.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (store, received, budget, on_warning, cross_refuse, sabotage, stamp_version, fed, frontier, past, held, labels))]
    fn _setup(
        &mut self,
        py: Python<'_>,
        store: PyObject,
        received: Vec<Bound<'_, PyAny>>,
        budget: usize,
        on_warning: Option<PyObject>,
        cross_refuse: bool,
        sabotage: u8,
        stamp_version: bool,
        fed: &Bound<'_, PyDict>,
        frontier: &Bound<'_, PyDict>,
        past: &Bound<'_, PyDict>,
        held: &Bound<'_, PyDict>,
        labels: PyObject,
    ) -> PyResult<()> {
        let refusals = py.import("parsley.refusals")?;
        let channel = py.import("parsley.engine.channel")?;
        let wire = py.import("parsley.wire")?;
        let feed = py.import("parsley.engine.feed")?;
        let outcome = feed.getattr("FeedOutcome")?;
        self.py.refs = Some(Refs {
            error: refusals.getattr("ParsleyFailClosedError")?.unbind(),
            reason: refusals.getattr("Reason")?.unbind(),
            describe_channel: channel.getattr("describe_channel")?.unbind(),
            details: py.import("parsley.engine.details")?.into_any().unbind(),
            describe_key: channel.getattr("describe_key")?.unbind(),
            cached_channel: wire.getattr("cached_channel")?.unbind(),
            deliverable: channel.getattr("DeliverableMessage")?.unbind(),
            deliverable_fields: [
                "channel",
                "position",
                "timestamp_ms",
                "key",
                "value",
                "headers",
                "causes",
            ]
            .iter()
            .map(|f| PyString::intern(py, f).unbind())
            .collect(),
            object_new: py
                .import("builtins")?
                .getattr("object")?
                .getattr("__new__")?
                .unbind(),
            accepted: outcome.getattr("ACCEPTED")?.unbind(),
            dropped: outcome.getattr("DUPLICATE_DROPPED")?.unbind(),
        });
        self.py.store = Some(store);
        self.py.on_warning = on_warning;
        self.py.labels = Some(labels);
        let mut channels = Vec::with_capacity(received.len());
        for obj in &received {
            let ch = channel_of(obj)
                .ok_or_else(|| PyValueError::new_err("received channels must be ChannelId"))?;
            channels.push(ch);
            self.py.py_by_rank.push(obj.clone().unbind());
            self.py.received.insert(ch, obj.clone().unbind());
        }
        let config = Config {
            budget,
            cross_refuse,
            sabotage,
            stamp_version,
        };
        self.core = Core::new(config, channels);
        let mut image = Restore {
            fed: channel_entries(fed, "fed")?,
            frontier: channel_entries(frontier, "frontier")?,
            past: channel_entries(past, "past")?,
            held: Vec::with_capacity(held.len()),
        };
        for (k, v) in held.iter() {
            let ch = channel_of(&k).ok_or_else(|| PyValueError::new_err("bad held channel"))?;
            image.held.push((ch, v.extract()?));
        }
        let mut host = PyHost {
            py,
            state: &mut self.py,
        };
        let restored = self.core.restore(&mut host, image);
        restored.map_err(|f| self.fail(py, f))
    }

    /// Replace the topic id -> name labels used in details.
    fn _set_labels(&mut self, labels: PyObject) {
        self.py.labels = Some(labels);
    }

    /// Raise coverage of `ch` to `position` (the identity check's fed-to-end).
    fn _advance_fed(&mut self, ch: &Bound<'_, PyAny>, position: i64) -> PyResult<()> {
        let ch = channel_of(ch).ok_or_else(|| PyValueError::new_err("not a channel"))?;
        self.core.advance_fed(ch, position);
        Ok(())
    }

    /// Prune frontier and delivered-past entries on the given topic ids (16-byte bytes);
    /// returns whether anything was pruned.
    fn _prune(&mut self, dead: Vec<Vec<u8>>) -> bool {
        let dead: FxSet<TopicId> = dead
            .iter()
            .filter_map(|t| t.as_slice().try_into().ok())
            .collect();
        self.core.prune(&dead)
    }

    /// Held channels in channel order: `[(channel, positions tuple, head causes tuple)]`.
    fn _held_heads<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for r in 0..self.core.received().len() {
            let mut host = PyHost {
                py,
                state: &mut self.py,
            };
            let causes = match self.core.head_causes(&mut host, r) {
                Ok(Some(causes)) => causes,
                Ok(None) => continue,
                Err(f) => return Err(self.fail(py, f)),
            };
            let causes = self.py.causes_tuple(py, &causes)?;
            let positions = PyTuple::new(py, self.core.held_positions(r).iter().copied())?;
            out.append((self.py.py_by_rank[r].clone_ref(py), positions, causes))?;
        }
        Ok(out)
    }

    /// `start(start_positions)`: see `ProcessEngine.start`.
    fn start(&mut self, py: Python<'_>, start_positions: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut items: Option<Bound<'_, PyIterator>> = None;
        // Lazy, so `items()` runs after the core's own first steps, as in the reference.
        let starts = std::iter::from_fn(|| {
            if items.is_none() {
                let it = start_positions
                    .call_method0(intern!(py, "items"))
                    .and_then(|i| i.try_iter());
                match it {
                    Ok(it) => items = Some(it),
                    Err(e) => return Some(Err(e)),
                }
            }
            let item = items.as_mut().expect("items").next()?;
            Some(item.and_then(|item| start_entry(py, &item)))
        });
        let started = self.core.start(starts);
        started.map_err(|f| self.fail(py, f))
    }

    /// Whether `start` has run.
    #[getter]
    fn started(&self) -> bool {
        self.core.started()
    }

    /// Take one `ReceivedMessage`: see `ProcessEngine.receive`.
    fn receive(&mut self, py: Python<'_>, msg: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        let obj = msg.getattr(intern!(py, "channel"))?;
        let r = match self.rank_of_obj(&obj) {
            Some(r) => r,
            None => return Err(Self::undeclared(&obj)),
        };
        let (q, ts) = self.checked_feed(
            py,
            r,
            &msg.getattr(intern!(py, "position"))?,
            &msg.getattr(intern!(py, "timestamp_ms"))?,
        )?;
        let key = msg.getattr(intern!(py, "key"))?;
        let value = msg.getattr(intern!(py, "value"))?;
        let headers = msg.getattr(intern!(py, "headers"))?;
        let accepted = self.feed_one(py, r, q, ts, &key, &value, &headers)?;
        let refs = self.py.refs();
        Ok(if accepted {
            refs.accepted.clone_ref(py)
        } else {
            refs.dropped.clone_ref(py)
        })
    }

    /// Feed a fetched batch of `confluent_kafka.Message`-like records: see
    /// `ProcessEngine.feed_records`. Returns `(fed, duplicates, {topic: last offset})`.
    fn feed_records<'py>(
        &mut self,
        py: Python<'py>,
        records: &Bound<'py, PyAny>,
        channels: &Bound<'py, PyAny>,
    ) -> PyResult<(usize, usize, Bound<'py, PyDict>)> {
        let last = PyDict::new(py);
        let mut topics: Vec<(Bound<'py, PyAny>, usize, i64)> = Vec::new();
        let mut count = 0usize;
        let mut duplicates = 0usize;
        for rec in records.try_iter()? {
            let rec = rec?;
            let topic = self.record.call(&rec, RECORD_TOPIC)?;
            let offset_obj = self.record.call(&rec, RECORD_OFFSET)?;
            let mut headers = self.record.call(&rec, RECORD_HEADERS)?;
            if headers.is_none() {
                // confluent-kafka gives None for a record without headers.
                headers = PyTuple::empty(py).into_any();
            }
            let mut slot = None;
            for (i, (t, _, _)) in topics.iter().enumerate() {
                if t.is(&topic) || t.eq(&topic)? {
                    slot = Some(i);
                    break;
                }
            }
            let slot = match slot {
                Some(i) => i,
                None => {
                    let obj = channels.get_item(&topic)?;
                    let r = match self.rank_of_obj(&obj) {
                        Some(r) => r,
                        None => return Err(Self::undeclared(&obj)),
                    };
                    topics.push((topic.clone(), r, -1));
                    topics.len() - 1
                }
            };
            let r = topics[slot].1;
            let ts_obj = self.record.call(&rec, RECORD_TIMESTAMP)?.get_item(1)?;
            let (offset, ts) = self.checked_feed(py, r, &offset_obj, &ts_obj)?;
            let key = self.record.call(&rec, RECORD_KEY)?;
            let value = self.record.call(&rec, RECORD_VALUE)?;
            if !self.feed_one(py, r, offset, ts, &key, &value, &headers)? {
                duplicates += 1;
            }
            topics[slot].2 = offset;
            count += 1;
        }
        for (t, _, at) in &topics {
            if *at >= 0 {
                last.set_item(t, *at)?;
            }
        }
        Ok((count, duplicates, last))
    }

    /// Deliver the next head whose causes are all settled: see `ProcessEngine.deliver_next`.
    fn deliver_next(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        let (r, q, body) = match self.deliver_one(py)? {
            Some(delivered) => delivered,
            None => return Ok(py.None()),
        };
        let causes = self.py.causes_tuple(py, &body.causes)?;
        let ch = self.py.py_by_rank[r].clone_ref(py);
        // A frozen slots dataclass: build it as its own __init__ would, without running
        // that __init__'s seven object.__setattr__ calls in Python.
        let refs = self.py.refs();
        let msg = refs
            .object_new
            .bind(py)
            .call1((refs.deliverable.bind(py),))?;
        let values: [Bound<'_, PyAny>; 7] = [
            ch.into_bound(py),
            q.into_pyobject(py)?.into_any(),
            body.ts.into_pyobject(py)?.into_any(),
            body.payload.key.into_bound(py),
            body.payload.value.into_bound(py),
            body.payload.headers.into_bound(py),
            causes.into_any(),
        ];
        for (name, value) in refs.deliverable_fields.iter().zip(values.iter()) {
            // SAFETY: three valid object pointers, held by bound references for the call.
            let rc = unsafe {
                pyo3::ffi::PyObject_GenericSetAttr(msg.as_ptr(), name.as_ptr(), value.as_ptr())
            };
            if rc != 0 {
                return Err(PyErr::fetch(py));
            }
        }
        Ok(msg.unbind())
    }

    /// Deliver up to `limit` heads: see `ProcessEngine.deliver_batch`.
    fn deliver_batch<'py>(&mut self, py: Python<'py>, limit: i64) -> PyResult<Bound<'py, PyList>> {
        // Collected first and made into a list of its exact size at the end: a list grown
        // by appends is reallocated again and again (a few per cent of a relay's step).
        let mut out = Vec::with_capacity(limit.clamp(0, DELIVER_BATCH_RESERVE) as usize);
        while (out.len() as i64) < limit {
            let (r, q, body) = match self.deliver_one(py)? {
                Some(delivered) => delivered,
                None => break,
            };
            let header = self.header_bytes(py)?;
            let ch = self.py.py_by_rank[r].clone_ref(py);
            let p = body.payload;
            out.push((ch, q, body.ts, p.key, p.value, p.headers, header).into_pyobject(py)?);
        }
        PyList::new(py, out)
    }

    /// The `parsley.causes` value every send of the current step carries.
    fn causes_header(&mut self, py: Python<'_>) -> PyResult<Py<PyBytes>> {
        self.header_bytes(py)
    }

    /// The changelog rows of `take_deltas` but the name rows: `v`, `h`, `h` tombstones,
    /// `f`, `c`, `p`, in the Python engine's order. Clears the marks.
    fn _take_rows<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        let mut sink = |key: &[u8], value: Option<&[u8]>| -> PyResult<()> {
            let value = match value {
                Some(v) => PyBytes::new(py, v).into_any(),
                None => py.None().into_bound(py),
            };
            out.append((PyBytes::new(py, key), value))
        };
        let mut host = PyHost {
            py,
            state: &mut self.py,
        };
        let taken = self.core.take_rows(&mut host, &mut sink);
        taken.map_err(|f| self.fail(py, f))?;
        Ok(out)
    }

    /// `fedUpTo(ch)`, `FED_TO_END` for a deleted channel, or `None`.
    fn covered(&self, ch: &Bound<'_, PyAny>) -> Option<i64> {
        channel_of(ch).and_then(|c| self.core.covered(&c))
    }

    /// `settled(ch)`: head - 1 if anything is held, else covered, else `None`.
    fn settled(&self, ch: &Bound<'_, PyAny>) -> Option<i64> {
        self.core.settled(&channel_of(ch)?)
    }

    /// Coverage of `ch` when `start` ran (`None` if none, or not started).
    fn session_floor(&self, ch: &Bound<'_, PyAny>) -> Option<i64> {
        self.core.session_floor(&channel_of(ch)?)
    }

    /// Messages held on `ch`, or on every channel when `ch` is `None`.
    #[pyo3(signature = (ch=None))]
    fn held_count(&self, ch: Option<&Bound<'_, PyAny>>) -> usize {
        match ch {
            None => self.core.held_total(),
            Some(obj) => channel_of(obj)
                .and_then(|c| self.core.rank_of(&c))
                .map_or(0, |r| self.core.held_positions(r).len()),
        }
    }

    /// Positions held on `ch` in FIFO (ascending) order.
    fn held_positions<'py>(
        &self,
        py: Python<'py>,
        ch: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        match channel_of(ch).and_then(|c| self.core.rank_of(&c)) {
            None => Ok(PyTuple::empty(py)),
            Some(r) => PyTuple::new(py, self.core.held_positions(r).iter().copied()),
        }
    }

    /// The frontier's encoded size in bytes (docs/wire-format.md, "Size").
    fn frontier_bytes(&self) -> usize {
        self.core.frontier_bytes()
    }

    /// The frontier as a new dict (channel -> position), insertion order.
    fn _frontier_dict<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.py.map_dict(py, self.core.frontier())
    }

    /// The delivered past as a new dict (channel -> position), insertion order.
    fn _past_dict<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.py.map_dict(py, self.core.past())
    }

    /// Topic ids (as 16-byte bytes) of the frontier and the delivered past.
    fn _state_topics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyFrozenSet>> {
        let ids = self.core.state_topics();
        let items: Vec<Bound<'py, PyBytes>> = ids.iter().map(|t| PyBytes::new(py, t)).collect();
        PyFrozenSet::new(py, &items)
    }

    /// The metadata budget, bytes (tests lower it under a restored frontier).
    #[getter(_budget)]
    fn budget_get(&self) -> usize {
        self.core.budget()
    }

    #[setter(_budget)]
    fn budget_set(&mut self, budget: usize) {
        self.core.set_budget(budget);
    }

    /// What the engine keeps in memory, for the tests that bound it: `(held bodies not
    /// yet persisted as [(channel, position)], {channel: causes of its head},
    /// the one decoded blob as (channel, position) or None)`.
    fn _memory<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let bodies = PyList::empty(py);
        for (r, q) in self.core.unpersisted() {
            bodies.append((self.py.py_by_rank[r].clone_ref(py), q))?;
        }
        let heads = PyDict::new(py);
        for r in 0..self.core.received().len() {
            if let Some(c) = self.core.known_head_causes(r) {
                let causes = self.py.causes_tuple(py, c)?;
                heads.set_item(self.py.py_by_rank[r].clone_ref(py), causes)?;
            }
        }
        let loaded = match self.core.loaded_at() {
            Some((r, q)) => (self.py.py_by_rank[r].clone_ref(py), q)
                .into_pyobject(py)?
                .into_any(),
            None => py.None().into_bound(py),
        };
        (bodies, heads, loaded).into_pyobject(py)
    }

    /// Messages accepted with a cause the task could not enforce.
    fn cross_partition_causes(&self) -> u64 {
        self.core.cross_partition_causes()
    }

    /// Heads found waiting for a cause not yet delivered since this engine was built,
    /// each counted once.
    fn waited_count(&self) -> u64 {
        self.core.waited_count()
    }
}

/// Register `EngineCore` in the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<EngineCore>()
}
