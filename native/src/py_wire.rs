//! PyO3 wrappers of the `parsley.causes` codec (`crate::wire`), and the Python-object
//! helpers every wrapper shares: the bounded channel cache (Rust channel <-> Python
//! `ChannelId`) and refusal construction.
//!
//! The Python API is `parsley/wire.py`'s (docs/wire-format.md): the same values, the same
//! `ParsleyFailClosedError` (reason and detail). Encoding falls back to the Python
//! reference (`parsley.wire.reference_encode_causes`) for any input it does not take on
//! itself (a non-`ChannelId` key, a position outside int64 or not encodable), so every
//! `ValueError`/`TypeError` is the reference's own.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::wire::{self, Channel, TopicId};

/// A small fast hasher (the Fx multiply-rotate) for the caches; their keys are not
/// attacker-chosen in a way a hash flood could exploit beyond the cache bound.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_i32(&mut self, i: i32) {
        self.write_u64(i as u32 as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub type FxBuild = BuildHasherDefault<FxHasher>;

/// Cache bounds, as `parsley/wire.py`: cleared wholesale at 4,096 topics or 65,536
/// channels, so memory stays bounded whatever a sender writes.
const CACHE_TOPICS: usize = 4096;
const CACHE_CHANNELS: usize = 65_536;

struct TopicEntry {
    uuid: Py<PyAny>,
    channels: HashMap<i32, Py<PyAny>, FxBuild>,
}

/// Both directions of the channel cache. `by_object` maps the address of a `ChannelId`
/// the cache holds a strong reference to (so the address cannot be reused while the entry
/// lives) to its Rust channel.
#[derive(Default)]
struct ChannelCache {
    topics: HashMap<TopicId, TopicEntry, FxBuild>,
    channels: usize,
    by_object: HashMap<usize, (Channel, Py<PyAny>), FxBuild>,
}

/// Held only around pure-Rust map operations, never across a call into Python (which may
/// switch threads while this lock is held elsewhere).
static CACHE: Mutex<Option<ChannelCache>> = Mutex::new(None);

fn with_cache<R>(f: impl FnOnce(&mut ChannelCache) -> R) -> R {
    let mut guard = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(ChannelCache::default))
}

static UUID_TYPE: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static CHANNEL_TYPE: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static FAIL_CLOSED: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static REASON: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static REFERENCE_ENCODE: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static REFERENCE_SIZE: GILOnceCell<Py<PyAny>> = GILOnceCell::new();

fn imported<'py>(
    py: Python<'py>,
    cell: &'static GILOnceCell<Py<PyAny>>,
    module: &str,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    cell.import(py, module, name)
}

/// A `ParsleyFailClosedError(Reason.<reason>, detail)` as a Python exception.
pub fn refusal(py: Python<'_>, reason: &str, detail: &str) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = imported(
            py,
            &FAIL_CLOSED,
            "parsley.refusals",
            "ParsleyFailClosedError",
        )?;
        let member = imported(py, &REASON, "parsley.refusals", "Reason")?.getattr(reason)?;
        Ok(PyErr::from_value(cls.call1((member, detail))?))
    };
    build().unwrap_or_else(|e| e)
}

/// `UNDECODABLE_METADATA` with `detail`.
pub fn undecodable(py: Python<'_>, detail: &str) -> PyErr {
    refusal(py, "UNDECODABLE_METADATA", detail)
}

/// The Python `ChannelId` for a channel, from the bounded cache (the same object while it
/// stays cached), built with `ChannelId(UUID(bytes=topic), partition)` on a miss.
pub fn channel_object(py: Python<'_>, ch: &Channel) -> PyResult<Py<PyAny>> {
    let (hit, uuid) = with_cache(|c| match c.topics.get(&ch.topic) {
        None => (None, None),
        Some(t) => (
            t.channels.get(&ch.partition).map(|o| o.clone_ref(py)),
            Some(t.uuid.clone_ref(py)),
        ),
    });
    if let Some(obj) = hit {
        return Ok(obj);
    }
    channel_miss(py, ch, uuid)
}

#[cold]
fn channel_miss(py: Python<'_>, ch: &Channel, uuid: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
    let uuid = match uuid {
        Some(u) => u,
        None => {
            let kwargs = PyDict::new(py);
            kwargs.set_item("bytes", PyBytes::new(py, &ch.topic))?;
            imported(py, &UUID_TYPE, "uuid", "UUID")?
                .call((), Some(&kwargs))?
                .unbind()
        }
    };
    let obj = imported(py, &CHANNEL_TYPE, "parsley.engine.channel", "ChannelId")?
        .call1((uuid.bind(py), ch.partition))?
        .unbind();
    let stored = obj.clone_ref(py);
    let reverse = obj.clone_ref(py);
    // Entries dropped here are released after the lock (their drop decrefs, which may run
    // no Python code but is kept outside anyway).
    let dropped = with_cache(|c| {
        let mut dropped = None;
        if c.channels >= CACHE_CHANNELS
            || (!c.topics.contains_key(&ch.topic) && c.topics.len() >= CACHE_TOPICS)
        {
            dropped = Some(std::mem::take(c));
        }
        let entry = c.topics.entry(ch.topic).or_insert_with(|| TopicEntry {
            uuid: uuid.clone_ref(py),
            channels: HashMap::default(),
        });
        if entry.channels.insert(ch.partition, stored).is_none() {
            c.channels += 1;
        }
        if c.by_object.len() < CACHE_CHANNELS {
            c.by_object
                .insert(reverse.as_ptr() as usize, (*ch, reverse));
        }
        dropped
    });
    drop(dropped);
    Ok(obj)
}

/// The Rust channel of a Python `ChannelId` (any object with `topic_id: UUID` and
/// `partition: int`), by object identity from the cache when it holds it.
pub fn channel_of_object(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Channel> {
    let key = obj.as_ptr() as usize;
    if let Some(ch) = with_cache(|c| c.by_object.get(&key).map(|e| e.0)) {
        return Ok(ch);
    }
    let topic_int: u128 = obj
        .getattr(pyo3::intern!(py, "topic_id"))?
        .getattr(pyo3::intern!(py, "int"))?
        .extract()?;
    let partition: i32 = obj.getattr(pyo3::intern!(py, "partition"))?.extract()?;
    let ch = Channel::new(topic_int.to_be_bytes(), partition);
    let reverse = obj.clone().unbind();
    let dropped = with_cache(|c| {
        let mut dropped = None;
        if c.by_object.len() >= CACHE_CHANNELS {
            dropped = Some(std::mem::take(&mut c.by_object));
        }
        c.by_object.insert(key, (ch, reverse));
        dropped
    });
    drop(dropped);
    Ok(ch)
}

/// Empty the channel cache (both directions).
#[pyfunction]
pub fn clear_channel_cache() {
    let old = with_cache(std::mem::take);
    drop(old);
}

/// channel_cache_size()
/// --
///
/// ``(topics, channels, objects)`` the channel cache holds now (each bounded: 4,096
/// topics, 65,536 channels, 65,536 reverse entries), for tests.
#[pyfunction]
pub fn channel_cache_size() -> (usize, usize, usize) {
    with_cache(|c| {
        let held: usize = c.topics.values().map(|t| t.channels.len()).sum();
        debug_assert_eq!(held, c.channels);
        (c.topics.len(), held, c.by_object.len())
    })
}

/// The bytes of a header value: borrowed from `bytes`, copied from any other buffer (as
/// `bytes(value)` in the reference).
fn with_value<R>(
    py: Python<'_>,
    value: &Bound<'_, PyAny>,
    f: impl FnOnce(&[u8]) -> PyResult<R>,
) -> PyResult<R> {
    if let Ok(b) = value.downcast::<PyBytes>() {
        return f(b.as_bytes());
    }
    if value.is_none() {
        return Err(undecodable(py, "causes header present with null value"));
    }
    let copied = py.get_type::<PyBytes>().call1((value,))?;
    let b = copied.downcast::<PyBytes>()?;
    f(b.as_bytes())
}

/// decode_causes(value, /)
/// --
///
/// Decode a ``parsley.causes`` header value (the native implementation of
/// :func:`parsley.wire.reference_decode_causes`: same dict of ``ChannelId`` -> position in
/// channel order, same ``ParsleyFailClosedError(UNDECODABLE_METADATA, diagnosis)``).
#[pyfunction]
pub fn decode_causes<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    with_value(py, value, |data| decode_bytes(py, data))
}

/// Decode `data` into a Python dict (for the wrappers and the engine).
pub fn decode_bytes<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    // Parse in pure Rust first: a refused value builds no Python object.
    let mut entries: Vec<(Channel, i64)> = Vec::with_capacity(data.len() / 9);
    if let Err(diagnosis) = wire::decode_causes_into(data, &mut entries) {
        return Err(undecodable(py, &diagnosis));
    }
    let dict = PyDict::new(py);
    let objects = channel_objects(py, &entries)?;
    for ((_, position), obj) in entries.iter().zip(objects) {
        dict.set_item(obj.bind(py), *position)?;
    }
    Ok(dict)
}

/// decode_pairs(value, /)
/// --
///
/// Decode a header value into a tuple of ``(ChannelId, position)`` pairs in channel order
/// (the shape of ``DeliverableMessage.causes``), without the dict :func:`decode_causes`
/// builds. Refusals as :func:`decode_causes`.
#[pyfunction]
pub fn decode_pairs<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    with_value(py, value, |data| {
        let mut entries: Vec<(Channel, i64)> = Vec::with_capacity(data.len() / 9);
        wire::decode_causes_into(data, &mut entries).map_err(|d| undecodable(py, &d))?;
        pairs_tuple(py, &entries)
    })
}

/// A tuple of ``(ChannelId, position)`` pairs for `entries`, in their order.
pub fn pairs_tuple<'py>(
    py: Python<'py>,
    entries: &[(Channel, i64)],
) -> PyResult<Bound<'py, PyTuple>> {
    let objects = channel_objects(py, entries)?;
    let mut pairs = Vec::with_capacity(entries.len());
    for ((_, position), ch) in entries.iter().zip(objects) {
        pairs.push(PyTuple::new(
            py,
            [ch.into_bound(py), position.into_pyobject(py)?.into_any()],
        )?);
    }
    PyTuple::new(py, pairs)
}

/// The `ChannelId` objects of `entries`, one cache lock for all hits.
pub fn channel_objects(py: Python<'_>, entries: &[(Channel, i64)]) -> PyResult<Vec<Py<PyAny>>> {
    let mut missing = false;
    let mut objects: Vec<Option<Py<PyAny>>> = with_cache(|c| {
        let mut last: Option<(&TopicId, &TopicEntry)> = None;
        entries
            .iter()
            .map(|(ch, _)| {
                let topic = match last {
                    Some((t, e)) if *t == ch.topic => Some(e),
                    _ => {
                        let e = c.topics.get(&ch.topic);
                        last = e.map(|e| (&ch.topic, e));
                        e
                    }
                };
                let hit = topic
                    .and_then(|t| t.channels.get(&ch.partition))
                    .map(|o| o.clone_ref(py));
                missing |= hit.is_none();
                hit
            })
            .collect()
    });
    if missing {
        for (slot, (ch, _)) in objects.iter_mut().zip(entries) {
            if slot.is_none() {
                *slot = Some(channel_object(py, ch)?);
            }
        }
    }
    Ok(objects.into_iter().map(|o| o.expect("filled")).collect())
}

/// The (channel, position) pairs of a mapping in its iteration order, or `None` when an
/// entry is not a channel with an int64 position (the reference then decides).
fn extract_causes(
    py: Python<'_>,
    causes: &Bound<'_, PyAny>,
) -> PyResult<Option<Vec<(Channel, i64)>>> {
    let mut out = Vec::new();
    if let Ok(d) = causes.downcast::<PyDict>() {
        out.reserve(d.len());
        for (k, v) in d.iter() {
            match (channel_of_object(py, &k), v.extract::<i64>()) {
                (Ok(ch), Ok(p)) => out.push((ch, p)),
                _ => return Ok(None),
            }
        }
        return Ok(Some(out));
    }
    for item in causes
        .call_method0(pyo3::intern!(py, "items"))?
        .try_iter()?
    {
        let item = item?;
        let (k, v) = match (item.get_item(0), item.get_item(1)) {
            (Ok(k), Ok(v)) => (k, v),
            _ => return Ok(None),
        };
        match (channel_of_object(py, &k), v.extract::<i64>()) {
            (Ok(ch), Ok(p)) => out.push((ch, p)),
            _ => return Ok(None),
        }
    }
    Ok(Some(out))
}

/// encode_causes(causes, /)
/// --
///
/// Encode a cause set in its one canonical form (the native implementation of
/// :func:`parsley.wire.reference_encode_causes`: same bytes, same ``ValueError``).
#[pyfunction]
pub fn encode_causes<'py>(
    py: Python<'py>,
    causes: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(mut entries) = extract_causes(py, causes)? {
        if wire::encode_error(&entries).is_none() {
            if entries.is_empty() {
                return Ok(PyBytes::new(py, &wire::EMPTY_CAUSES).into_any());
            }
            entries.sort_unstable_by_key(|e| e.0);
            return Ok(PyBytes::new(py, &wire::encode_causes(&entries)).into_any());
        }
    }
    imported(
        py,
        &REFERENCE_ENCODE,
        "parsley.wire",
        "reference_encode_causes",
    )?
    .call1((causes,))
}

/// encoded_size(causes, /)
/// --
///
/// Exact length in bytes of :func:`encode_causes` for ``causes`` (the native
/// implementation of :func:`parsley.wire.reference_encoded_size`, same ``ValueError``).
#[pyfunction]
pub fn encoded_size<'py>(
    py: Python<'py>,
    causes: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(mut entries) = extract_causes(py, causes)? {
        if wire::encode_error(&entries).is_none() {
            entries.sort_unstable_by_key(|e| e.0);
            return Ok(wire::encoded_size(&entries).into_pyobject(py)?.into_any());
        }
    }
    imported(
        py,
        &REFERENCE_SIZE,
        "parsley.wire",
        "reference_encoded_size",
    )?
    .call1((causes,))
}

/// decode_count(value, /)
/// --
///
/// Decode a header value in Rust only and return the number of entries (for benchmarks:
/// the cost without building Python values). Refusals as :func:`decode_causes`.
#[pyfunction]
pub fn decode_count(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<usize> {
    with_value(py, value, |data| {
        let mut entries: Vec<(Channel, i64)> = Vec::with_capacity(data.len() / 9);
        wire::decode_causes_into(data, &mut entries).map_err(|d| undecodable(py, &d))?;
        Ok(entries.len())
    })
}

/// An identity the optimizer cannot see through (`std::hint::black_box` needs Rust 1.66;
/// the crate builds with Debian 12's 1.63).
fn opaque<T>(x: T) -> T {
    // SAFETY: reads a valid, initialized value once and forgets the original.
    let y = unsafe { std::ptr::read_volatile(&x) };
    std::mem::forget(x);
    y
}

/// bench_decode(value, rounds, /)
/// --
///
/// Decode ``value`` ``rounds`` times in Rust without crossing into Python; returns the
/// nanoseconds per decode (the pure-Rust figure of perf/bench_wire.py).
#[pyfunction]
pub fn bench_decode(py: Python<'_>, value: &Bound<'_, PyBytes>, rounds: u32) -> PyResult<f64> {
    let data = value.as_bytes();
    let mut entries: Vec<(Channel, i64)> = Vec::with_capacity(data.len() / 9);
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        entries.clear();
        wire::decode_causes_into(opaque(data), &mut entries).map_err(|d| undecodable(py, &d))?;
        opaque(&entries);
    }
    Ok(start.elapsed().as_nanos() as f64 / rounds.max(1) as f64)
}

/// bench_encode(value, rounds, /)
/// --
///
/// Decode ``value`` once, then encode it ``rounds`` times in Rust; nanoseconds per encode.
#[pyfunction]
pub fn bench_encode(py: Python<'_>, value: &Bound<'_, PyBytes>, rounds: u32) -> PyResult<f64> {
    let entries = wire::decode_causes(value.as_bytes()).map_err(|d| undecodable(py, &d))?;
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        opaque(wire::encode_causes(opaque(&entries)));
    }
    Ok(start.elapsed().as_nanos() as f64 / rounds.max(1) as f64)
}

/// Register the codec's functions on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_causes, m)?)?;
    m.add_function(wrap_pyfunction!(encode_causes, m)?)?;
    m.add_function(wrap_pyfunction!(encoded_size, m)?)?;
    m.add_function(wrap_pyfunction!(clear_channel_cache, m)?)?;
    m.add_function(wrap_pyfunction!(channel_cache_size, m)?)?;
    m.add_function(wrap_pyfunction!(decode_count, m)?)?;
    m.add_function(wrap_pyfunction!(decode_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(bench_decode, m)?)?;
    m.add_function(wrap_pyfunction!(bench_encode, m)?)?;
    Ok(())
}
