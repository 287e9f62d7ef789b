//! A consumed record's accessors (`confluent_kafka.Message.topic()`, `.offset()`, ...)
//! called through their method descriptors, found when a record's class is met, instead
//! of looked up by name on every call: the engine calls six of them on every record it is fed
//! (docs/performance.md, "What is left...", item 10).
//!
//! The shortcut is taken only where it cannot differ from `record.name()`: on a class
//! whose attributes cannot change (an immutable type, such as confluent-kafka's C
//! `Message`), whose instances have no `__dict__` to shadow a method, whose attribute
//! lookup is the generic one (no `__getattribute__` of its own), and whose every named
//! attribute is a method descriptor defined by the class itself (not inherited from a
//! base that might change). Records of any other class (a test's fake, a subclass) are
//! called by name, as before. The descriptors are found again whenever the record's
//! class differs from the last one's (each `split_errors` call starts afresh).

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};

/// The no-argument methods `names` of the records of one class.
pub(crate) struct Methods<const N: usize> {
    names: [&'static str; N],
    /// The class last seen, and its descriptors when the shortcut holds for it.
    class: Option<(Py<PyType>, Option<Vec<PyObject>>)>,
}

impl<const N: usize> Methods<N> {
    pub(crate) fn new(names: [&'static str; N]) -> Self {
        Methods { names, class: None }
    }

    /// `record.<names[i]>()`: raises what that call raises.
    pub(crate) fn call<'py>(&mut self, record: &Bound<'py, PyAny>, i: usize) -> PyResult<Bound<'py, PyAny>> {
        let py = record.py();
        let ty = record.get_type();
        let seen = match &self.class {
            Some((c, _)) => c.bind(py).is(&ty),
            None => false,
        };
        if !seen {
            let found = descriptors(&ty, &self.names);
            self.class = Some((ty.unbind(), found));
        }
        let descriptor = match &self.class {
            Some((_, Some(d))) => &d[i],
            _ => return record.call_method0(PyString::intern(py, self.names[i])),
        };
        let args = [record.as_ptr()];
        // SAFETY: a method descriptor of the record's own class, called with the record
        // as its only positional argument (what `record.name()` does after the lookup);
        // both are live for the call, and the result is a new reference or NULL with
        // an exception set.
        unsafe {
            let out = ffi::PyObject_Vectorcall(descriptor.as_ptr(), args.as_ptr(), 1, std::ptr::null_mut());
            Bound::from_owned_ptr_or_err(py, out)
        }
    }
}

/// The method descriptors `names` of `ty`, or `None` when calling one of them directly
/// could differ from calling the method by name on an instance (see the module docs).
fn descriptors(ty: &Bound<'_, PyType>, names: &[&str]) -> Option<Vec<PyObject>> {
    let t = ty.as_type_ptr();
    // SAFETY: reading the flags, the instance dict offset and the attribute hook of a live
    // type object.
    let (flags, dict_offset, getattro) =
        unsafe { (ffi::PyType_GetFlags(t), (*t).tp_dictoffset, (*t).tp_getattro) };
    let generic_getattr = ffi::PyObject_GenericGetAttr as ffi::getattrofunc as usize;
    let generic = getattro.map(|f| f as usize) == Some(generic_getattr);
    if flags & ffi::Py_TPFLAGS_IMMUTABLETYPE == 0 || dict_offset != 0 || !generic {
        return None;
    }
    let mut found = Vec::with_capacity(names.len());
    for name in names {
        let d = match ty.getattr(*name) {
            Ok(d) => d,
            Err(_) => return None,
        };
        // SAFETY: the object's type is compared with the method descriptor type before
        // it is read as a descriptor, whose `d_type` is the class that defines it.
        let own_method = unsafe {
            ffi::Py_TYPE(d.as_ptr()) == std::ptr::addr_of_mut!(ffi::PyMethodDescr_Type)
                && (*(d.as_ptr() as *mut ffi::PyDescrObject)).d_type == t
        };
        if !own_method {
            return None;
        }
        found.push(d.unbind());
    }
    Some(found)
}
