//! Native constructors of `parsley.Send` and `parsley.Effects` for their common case:
//! the objects a handler builds for every record (docs/performance.md, "What is left
//! between this and the plain relay", item 7).
//!
//! `parsley/effects.py` is the reference and keeps every check and refusal. These
//! constructors build an object themselves only for arguments whose checks cannot fail:
//! a channel of exactly the class `Channel`, no headers (`None` or the empty tuple), and
//! no timestamp or a non-negative `int` of exactly that class that fits an `i64`. They
//! set the same fields to the same values the Python code sets. For any other argument
//! they call the Python constructor, which checks, refuses or builds.
//! `tests/unit/test_effects_native.py` compares the two over generated arguments.
//!
//! The objects live for the process (`parsley/effects.py` makes one of each at import),
//! so they take no part in garbage collection.

use std::os::raw::c_void;

use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString, PyTuple, PyType};

/// A new instance of the slotted Python class `cls`, every slot unset: what
/// `object.__new__(cls)` makes (its `tp_alloc`, `PyType_GenericAlloc`, checked by
/// [`check_allocatable`]), without the call through Python.
pub(crate) fn alloc<'py>(py: Python<'py>, cls: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `cls` is a live type object; the result is a new reference or NULL with
    // an exception set.
    unsafe {
        let obj = ffi::PyType_GenericAlloc(cls.as_type_ptr(), 0);
        Bound::from_owned_ptr_or_err(py, obj)
    }
}

/// Raises `TypeError` unless [`alloc`] makes what `object.__new__(cls)` makes: a class
/// whose `__new__` is `object`'s (no builtin base with its own, such as `bytes`), which
/// is allocated by `PyType_GenericAlloc` and is not abstract: every class a `class`
/// statement makes from `object` alone.
pub(crate) fn check_allocatable(cls: &Bound<'_, PyType>) -> PyResult<()> {
    let t = cls.as_type_ptr();
    // SAFETY: reading slots and flags of live type objects (`PyType_GetSlot` takes
    // static types from Python 3.10 on; the crate needs 3.11).
    let (alloc_slot, new_slot, object_new, flags) = unsafe {
        (
            ffi::PyType_GetSlot(t, ffi::Py_tp_alloc),
            ffi::PyType_GetSlot(t, ffi::Py_tp_new),
            ffi::PyType_GetSlot(std::ptr::addr_of_mut!(ffi::PyBaseObject_Type), ffi::Py_tp_new),
            ffi::PyType_GetFlags(t),
        )
    };
    let generic = ffi::PyType_GenericAlloc as *mut c_void;
    if alloc_slot != generic || new_slot != object_new
        || flags & ffi::Py_TPFLAGS_IS_ABSTRACT != 0
    {
        return Err(PyTypeError::new_err(format!(
            "{} is not made by object.__new__ with PyType_GenericAlloc (a builtin base, \
             its own allocator, or abstract)",
            cls.name()?
        )));
    }
    Ok(())
}

/// Set the attributes `names` of `obj` to `values` through their descriptors, as the
/// slot setters of `parsley/effects.py` (`_slot_setters`) do: a frozen dataclass's own
/// `__setattr__` is not called.
pub(crate) fn set_slots(
    obj: &Bound<'_, PyAny>,
    names: &[Py<PyString>],
    values: &[&Bound<'_, PyAny>],
) -> PyResult<()> {
    for (name, value) in names.iter().zip(values.iter()) {
        // SAFETY: three valid object pointers, held by bound references for the call.
        let rc = unsafe {
            ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), value.as_ptr())
        };
        if rc != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
    }
    Ok(())
}

/// `Constructors(Send, Effects, Channel, python_send, reduce_to)`: `send` and
/// `effects_send`, the native `parsley.effects._make_send` and `Effects.send`.
/// `python_send(channel, key, value, headers, timestamp)` is the reference, called for
/// every argument the native code does not build for. Pickled as `reduce_to()`, a
/// function that returns the process's own instance: a handler that holds
/// `Effects.send` is pickled into every spawned worker.
///
/// Raises `TypeError` when `Send` or `Effects` is not a plain slotted class.
#[pyclass(module = "parsley._native", frozen)]
pub struct Constructors {
    send: Py<PyType>,
    effects: Py<PyType>,
    channel: Py<PyType>,
    python_send: PyObject,
    reduce_to: PyObject,
    send_fields: Vec<Py<PyString>>,
    effects_fields: Vec<Py<PyString>>,
    empty: Py<PyTuple>,
}

impl Constructors {
    /// Whether the checks of `parsley.effects._fill_send` cannot fail for these
    /// arguments, and so the native code builds the `Send` with them unchanged (`None`
    /// headers become the empty tuple, as there).
    fn plain(
        &self,
        py: Python<'_>,
        channel: &Bound<'_, PyAny>,
        headers: &Option<Bound<'_, PyAny>>,
        timestamp: &Option<Bound<'_, PyAny>>,
    ) -> bool {
        if !channel.get_type().is(self.channel.bind(py)) {
            return false;
        }
        if let Some(h) = headers {
            match h.downcast_exact::<PyTuple>() {
                Ok(t) if t.is_empty() => {}
                _ => return false,
            }
        }
        if let Some(ts) = timestamp {
            if !ts.is_exact_instance_of::<PyInt>() {
                return false;
            }
            match ts.extract::<i64>() {
                Ok(ms) if ms >= 0 => {}
                _ => return false,
            }
        }
        true
    }
}

#[pymethods]
impl Constructors {
    #[new]
    fn new(
        py: Python<'_>,
        send: Bound<'_, PyType>,
        effects: Bound<'_, PyType>,
        channel: Bound<'_, PyType>,
        python_send: PyObject,
        reduce_to: PyObject,
    ) -> PyResult<Self> {
        check_allocatable(&send)?;
        check_allocatable(&effects)?;
        let names = |ns: &[&str]| ns.iter().map(|n| PyString::intern(py, n).unbind()).collect();
        Ok(Constructors {
            send: send.unbind(),
            effects: effects.unbind(),
            channel: channel.unbind(),
            python_send,
            reduce_to,
            send_fields: names(&["channel", "key", "value", "headers", "timestamp_ms"]),
            effects_fields: names(&["sends", "writes"]),
            empty: PyTuple::empty(py).unbind(),
        })
    }

    /// `(reduce_to, ())`: unpickled, the instance of the process that loads it.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, [self.reduce_to.bind(py).clone(), PyTuple::empty(py).into_any()])
    }

    /// `send(channel, key, value, headers=None, timestamp=None) -> Send`: the `Send`
    /// `EffectsBuilder.send` appends; raises what `parsley.effects._fill_send` raises.
    #[pyo3(signature = (channel, key, value, headers=None, timestamp=None))]
    fn send<'py>(
        &self,
        py: Python<'py>,
        channel: &Bound<'py, PyAny>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        headers: Option<Bound<'py, PyAny>>,
        timestamp: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !self.plain(py, channel, &headers, &timestamp) {
            return self.python_send.bind(py).call1((channel, key, value, headers, timestamp));
        }
        let send = alloc(py, self.send.bind(py))?;
        let ts = timestamp.unwrap_or_else(|| py.None().into_bound(py));
        let empty = self.empty.bind(py).as_any();
        set_slots(&send, &self.send_fields, &[channel, key, value, empty, &ts])?;
        Ok(send)
    }

    /// `Effects.send(channel, key, value, headers=None, timestamp=None) -> Effects`: the
    /// effects of one send and nothing else, equal to
    /// `Effects.builder().send(channel, key, value, headers, timestamp).build()` with
    /// one object built instead of three. Called on the class only; for more than one
    /// send or a store write use `Effects.builder()`.
    ///
    /// Args: channel, a declared `Channel` (matched by name); key and value (`None`: a
    /// null key, a tombstone); headers, application headers (a mapping or
    /// `(key, bytes | None)` pairs); timestamp, ms since the epoch (default: the
    /// delivered message's).
    ///
    /// Raises: `ParsleyFailClosedError` RESERVED_HEADER_USED for a `parsley.*` header
    /// (latched into the handler frame); `ValueError` a negative timestamp or one past
    /// Kafka's int64; `TypeError` a `channel` that is not a `Channel`, a malformed header
    /// or timestamp.
    #[pyo3(name = "effects_send", signature = (channel, key, value, headers=None, timestamp=None))]
    fn one<'py>(
        &self,
        py: Python<'py>,
        channel: &Bound<'py, PyAny>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        headers: Option<Bound<'py, PyAny>>,
        timestamp: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let send = self.send(py, channel, key, value, headers, timestamp)?;
        let effects = alloc(py, self.effects.bind(py))?;
        let sends = PyTuple::new(py, [send])?;
        let empty = self.empty.bind(py).as_any();
        set_slots(&effects, &self.effects_fields, &[sends.as_any(), empty])?;
        Ok(effects)
    }
}

/// `ClassOnly(on_class, name, message)`: a descriptor that gives `on_class` when read on
/// its class and raises `AttributeError(message)` (with `name` and the instance) when
/// read on an instance: the native `parsley.effects._ClassOnlySend`.
#[pyclass(module = "parsley._native", frozen)]
pub struct ClassOnly {
    on_class: PyObject,
    name: Py<PyString>,
    message: Py<PyString>,
}

#[pymethods]
impl ClassOnly {
    #[new]
    fn new(on_class: PyObject, name: Py<PyString>, message: Py<PyString>) -> Self {
        ClassOnly { on_class, name, message }
    }

    fn __get__(
        &self,
        py: Python<'_>,
        obj: Option<&Bound<'_, PyAny>>,
        owner: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyObject> {
        let _ = owner;
        let obj = match obj {
            Some(o) if !o.is_none() => o,
            _ => return Ok(self.on_class.clone_ref(py)),
        };
        let err = PyAttributeError::new_err(self.message.clone_ref(py));
        let value = err.value(py);
        value.setattr("name", self.name.bind(py))?;
        value.setattr("obj", obj)?;
        Err(err)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Constructors>()?;
    m.add_class::<ClassOnly>()?;
    Ok(())
}
