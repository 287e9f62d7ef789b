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

/// The fields of `parsley.Send` and of `parsley.Effects` the native code sets and reads,
/// in the order of [`Slots::of`]'s names, and each one's index among them.
pub(crate) const SEND_FIELDS: [&str; 5] = ["channel", "key", "value", "headers", "timestamp_ms"];
pub(crate) const CHANNEL: usize = 0;
pub(crate) const KEY: usize = 1;
pub(crate) const VALUE: usize = 2;
pub(crate) const HEADERS: usize = 3;
pub(crate) const TIMESTAMP_MS: usize = 4;
pub(crate) const EFFECTS_FIELDS: [&str; 2] = ["sends", "writes"];
pub(crate) const SENDS: usize = 0;
pub(crate) const WRITES: usize = 1;

/// The `__slots__` fields `names` of the slotted class `cls`, each located once in its
/// instances: reading or setting one is then a pointer read or write, what CPython's
/// member descriptor does for an object field (`PyMember_GetOne`, `PyMember_SetOne` for
/// `Py_T_OBJECT_EX`), without the lookup by name on every access. Setting goes through
/// the descriptor as the slot setters of `parsley/effects.py` (`_slot_setters`) do: a
/// frozen dataclass's own `__setattr__` is not called.
///
/// Only objects of exactly `cls` are accessed this way: a subclass may name another
/// descriptor for a field, so its instances go through `getattr`/`setattr`.
pub(crate) struct Slots {
    cls: Py<PyType>,
    names: Vec<Py<PyString>>,
    offsets: Vec<ffi::Py_ssize_t>,
}

impl Slots {
    /// Locates `names` on `cls`. Raises `TypeError` unless each resolves, on the class,
    /// to a writable member descriptor of an object field: a `__slots__` entry of `cls`
    /// or of a base class.
    pub(crate) fn of(cls: &Bound<'_, PyType>, names: &[&str]) -> PyResult<Self> {
        let py = cls.py();
        let mut offsets = Vec::with_capacity(names.len());
        for name in names {
            let descr = match cls.getattr(*name) {
                Ok(d) => d,
                Err(e) if e.is_instance_of::<PyAttributeError>(py) => py.None().into_bound(py),
                Err(e) => return Err(e),
            };
            // SAFETY: `descr` is a live object; its type is checked to be exactly the
            // member descriptor type before it is read as a `PyMemberDescrObject`,
            // whose `d_member` CPython declares as a `PyMemberDef` (PyO3's binding
            // types it as a getset definition, hence the cast); `d_type` is the class
            // that defines the slot.
            let member = unsafe {
                let member_type = std::ptr::addr_of_mut!(ffi::PyMemberDescr_Type);
                if ffi::Py_TYPE(descr.as_ptr()) != member_type {
                    None
                } else {
                    let d = descr.as_ptr() as *mut ffi::PyMemberDescrObject;
                    let def = (*d).d_member as *const ffi::PyMemberDef;
                    let owner = (*d).d_common.d_type;
                    Some(((*def).type_code, (*def).flags, (*def).offset, owner))
                }
            };
            match member {
                Some((code, flags, offset, owner))
                    if code == ffi::Py_T_OBJECT_EX
                        && flags & ffi::Py_READONLY == 0
                        && offset > 0
                        // SAFETY: two live type objects.
                        && unsafe { ffi::PyType_IsSubtype(cls.as_type_ptr(), owner) } != 0 =>
                {
                    offsets.push(offset)
                }
                _ => {
                    return Err(PyTypeError::new_err(format!(
                        "{}.{} is not a writable __slots__ field",
                        cls.name()?,
                        name
                    )))
                }
            }
        }
        Ok(Slots {
            cls: cls.clone().unbind(),
            names: names.iter().map(|n| PyString::intern(py, n).unbind()).collect(),
            offsets,
        })
    }

    /// Whether `obj` is of exactly the class these fields were located on.
    fn holds(&self, obj: &Bound<'_, PyAny>) -> bool {
        obj.get_type().is(self.cls.bind(obj.py()))
    }

    /// Field `i` of `obj`; an unset field raises the `AttributeError` `getattr` raises.
    pub(crate) fn get<'py>(&self, obj: &Bound<'py, PyAny>, i: usize) -> PyResult<Bound<'py, PyAny>> {
        if !self.holds(obj) {
            return obj.getattr(self.names[i].bind(obj.py()));
        }
        // SAFETY: `obj` is an instance of exactly `cls`, so the slot at this offset is
        // an object pointer (NULL while unset), which the instance keeps alive while
        // `obj` is borrowed; the new reference is taken before anything can run.
        unsafe {
            let field = (obj.as_ptr() as *mut u8).offset(self.offsets[i]) as *mut *mut ffi::PyObject;
            if (*field).is_null() {
                return obj.getattr(self.names[i].bind(obj.py()));
            }
            Ok(Bound::from_borrowed_ptr(obj.py(), *field))
        }
    }

    /// Sets the fields of `obj` to `values`, in the order of the names.
    pub(crate) fn set_all(&self, obj: &Bound<'_, PyAny>, values: &[&Bound<'_, PyAny>]) -> PyResult<()> {
        let exact = self.holds(obj);
        for (i, value) in values.iter().enumerate() {
            if !exact {
                // SAFETY: three valid object pointers, held by bound references.
                let rc = unsafe {
                    ffi::PyObject_GenericSetAttr(obj.as_ptr(), self.names[i].as_ptr(), value.as_ptr())
                };
                if rc != 0 {
                    return Err(PyErr::fetch(obj.py()));
                }
                continue;
            }
            // SAFETY: as in `get`; the old value's reference is dropped only after the
            // new one is stored, as `PyMember_SetOne` does, since dropping it may run
            // code that reads the field.
            unsafe {
                let field = (obj.as_ptr() as *mut u8).offset(self.offsets[i]) as *mut *mut ffi::PyObject;
                let old = *field;
                *field = ffi::Py_NewRef(value.as_ptr());
                ffi::Py_XDECREF(old);
            }
        }
        Ok(())
    }
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
    send_fields: Slots,
    effects_fields: Slots,
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
        let send_fields = Slots::of(&send, &SEND_FIELDS)?;
        let effects_fields = Slots::of(&effects, &EFFECTS_FIELDS)?;
        Ok(Constructors {
            send: send.unbind(),
            effects: effects.unbind(),
            channel: channel.unbind(),
            python_send,
            reduce_to,
            send_fields,
            effects_fields,
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
        self.send_fields.set_all(&send, &[channel, key, value, empty, &ts])?;
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
        self.effects_fields.set_all(&effects, &[sends.as_any(), empty])?;
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
