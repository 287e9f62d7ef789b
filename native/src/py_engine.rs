//! `parsley._native.EngineCore`: the per-task ordering engine in Rust.
//!
//! The hot path of `parsley.engine.engine.ProcessEngine` (docs/model.md, "Covered and
//! settled", "The decision rule", "Hold-back"): receipt (`receive`, `feed_records`),
//! decisions and delivery (`deliver_next`, `deliver_batch`), the frontier's header
//! (`causes_header`) and the changelog rows (`take_deltas`'s rows). Channels are
//! `crate::wire::Channel` inside; Python `ChannelId` objects appear only at the boundary
//! (one cached per channel). `parsley/engine/native_engine.py` subclasses this class and
//! adds the cold parts in Python (restore from the store's image, name bindings, identity
//! verdicts, diagnosis), so the API, refusals and bytes are those of `ProcessEngine`.
//!
//! Refusals are `parsley.refusals.ParsleyFailClosedError` with the same `Reason` and the
//! same detail text as the Python engine; channels in details are rendered by
//! `parsley.engine.channel.describe_channel`, so the text is the Python engine's own.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::rc::Rc;

use pyo3::exceptions::{PyOverflowError, PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFrozenSet, PyList, PyString, PyTuple};

use crate::engine::frontier::FrontierEncoding;
use crate::engine::fx::{FxMap, FxSet};
use crate::engine::ordered::{OrderedMap, OrderedSet};
use crate::engine::rows;
use crate::state_codec;
use crate::wire::{decode_causes, Channel, TopicId};

/// `FED_TO_END` (Java `Long.MAX_VALUE`): a channel whose topic is confirmed deleted.
const FED_TO_END: i64 = i64::MAX;
/// "Settled unknown": below every legal position, so it blocks.
const NOTHING_SETTLED: i64 = -1;
const DECODE_CACHE_ENTRIES: usize = 64;
const OBJECT_CACHE_ENTRIES: usize = 4096;
const CHANNEL_CACHE_ENTRIES: usize = 65_536;
const CAUSES_HEADER: &str = "parsley.causes";
const RESERVED_PREFIX: &str = "parsley.";

/// Sabotage modes (`parsley.engine.sabotage.Sabotage`), for the meta-tests only.
const SABOTAGE_EAGER_DELIVERY: u8 = 1;
const SABOTAGE_IGNORE_ONE_CAUSE: u8 = 2;
const SABOTAGE_IGNORE_CROSS_PARTITION: u8 = 4;

type Causes = Rc<[(Channel, i64)]>;

/// A decoded header value, the prune epoch at which it was last merged, and its causes on
/// channels of a received topic this task does not receive.
struct Decoded {
    causes: Causes,
    foreign: Causes,
    merged_epoch: Cell<i64>,
}

/// A held message in memory: timestamp ms, key, value, headers, causes.
struct Body {
    ts: i64,
    key: PyObject,
    value: PyObject,
    headers: PyObject,
    causes: Causes,
}

impl Body {
    fn clone_ref(&self, py: Python<'_>) -> Body {
        Body {
            ts: self.ts,
            key: self.key.clone_ref(py),
            value: self.value.clone_ref(py),
            headers: self.headers.clone_ref(py),
            causes: self.causes.clone(),
        }
    }
}

/// Python objects the engine calls: refusals and detail rendering.
struct Refs {
    error: PyObject,
    reason: PyObject,
    describe_channel: PyObject,
    describe_key: PyObject,
    cached_channel: PyObject,
    deliverable: PyObject,
    deliverable_fields: Vec<Py<PyString>>,
    object_new: PyObject,
    accepted: PyObject,
    dropped: PyObject,
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
unsafe impl Send for EngineCore {}
unsafe impl Sync for EngineCore {}

/// One task's ordering state and delivery decisions; see the module docs.
#[pyclass(subclass, module = "parsley._native", name = "EngineCore")]
pub struct EngineCore {
    refs: Option<Refs>,
    store: Option<PyObject>,
    budget: usize,
    sabotage: u8,
    cross_refuse: bool,
    on_warning: Option<PyObject>,
    labels: Option<PyObject>,

    by_rank: Vec<Channel>,
    py_by_rank: Vec<PyObject>,
    rank: FxMap<Channel, usize>,
    received_topics: FxSet<TopicId>,
    obj_rank: FxMap<usize, (PyObject, Option<usize>)>,
    py_channels: FxMap<Channel, PyObject>,

    fed: FxMap<Channel, i64>,
    frontier: OrderedMap,
    encoding: FrontierEncoding,
    header: Option<Py<PyBytes>>,
    past: OrderedMap,

    queues: Vec<VecDeque<i64>>,
    held_total: usize,
    bodies: FxMap<(usize, i64), Body>,
    body_order: Vec<(usize, i64)>,
    head_causes: Vec<Option<Causes>>,
    loaded: Option<(usize, i64, Body)>,

    settled: Vec<i64>,
    candidates: Vec<usize>,
    is_candidate: Vec<bool>,
    waiting: Vec<BinaryHeap<Reverse<(i64, usize)>>>,
    ready: BinaryHeap<Reverse<usize>>,

    floor: Option<FxMap<Channel, i64>>,
    fed_exec: Vec<Option<i64>>,

    dirty_f: OrderedSet,
    dirty_c: OrderedSet,
    dirty_p: OrderedSet,
    dirty_h: Vec<(usize, i64)>,

    decoded: FxMap<Box<[u8]>, Rc<Decoded>>,
    epoch: i64,
    last_past: Option<Causes>,
    warned: bool,
    stamp_version: bool,
    cross_warned: FxSet<(usize, Channel)>,
    cross_count: u64,
    /// Heads found waiting for a cause (`waited_count`), and per rank the last head
    /// counted, so a head decided again is not counted twice.
    waited: u64,
    waited_at: Vec<i64>,
    no_causes: Causes,
}

fn bytes_of<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
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

fn optional_bytes<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    if obj.is_none() {
        Ok(None)
    } else {
        bytes_of(obj).map(Some)
    }
}

/// The channel a Python `ChannelId` names, or `None` for anything else.
fn channel_of(obj: &Bound<'_, PyAny>) -> Option<Channel> {
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

impl EngineCore {
    fn refs(&self) -> &Refs {
        self.refs
            .as_ref()
            .expect("EngineCore used before its setup")
    }

    fn refuse(&self, py: Python<'_>, reason: &str, detail: String) -> PyErr {
        let refs = self.refs();
        let made = refs
            .reason
            .bind(py)
            .getattr(reason)
            .and_then(|r| refs.error.bind(py).call1((r, detail)));
        match made {
            Ok(err) => PyErr::from_value(err),
            Err(err) => err,
        }
    }

    /// The Python `ChannelId` of `ch` (the host's own object for a received channel).
    fn py_channel(&mut self, py: Python<'_>, ch: &Channel) -> PyResult<PyObject> {
        if let Some(&r) = self.rank.get(ch) {
            return Ok(self.py_by_rank[r].clone_ref(py));
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

    /// `ch` (at `position`) by topic name, partition, offset and Kafka topic id.
    fn describe(&mut self, py: Python<'_>, ch: &Channel, position: Option<i64>) -> String {
        let rendered = (|| -> PyResult<String> {
            let obj = self.py_channel(py, ch)?;
            let labels = match &self.labels {
                Some(l) => l.clone_ref(py).into_bound(py).into_any(),
                None => PyDict::new(py).into_any(),
            };
            self.refs()
                .describe_channel
                .bind(py)
                .call1((obj, labels, position))?
                .extract()
        })();
        rendered.unwrap_or_else(|e| format!("{ch:?} ({e})"))
    }

    /// The rank of a received `ChannelId` object, by identity first (hosts reuse theirs).
    fn rank_of_obj(&mut self, obj: &Bound<'_, PyAny>) -> Option<usize> {
        let key = obj.as_ptr() as usize;
        if let Some((_, r)) = self.obj_rank.get(&key) {
            return *r;
        }
        let r = channel_of(obj).and_then(|ch| self.rank.get(&ch).copied());
        if self.obj_rank.len() >= OBJECT_CACHE_ENTRIES {
            self.obj_rank.clear();
        }
        self.obj_rank.insert(key, (obj.clone().unbind(), r));
        r
    }

    fn undeclared(obj: &Bound<'_, PyAny>) -> PyErr {
        let text = obj.str().map(|s| s.to_string()).unwrap_or_default();
        PyValueError::new_err(format!("received on undeclared channel {text}"))
    }

    /// `key, value = h` as Python unpacks it (same errors), for a header that is not a
    /// 2-tuple; returns the pair.
    fn unpack_pair<'py>(
        &self,
        py: Python<'py>,
        h: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let code = std::ffi::CString::new("lambda h: [(k, v) for k, v in (h,)][0]")
            .expect("no NUL in the unpacking lambda");
        let unpack = py.eval(&code, None, None)?;
        Ok(unpack.call1((h,))?.downcast_into::<PyTuple>()?)
    }

    /// The position and timestamp of a record to feed, as `receive` checks them in the
    /// reference: after the channel and the session floor, a position no `parsley.causes`
    /// header can carry (outside 0..2^63-2, as `parsley.wire.encode_causes`) and a
    /// timestamp outside an int64 are a `ValueError` with the reference's text.
    fn checked_feed(
        &mut self,
        py: Python<'_>,
        r: usize,
        q_obj: &Bound<'_, PyAny>,
        ts_obj: &Bound<'_, PyAny>,
    ) -> PyResult<(i64, i64)> {
        if self.floor.is_none() {
            return Err(PyRuntimeError::new_err(
                "receive() before start(): the session floor is not set",
            ));
        }
        let ch = self.by_rank[r];
        let q: Option<i64> = match q_obj.extract::<i64>() {
            Ok(q) if q >= 0 && q != FED_TO_END => Some(q),
            Ok(_) => None,
            Err(e) if e.is_instance_of::<PyOverflowError>(py) => None,
            Err(e) => return Err(e),
        };
        let q = match q {
            Some(q) => q,
            None => {
                let text = self.py_channel(py, &ch)?.bind(py).str()?.to_string();
                return Err(PyValueError::new_err(format!(
                    "position {} on {text} cannot be encoded: it must be in 0..2^63-2",
                    q_obj.str()?
                )));
            }
        };
        match ts_obj.extract::<i64>() {
            Ok(ts) => Ok((q, ts)),
            Err(e) if e.is_instance_of::<PyOverflowError>(py) => {
                let text = self.py_channel(py, &ch)?.bind(py).str()?.to_string();
                Err(PyValueError::new_err(format!(
                    "timestamp {} of position {q} on {text} does not fit an int64",
                    ts_obj.str()?
                )))
            }
            Err(e) => Err(e),
        }
    }

    fn undecodable(&mut self, py: Python<'_>, ch: &Channel, q: i64, diagnosis: &str) -> PyErr {
        let detail = format!(
            "{}: {diagnosis}. Find and fix the producer that stamped the header; no restart \
             passes the record (docs/runbooks.md, UNDECODABLE_METADATA)",
            self.describe(py, ch, Some(q))
        );
        self.refuse(py, "UNDECODABLE_METADATA", detail)
    }

    #[inline]
    fn add_candidate(&mut self, r: usize) {
        if !self.is_candidate[r] {
            self.is_candidate[r] = true;
            self.candidates.push(r);
        }
    }

    fn raise_settled(&mut self, r: usize, settled: i64) {
        if settled > self.settled[r] {
            self.settled[r] = settled;
            while let Some(Reverse((p, waiter))) = self.waiting[r].peek().copied() {
                if p > settled {
                    break;
                }
                self.waiting[r].pop();
                self.add_candidate(waiter);
            }
        }
    }

    fn advance_fed_inner(&mut self, ch: Channel, position: i64) {
        let current = self.fed.get(&ch).copied();
        if current.is_none() || position > current.unwrap() {
            self.fed.insert(ch, position);
            self.dirty_f.add(ch);
            if let Some(&r) = self.rank.get(&ch) {
                if self.queues[r].is_empty() {
                    self.raise_settled(r, position);
                }
            }
        }
    }

    fn check_warning(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.warned {
            return Ok(());
        }
        let size = self.encoding.size();
        if size * 5 >= self.budget * 4 {
            self.warned = true;
            if let Some(cb) = &self.on_warning {
                let text = format!(
                    "the causal frontier reached {size} bytes ({} channels), at least 80% of \
                     the metadata budget of {} bytes; beyond the budget the process stops \
                     with METADATA_BUDGET_EXCEEDED",
                    self.frontier.len(),
                    self.budget
                );
                cb.bind(py).call1((text,))?;
            }
        }
        Ok(())
    }

    fn merge_new(&mut self, py: Python<'_>, ch: Channel, position: i64) -> PyResult<()> {
        self.frontier.set(ch, position);
        self.dirty_c.add(ch);
        self.encoding.added(&ch);
        self.header = None;
        let size = self.encoding.size();
        if size > self.budget {
            let detail = format!(
                "the causal frontier reached {size} bytes ({} channels); the configured \
                 budget is {} bytes. The frontier's size is the sum over its topics of 26 \
                 bytes for the first partition and 9 for each further one, plus 2 \
                 (docs/model.md). Raise metadata_budget_bytes here and upstream \
                 (docs/runbooks.md, METADATA_BUDGET_EXCEEDED).",
                self.frontier.len(),
                self.budget
            );
            return Err(self.refuse(py, "METADATA_BUDGET_EXCEEDED", detail));
        }
        self.check_warning(py)
    }

    fn merge_causes(&mut self, py: Python<'_>, causes: &[(Channel, i64)]) -> PyResult<()> {
        for &(c, p) in causes {
            match self.frontier.get_mut(&c) {
                None => self.merge_new(py, c, p)?,
                Some(current) => {
                    if p > *current {
                        *current = p;
                        self.dirty_c.add(c);
                        self.encoding.moved.push(c);
                        self.header = None;
                    }
                }
            }
        }
        Ok(())
    }

    /// The first cause on a received channel that is not settled: (blocker rank, position).
    fn first_blocker(&self, causes: &[(Channel, i64)]) -> Option<(usize, i64)> {
        match self.sabotage {
            SABOTAGE_EAGER_DELIVERY => None,
            SABOTAGE_IGNORE_ONE_CAUSE => {
                let mut dropped = false;
                for (c, p) in causes {
                    if let Some(&r) = self.rank.get(c) {
                        if !dropped {
                            dropped = true;
                            continue;
                        }
                        if self.settled[r] < *p {
                            return Some((r, *p));
                        }
                    }
                }
                None
            }
            _ => {
                for (c, p) in causes {
                    if let Some(&r) = self.rank.get(c) {
                        if self.settled[r] < *p {
                            return Some((r, *p));
                        }
                    }
                }
                None
            }
        }
    }

    /// A held body from the store, decoded by `crate::state_codec::decode_held` (the same
    /// checks and diagnoses as `parsley.engine.state_codec.decode_held`).
    fn load(&mut self, py: Python<'_>, r: usize, q: i64) -> PyResult<Body> {
        if let Some((lr, lq, body)) = &self.loaded {
            if *lr == r && *lq == q {
                return Ok(body.clone_ref(py));
            }
        }
        let ch = self.by_rank[r];
        let key = PyBytes::new(py, &rows::held_key(&ch, q));
        let store = self.store.as_ref().expect("store set").clone_ref(py);
        let blob = store.bind(py).call_method1(intern!(py, "get"), (key,))?;
        if blob.is_none() {
            let detail = format!(
                "held message at {} is in the hold-back buffer but absent from the store. \
                 Wipe the process's local state directory and restart (docs/runbooks.md, \
                 UNKNOWN_ORDERING_STATE_FORMAT)",
                self.describe(py, &ch, Some(q))
            );
            return Err(self.refuse(py, "UNKNOWN_ORDERING_STATE_FORMAT", detail));
        }
        let blob = bytes_of(&blob)?;
        let held = match state_codec::decode_held(blob.as_bytes()) {
            Ok(held) => held,
            Err(diagnosis) => {
                return Err(self.refuse(py, "UNKNOWN_ORDERING_STATE_FORMAT", diagnosis));
            }
        };
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
        let body = Body {
            ts: held.timestamp_ms,
            key: optional(held.key),
            value: optional(held.value),
            headers: PyTuple::new(py, headers)?.into_any().unbind(),
            causes: held.causes.into(),
        };
        self.loaded = Some((r, q, body.clone_ref(py)));
        Ok(body)
    }

    fn causes_of_head(&mut self, py: Python<'_>, r: usize, q: i64) -> PyResult<Causes> {
        if let Some(c) = &self.head_causes[r] {
            return Ok(c.clone());
        }
        let causes = match self.bodies.get(&(r, q)) {
            Some(body) => body.causes.clone(),
            None => self.load(py, r, q)?.causes,
        };
        self.head_causes[r] = Some(causes.clone());
        Ok(causes)
    }

    fn decide_candidates(&mut self, py: Python<'_>) -> PyResult<()> {
        let candidates = std::mem::take(&mut self.candidates);
        for &r in &candidates {
            self.is_candidate[r] = false;
        }
        for r in candidates {
            let q = match self.queues[r].front() {
                Some(&q) => q,
                None => continue,
            };
            let causes = self.causes_of_head(py, r, q)?;
            match self.first_blocker(&causes) {
                None => self.ready.push(Reverse(r)),
                Some((b, p)) => {
                    self.waiting[b].push(Reverse((p, r)));
                    self.loaded = None;
                    // Counted once: heads only move forward on a channel.
                    if q > self.waited_at[r] {
                        self.waited_at[r] = q;
                        self.waited += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Strip every `parsley.*` header of a held message's headers (a tuple of pairs).
    fn strip_reserved<'py>(headers: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = headers.py();
        let mut kept = Vec::new();
        let mut stripped = false;
        for h in headers.try_iter()? {
            let h = h?;
            let key = h.get_item(0)?;
            if key
                .downcast::<PyString>()?
                .to_str()?
                .starts_with(RESERVED_PREFIX)
            {
                stripped = true;
            } else {
                kept.push(h);
            }
        }
        if !stripped && headers.is_instance_of::<PyTuple>() {
            return Ok(headers.clone());
        }
        Ok(PyTuple::new(py, kept)?.into_any())
    }

    /// Apply the next delivery; `(rank, position, body)` or `None`.
    fn deliver_one(&mut self, py: Python<'_>) -> PyResult<Option<(usize, i64, Body)>> {
        if !self.candidates.is_empty() {
            self.decide_candidates(py)?;
        }
        let r = match self.ready.pop() {
            Some(Reverse(r)) => r,
            None => return Ok(None),
        };
        let ch = self.by_rank[r];
        let q = *self.queues[r].front().expect("a ready head");
        let body = match self.bodies.remove(&(r, q)) {
            Some(body) => body,
            None => {
                let mut held = self.load(py, r, q)?;
                self.loaded = None;
                held.headers = Self::strip_reserved(held.headers.bind(py))?.unbind();
                self.dirty_h.push((r, q));
                held
            }
        };
        self.queues[r].pop_front();
        self.held_total -= 1;
        self.head_causes[r] = None;

        match self.frontier.get_mut(&ch) {
            None => self.merge_new(py, ch, q)?,
            Some(current) => {
                if q > *current {
                    *current = q;
                    self.dirty_c.add(ch);
                    self.encoding.moved.push(ch);
                    self.header = None;
                }
            }
        }
        let causes = &body.causes;
        let same = matches!(&self.last_past, Some(last) if Rc::ptr_eq(last, causes));
        if !causes.is_empty() && !same {
            for &(c, p) in causes.iter() {
                let higher = match self.past.get(&c) {
                    None => p > -1,
                    Some(have) => p > have,
                };
                if higher {
                    self.past.set(c, p);
                    self.dirty_p.add(c);
                }
            }
            self.last_past = Some(causes.clone());
        }
        if let Some(&head) = self.queues[r].front() {
            self.add_candidate(r);
            self.raise_settled(r, head - 1);
        } else if let Some(&fed) = self.fed.get(&ch) {
            self.raise_settled(r, fed);
        }
        Ok(Some((r, q, body)))
    }

    fn header_bytes(&mut self, py: Python<'_>) -> PyResult<Py<PyBytes>> {
        let frontier = &self.frontier;
        if self
            .encoding
            .refresh(frontier.iter(), |c| frontier.get(c).unwrap_or(0))
        {
            self.header = None;
        }
        let bytes = match &self.header {
            Some(h) => h.clone_ref(py),
            None => {
                let h = PyBytes::new(py, self.encoding.bytes()).unbind();
                self.header = Some(h.clone_ref(py));
                h
            }
        };
        let n = self.encoding.bytes().len();
        if n > self.budget {
            let detail = format!(
                "expressing the causal frontier needs {n} bytes ({} channels); the \
                 configured budget is {} bytes. Raise metadata_budget_bytes here and \
                 upstream (docs/runbooks.md, METADATA_BUDGET_EXCEEDED).",
                self.frontier.len(),
                self.budget
            );
            return Err(self.refuse(py, "METADATA_BUDGET_EXCEEDED", detail));
        }
        Ok(bytes)
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
        if self.floor.is_none() {
            return Err(PyRuntimeError::new_err(
                "receive() before start(): the session floor is not set",
            ));
        }
        let ch = self.by_rank[r];

        // -- split the causes header from the application's headers, in one pass
        let n = headers.len()?;
        let mut found = false;
        let mut raw: Option<Bound<'_, PyAny>> = None;
        let app: Bound<'_, PyAny>;
        if n == 0 {
            app = PyTuple::empty(py).into_any();
        } else {
            let mut reserved = false;
            let mut duplicate = false;
            let mut kept: Vec<Bound<'_, PyAny>> = Vec::with_capacity(n);
            for h in headers.try_iter()? {
                let h = h?;
                let (k, v) = match h.downcast::<PyTuple>() {
                    Ok(t) if t.len() == 2 => (t.get_item(0)?, Some(t)),
                    // Anything else is unpacked as the reference does (`key, value = h`),
                    // so a wrong arity raises the same error.
                    _ => {
                        let pair = self.unpack_pair(py, &h)?;
                        let k = pair.get_item(0)?;
                        (k, None)
                    }
                };
                let text = match k.downcast::<PyString>() {
                    Ok(t) => t.to_str()?,
                    Err(_) => {
                        // A non-str key never equals the causes key; `startswith` raises
                        // what the reference's `key.startswith(...)` raises.
                        if k.call_method1(intern!(py, "startswith"), (RESERVED_PREFIX,))?
                            .is_truthy()?
                        {
                            reserved = true;
                        } else {
                            kept.push(h);
                        }
                        continue;
                    }
                };
                if text == CAUSES_HEADER {
                    if found {
                        duplicate = true;
                        break;
                    }
                    found = true;
                    raw = Some(match v {
                        Some(t) => t.get_item(1)?,
                        None => h.get_item(1)?,
                    });
                } else if text.starts_with(RESERVED_PREFIX) {
                    reserved = true;
                } else {
                    kept.push(h);
                }
            }
            if duplicate {
                return Err(self.undecodable(py, &ch, q, "duplicate parsley.causes headers"));
            }
            app = if found || reserved {
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
        }

        // -- causes: budget before decode
        let mut entry: Option<Rc<Decoded>> = None;
        if found {
            let raw = match raw {
                Some(v) if !v.is_none() => v,
                _ => {
                    return Err(self.undecodable(
                        py,
                        &ch,
                        q,
                        "causes header present with null value",
                    ))
                }
            };
            let raw = bytes_of(&raw)?;
            let raw_len = raw.as_bytes().len();
            if raw_len > self.budget {
                let detail = format!(
                    "{} carries {raw_len} bytes of causal metadata; the configured budget is \
                     {} bytes. Raise metadata_budget_bytes here and upstream \
                     (docs/runbooks.md, METADATA_BUDGET_EXCEEDED)",
                    self.describe(py, &ch, Some(q)),
                    self.budget
                );
                return Err(self.refuse(py, "METADATA_BUDGET_EXCEEDED", detail));
            }
            let data = raw.as_bytes();
            entry = match self.decoded.get(data) {
                Some(e) => Some(e.clone()),
                None => {
                    let decoded = match decode_causes(data) {
                        Ok(d) => d,
                        Err(diagnosis) => return Err(self.undecodable(py, &ch, q, &diagnosis)),
                    };
                    if self.decoded.len() >= DECODE_CACHE_ENTRIES {
                        self.decoded.clear();
                    }
                    let foreign: Vec<(Channel, i64)> = decoded
                        .iter()
                        .filter(|(c, _)| {
                            self.received_topics.contains(&c.topic) && !self.rank.contains_key(c)
                        })
                        .copied()
                        .collect();
                    let e = Rc::new(Decoded {
                        causes: decoded.into(),
                        foreign: foreign.into(),
                        merged_epoch: Cell::new(-1),
                    });
                    self.decoded.insert(data.into(), e.clone());
                    Some(e)
                }
            };
        }
        let causes: Causes = match &entry {
            Some(e) => e.causes.clone(),
            None => self.no_causes.clone(),
        };

        // -- in-execution order
        if let Some(before) = self.fed_exec[r] {
            if q <= before {
                let detail = format!(
                    "fed {} after this execution was already fed offset {before} of the same \
                     partition; the host must feed each channel in increasing position \
                     order. Restart; if it recurs at the same offsets, keep the logs and \
                     report it (docs/runbooks.md, OUT_OF_ORDER_FEED)",
                    self.describe(py, &ch, Some(q))
                );
                return Err(self.refuse(py, "OUT_OF_ORDER_FEED", detail));
            }
        }
        self.fed_exec[r] = Some(q);

        // -- receipt merges every cause into the frontier, before the duplicate check
        if let Some(e) = &entry {
            let epoch = self.epoch;
            if !e.causes.is_empty() && e.merged_epoch.get() != epoch {
                self.merge_causes(py, &e.causes)?;
                e.merged_epoch.set(epoch);
            }
        }

        // -- coverage: dead channel, invariant guard, replay drop
        if let Some(&fed) = self.fed.get(&ch) {
            if q <= fed {
                if fed == FED_TO_END {
                    let detail = format!(
                        "fed {} on a channel recorded as no longer existing; the identity \
                         verdict was wrong. Reset the process, keep the logs and report it \
                         (docs/runbooks.md, OUT_OF_ORDER_FEED)",
                        self.describe(py, &ch, Some(q))
                    );
                    return Err(self.refuse(py, "OUT_OF_ORDER_FEED", detail));
                }
                let floor_at = self.floor.as_ref().and_then(|f| f.get(&ch).copied());
                if floor_at.is_none() || q > floor_at.unwrap() {
                    let floor_text = floor_at.map_or_else(|| "none".to_string(), |f| f.to_string());
                    let detail = format!(
                        "fed {} which this execution's own coverage already records as fed \
                         or never arriving (fedUpTo={fed}), above the session floor of \
                         {floor_text}; the host's feed and the engine's record contradict \
                         each other. A restart resumes from the committed record, and this \
                         refusal then does not recur (docs/runbooks.md, \
                         COVERED_POSITION_FED).",
                        self.describe(py, &ch, Some(q))
                    );
                    return Err(self.refuse(py, "COVERED_POSITION_FED", detail));
                }
                return Ok(false);
            }
        }

        if let Some(e) = &entry {
            if !e.foreign.is_empty() && self.sabotage != SABOTAGE_IGNORE_CROSS_PARTITION {
                self.cross_partition(py, r, q, key, &e.foreign)?;
            }
        }

        // -- accept: cover, hold
        self.fed.insert(ch, q);
        self.dirty_f.add(ch);
        self.bodies.insert(
            (r, q),
            Body {
                ts,
                key: key.clone().unbind(),
                value: value.clone().unbind(),
                headers: app.unbind(),
                causes: causes.clone(),
            },
        );
        self.body_order.push((r, q));
        self.queues[r].push_back(q);
        self.held_total += 1;
        if self.queues[r].len() == 1 {
            self.head_causes[r] = Some(causes);
            self.add_candidate(r);
            self.raise_settled(r, q - 1);
        }
        Ok(true)
    }

    fn cross_partition(
        &mut self,
        py: Python<'_>,
        r: usize,
        q: i64,
        key: &Bound<'_, PyAny>,
        foreign: &[(Channel, i64)],
    ) -> PyResult<()> {
        let ch = self.by_rank[r];
        let key_text: String = self.refs().describe_key.bind(py).call1((key,))?.extract()?;
        if self.cross_refuse {
            let (cause, position) = foreign[0];
            let detail = format!(
                "the record at {} ({key_text}) names a cause at {}, a partition another task \
                 of this process reads, so no task can hold the record until its cause is \
                 delivered. Usually a keying or partitioner mistake upstream: produce the \
                 input keyed, with the murmur2_random partitioner (Java's default), and reset \
                 the process past the record; if an upstream stage deliberately fans in \
                 partitions, cross_partition_causes = \"warn\" carries such causes \
                 unenforced (docs/runbooks.md, CROSS_PARTITION_CAUSE)",
                self.describe(py, &ch, Some(q)),
                self.describe(py, &cause, Some(position))
            );
            return Err(self.refuse(py, "CROSS_PARTITION_CAUSE", detail));
        }
        self.cross_count += 1;
        for &(cause, position) in foreign {
            if !self.cross_warned.insert((r, cause)) {
                continue;
            }
            if self.on_warning.is_some() {
                let text = format!(
                    "the record at {} ({key_text}) names a cause at {}, a partition another \
                     task of this process reads: the cause is carried unenforced (the \
                     received topics' partition counts differ, or cross_partition_causes = \
                     \"warn\"). Said once per pair of partitions; counted in status as \
                     cross_partition_causes; cross_partition_causes = \"refuse\" makes it a \
                     refusal (docs/runbooks.md, CROSS_PARTITION_CAUSE)",
                    self.describe(py, &ch, Some(q)),
                    self.describe(py, &cause, Some(position))
                );
                if let Some(cb) = &self.on_warning {
                    cb.bind(py).call1((text,))?;
                }
            }
        }
        Ok(())
    }

    fn causes_tuple<'py>(
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

    fn map_dict<'py>(
        &mut self,
        py: Python<'py>,
        entries: Vec<(Channel, i64)>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (c, p) in entries {
            d.set_item(self.py_channel(py, &c)?, p)?;
        }
        Ok(d)
    }
}

fn long_value(py: Python<'_>, v: Option<i64>) -> PyObject {
    match v {
        Some(v) => PyBytes::new(py, &v.to_be_bytes()).into_any().unbind(),
        None => py.None(),
    }
}

#[pymethods]
impl EngineCore {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        EngineCore {
            refs: None,
            store: None,
            budget: 0,
            sabotage: 0,
            cross_refuse: false,
            on_warning: None,
            labels: None,
            by_rank: Vec::new(),
            py_by_rank: Vec::new(),
            rank: FxMap::default(),
            received_topics: FxSet::default(),
            obj_rank: FxMap::default(),
            py_channels: FxMap::default(),
            fed: FxMap::default(),
            frontier: OrderedMap::default(),
            encoding: FrontierEncoding::default(),
            header: None,
            past: OrderedMap::default(),
            queues: Vec::new(),
            held_total: 0,
            bodies: FxMap::default(),
            body_order: Vec::new(),
            head_causes: Vec::new(),
            loaded: None,
            settled: Vec::new(),
            candidates: Vec::new(),
            is_candidate: Vec::new(),
            waiting: Vec::new(),
            ready: BinaryHeap::new(),
            floor: None,
            fed_exec: Vec::new(),
            dirty_f: OrderedSet::default(),
            dirty_c: OrderedSet::default(),
            dirty_p: OrderedSet::default(),
            dirty_h: Vec::new(),
            decoded: FxMap::default(),
            epoch: 0,
            last_past: None,
            warned: false,
            stamp_version: false,
            cross_warned: FxSet::default(),
            cross_count: 0,
            waited: 0,
            waited_at: Vec::new(),
            no_causes: Rc::from(Vec::new()),
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
        let engine = py.import("parsley.engine.engine")?;
        let outcome = engine.getattr("FeedOutcome")?;
        self.refs = Some(Refs {
            error: refusals.getattr("ParsleyFailClosedError")?.unbind(),
            reason: refusals.getattr("Reason")?.unbind(),
            describe_channel: channel.getattr("describe_channel")?.unbind(),
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
            object_new: py.import("builtins")?.getattr("object")?.getattr("__new__")?.unbind(),
            accepted: outcome.getattr("ACCEPTED")?.unbind(),
            dropped: outcome.getattr("DUPLICATE_DROPPED")?.unbind(),
        });
        self.store = Some(store);
        self.budget = budget;
        self.on_warning = on_warning;
        self.cross_refuse = cross_refuse;
        self.sabotage = sabotage;
        self.stamp_version = stamp_version;
        self.labels = Some(labels);
        for (r, obj) in received.iter().enumerate() {
            let ch = channel_of(obj)
                .ok_or_else(|| PyValueError::new_err("received channels must be ChannelId"))?;
            self.by_rank.push(ch);
            self.py_by_rank.push(obj.clone().unbind());
            self.rank.insert(ch, r);
            self.received_topics.insert(ch.topic);
        }
        let n = self.by_rank.len();
        self.queues = (0..n).map(|_| VecDeque::new()).collect();
        self.head_causes = vec![None; n];
        self.is_candidate = vec![false; n];
        self.waited_at = vec![-1; n];
        self.waiting = (0..n).map(|_| BinaryHeap::new()).collect();
        self.fed_exec = vec![None; n];
        for (k, v) in fed.iter() {
            let ch = channel_of(&k).ok_or_else(|| PyValueError::new_err("bad fed channel"))?;
            self.fed.insert(ch, v.extract()?);
        }
        for (k, v) in frontier.iter() {
            let ch = channel_of(&k).ok_or_else(|| PyValueError::new_err("bad frontier channel"))?;
            self.frontier.set(ch, v.extract()?);
            self.encoding.added(&ch);
        }
        for (k, v) in past.iter() {
            let ch = channel_of(&k).ok_or_else(|| PyValueError::new_err("bad past channel"))?;
            self.past.set(ch, v.extract()?);
        }
        for (k, v) in held.iter() {
            let ch = channel_of(&k).ok_or_else(|| PyValueError::new_err("bad held channel"))?;
            let r = match self.rank.get(&ch) {
                Some(&r) => r,
                None => continue,
            };
            let positions: Vec<i64> = v.extract()?;
            self.held_total += positions.len();
            self.queues[r].extend(positions);
        }
        self.settled = (0..n)
            .map(|r| match self.queues[r].front() {
                Some(&head) => head - 1,
                None => self
                    .fed
                    .get(&self.by_rank[r])
                    .copied()
                    .unwrap_or(NOTHING_SETTLED),
            })
            .collect();
        for r in 0..n {
            if !self.queues[r].is_empty() {
                self.add_candidate(r);
            }
        }
        self.check_warning(py)
    }

    /// Replace the topic id -> name labels used in details.
    fn _set_labels(&mut self, labels: PyObject) {
        self.labels = Some(labels);
    }

    /// Raise coverage of `ch` to `position` (the identity check's fed-to-end).
    fn _advance_fed(&mut self, ch: &Bound<'_, PyAny>, position: i64) -> PyResult<()> {
        let ch = channel_of(ch).ok_or_else(|| PyValueError::new_err("not a channel"))?;
        self.advance_fed_inner(ch, position);
        Ok(())
    }

    /// Prune frontier and delivered-past entries on the given topic ids (16-byte bytes);
    /// returns whether anything was pruned.
    fn _prune(&mut self, dead: Vec<Vec<u8>>) -> bool {
        let dead: FxSet<TopicId> = dead
            .iter()
            .filter_map(|t| t.as_slice().try_into().ok())
            .collect();
        let gone_c = self.frontier.remove_where(|c| dead.contains(&c.topic));
        for c in &gone_c {
            self.encoding.removed(c);
            self.dirty_c.add(*c);
        }
        if !gone_c.is_empty() {
            self.header = None;
        }
        let gone_p = self.past.remove_where(|c| dead.contains(&c.topic));
        for c in &gone_p {
            self.dirty_p.add(*c);
        }
        let pruned = !gone_c.is_empty() || !gone_p.is_empty();
        if pruned {
            self.epoch += 1;
            self.last_past = None;
        }
        pruned
    }

    /// Held channels in channel order: `[(channel, positions tuple, head causes tuple)]`.
    fn _held_heads<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for r in 0..self.by_rank.len() {
            let head = match self.queues[r].front() {
                Some(&head) => head,
                None => continue,
            };
            let causes = self.causes_of_head(py, r, head)?;
            let causes = self.causes_tuple(py, &causes)?;
            let positions = PyTuple::new(py, self.queues[r].iter().copied())?;
            out.append((self.py_by_rank[r].clone_ref(py), positions, causes))?;
        }
        Ok(out)
    }

    /// `start(start_positions)`: see `ProcessEngine.start`.
    fn start(&mut self, py: Python<'_>, start_positions: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.floor.is_some() {
            return Err(PyRuntimeError::new_err(
                "start() was already called for this engine",
            ));
        }
        for r in 0..self.by_rank.len() {
            let ch = self.by_rank[r];
            if let Some(past) = self.past.get(&ch) {
                self.advance_fed_inner(ch, past);
            }
        }
        let items = start_positions.call_method0(intern!(py, "items"))?;
        for item in items.try_iter()? {
            let item = item?;
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
            if start > 0 {
                if let Some(r) = self.rank_of_obj(&obj) {
                    self.advance_fed_inner(self.by_rank[r], start - 1);
                }
            }
        }
        self.floor = Some(self.fed.clone());
        Ok(())
    }

    /// Whether `start` has run.
    #[getter]
    fn started(&self) -> bool {
        self.floor.is_some()
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
        let refs = self.refs();
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
            let topic = rec.call_method0(intern!(py, "topic"))?;
            let offset_obj = rec.call_method0(intern!(py, "offset"))?;
            let mut headers = rec.call_method0(intern!(py, "headers"))?;
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
            let ts_obj = rec.call_method0(intern!(py, "timestamp"))?.get_item(1)?;
            let (offset, ts) = self.checked_feed(py, r, &offset_obj, &ts_obj)?;
            let key = rec.call_method0(intern!(py, "key"))?;
            let value = rec.call_method0(intern!(py, "value"))?;
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
            Some((r, q, body)) => (r, q, body),
            None => return Ok(py.None()),
        };
        let causes = self.causes_tuple(py, &body.causes)?;
        let ch = self.py_by_rank[r].clone_ref(py);
        // A frozen slots dataclass: build it as its own __init__ would, without running
        // that __init__'s seven object.__setattr__ calls in Python.
        let refs = self.refs();
        let msg = refs.object_new.bind(py).call1((refs.deliverable.bind(py),))?;
        let values: [Bound<'_, PyAny>; 7] = [
            ch.into_bound(py),
            q.into_pyobject(py)?.into_any(),
            body.ts.into_pyobject(py)?.into_any(),
            body.key.into_bound(py),
            body.value.into_bound(py),
            body.headers.into_bound(py),
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
    fn deliver_batch<'py>(
        &mut self,
        py: Python<'py>,
        limit: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        while (out.len() as i64) < limit {
            let (r, q, body) = match self.deliver_one(py)? {
                Some((r, q, body)) => (r, q, body),
                None => break,
            };
            let header = self.header_bytes(py)?;
            let ch = self.py_by_rank[r].clone_ref(py);
            out.append((ch, q, body.ts, body.key, body.value, body.headers, header))?;
        }
        Ok(out)
    }

    /// The `parsley.causes` value every send of the current step carries.
    fn causes_header(&mut self, py: Python<'_>) -> PyResult<Py<PyBytes>> {
        self.header_bytes(py)
    }

    /// The changelog rows of `take_deltas` but the name rows: `v`, `h`, `h` tombstones,
    /// `f`, `c`, `p`, in the Python engine's order. Clears the marks.
    fn _take_rows<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        if self.stamp_version {
            out.append((PyBytes::new(py, b"v"), PyBytes::new(py, b"\x01")))?;
        }
        // Drained, not replaced: the maps keep their capacity from commit to commit.
        let order: Vec<(usize, i64)> = self.body_order.drain(..).collect();
        for (r, q) in order {
            let body = match self.bodies.remove(&(r, q)) {
                Some(body) => body,
                None => continue,
            };
            let key = body.key.bind(py);
            let value = body.value.bind(py);
            let key = optional_bytes(key)?;
            let value = optional_bytes(value)?;
            let mut header_parts = Vec::new();
            for h in body.headers.bind(py).try_iter()? {
                let h = h?;
                let k = h.get_item(0)?;
                let k = k.downcast::<PyString>()?.to_str()?.as_bytes().to_vec();
                let v = optional_bytes(&h.get_item(1)?)?;
                header_parts.push((k, v));
            }
            let header_refs: Vec<(&[u8], Option<&[u8]>)> = header_parts
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_ref().map(|b| b.as_bytes())))
                .collect();
            let blob = rows::encode_held(
                body.ts,
                key.as_ref().map(|b| b.as_bytes()),
                value.as_ref().map(|b| b.as_bytes()),
                &header_refs,
                &body.causes,
            );
            let ch = self.by_rank[r];
            out.append((
                PyBytes::new(py, &rows::held_key(&ch, q)),
                PyBytes::new(py, &blob),
            ))?;
        }
        for (r, q) in std::mem::take(&mut self.dirty_h) {
            let ch = self.by_rank[r];
            out.append((PyBytes::new(py, &rows::held_key(&ch, q)), py.None()))?;
        }
        for ch in self.dirty_f.items() {
            let v = long_value(py, self.fed.get(ch).copied());
            out.append((PyBytes::new(py, &rows::channel_key(rows::TAG_FED, ch)), v))?;
        }
        for ch in self.dirty_c.items() {
            let v = long_value(py, self.frontier.get(ch));
            out.append((
                PyBytes::new(py, &rows::channel_key(rows::TAG_FRONTIER, ch)),
                v,
            ))?;
        }
        for ch in self.dirty_p.items() {
            let v = long_value(py, self.past.get(ch));
            out.append((PyBytes::new(py, &rows::channel_key(rows::TAG_PAST, ch)), v))?;
        }
        self.stamp_version = false;
        self.dirty_f.clear();
        self.dirty_c.clear();
        self.dirty_p.clear();
        self.encoding.trim(self.frontier.len());
        Ok(out)
    }

    /// `fedUpTo(ch)`, `FED_TO_END` for a deleted channel, or `None`.
    fn covered(&self, ch: &Bound<'_, PyAny>) -> Option<i64> {
        channel_of(ch).and_then(|c| self.fed.get(&c).copied())
    }

    /// `settled(ch)`: head - 1 if anything is held, else covered, else `None`.
    fn settled(&self, ch: &Bound<'_, PyAny>) -> Option<i64> {
        let c = channel_of(ch)?;
        if let Some(&r) = self.rank.get(&c) {
            if let Some(&head) = self.queues[r].front() {
                return Some(head - 1);
            }
        }
        self.fed.get(&c).copied()
    }

    /// Coverage of `ch` when `start` ran (`None` if none, or not started).
    fn session_floor(&self, ch: &Bound<'_, PyAny>) -> Option<i64> {
        let c = channel_of(ch)?;
        self.floor.as_ref()?.get(&c).copied()
    }

    /// Messages held on `ch`, or on every channel when `ch` is `None`.
    #[pyo3(signature = (ch=None))]
    fn held_count(&self, ch: Option<&Bound<'_, PyAny>>) -> usize {
        match ch {
            None => self.held_total,
            Some(obj) => channel_of(obj)
                .and_then(|c| self.rank.get(&c).copied())
                .map_or(0, |r| self.queues[r].len()),
        }
    }

    /// Positions held on `ch` in FIFO (ascending) order.
    fn held_positions<'py>(
        &self,
        py: Python<'py>,
        ch: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        match channel_of(ch).and_then(|c| self.rank.get(&c).copied()) {
            None => Ok(PyTuple::empty(py)),
            Some(r) => PyTuple::new(py, self.queues[r].iter().copied()),
        }
    }

    /// The frontier's encoded size in bytes (docs/wire-format.md, "Size").
    fn frontier_bytes(&self) -> usize {
        self.encoding.size()
    }

    /// The frontier as a new dict (channel -> position), insertion order.
    fn _frontier_dict<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let entries: Vec<(Channel, i64)> = self.frontier.iter().map(|(c, p)| (*c, p)).collect();
        self.map_dict(py, entries)
    }

    /// The delivered past as a new dict (channel -> position), insertion order.
    fn _past_dict<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let entries: Vec<(Channel, i64)> = self.past.iter().map(|(c, p)| (*c, p)).collect();
        self.map_dict(py, entries)
    }

    /// Topic ids (as 16-byte bytes) of the frontier and the delivered past.
    fn _state_topics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyFrozenSet>> {
        let mut ids: FxSet<TopicId> = FxSet::default();
        ids.extend(self.frontier.iter().map(|(c, _)| c.topic));
        ids.extend(self.past.iter().map(|(c, _)| c.topic));
        let items: Vec<Bound<'py, PyBytes>> = ids.iter().map(|t| PyBytes::new(py, t)).collect();
        PyFrozenSet::new(py, &items)
    }

    /// The metadata budget, bytes (tests lower it under a restored frontier).
    #[getter(_budget)]
    fn budget_get(&self) -> usize {
        self.budget
    }

    #[setter(_budget)]
    fn budget_set(&mut self, budget: usize) {
        self.budget = budget;
    }

    /// What the engine keeps in memory, for the tests that bound it: `(held bodies not
    /// yet persisted as [(channel, position)], {channel: causes of its head},
    /// the one decoded blob as (channel, position) or None)`.
    fn _memory<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let bodies = PyList::empty(py);
        for &(r, q) in &self.body_order {
            if self.bodies.contains_key(&(r, q)) {
                bodies.append((self.py_by_rank[r].clone_ref(py), q))?;
            }
        }
        let heads = PyDict::new(py);
        for r in 0..self.by_rank.len() {
            if let Some(c) = self.head_causes[r].clone() {
                heads.set_item(self.py_by_rank[r].clone_ref(py), self.causes_tuple(py, &c)?)?;
            }
        }
        let loaded = match &self.loaded {
            Some((r, q, _)) => (self.py_by_rank[*r].clone_ref(py), *q)
                .into_pyobject(py)?
                .into_any(),
            None => py.None().into_bound(py),
        };
        (bodies, heads, loaded).into_pyobject(py)
    }

    /// Messages accepted with a cause the task could not enforce.
    fn cross_partition_causes(&self) -> u64 {
        self.cross_count
    }

    /// Heads found waiting for a cause not yet delivered since this engine was built,
    /// each counted once.
    fn waited_count(&self) -> u64 {
        self.waited
    }
}

/// Register `EngineCore` in the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<EngineCore>()
}
