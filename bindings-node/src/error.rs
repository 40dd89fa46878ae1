//! `leafid::Error` → a JS `Error` whose `message` is the core's message and whose
//! `code` is the core's stable code (`LEAF_TAG_NOT_FOUND`, …). The one place errors
//! are mapped.
//!
//! napi 3's `Error<S>` is generic over its status type and throws `S` as the JS
//! `code`, so a status that is the core's code gives synchronous calls the right
//! `code` with no extra property write. A Promise rejection goes through
//! `Task::resolve`, which only returns `Error<Status>`: it gets the same object,
//! built from the same coded error and handed over as a JS value.

use napi::bindgen_prelude::*;

/// The status type of every error the binding throws: the core's `Error::code()`.
#[derive(Debug, Clone, Copy)]
pub struct LeafCode(&'static str);

impl AsRef<str> for LeafCode {
    fn as_ref(&self) -> &str {
        self.0
    }
}

/// The coded napi error for a core error.
pub fn coded(e: leafid::Error) -> Error<LeafCode> {
    Error::new(LeafCode(e.code()), e.to_string())
}

/// The same error as a JS object, for a Promise rejection.
pub fn rejection(env: &Env, e: leafid::Error) -> Error {
    let message = e.to_string();
    // SAFETY: `env` is the live environment of the current (JS) thread, which is
    // where `Task::resolve` runs.
    let raw = unsafe { JsError::from(coded(e)).into_value(env.raw()) };
    if raw.is_null() {
        // The environment is tearing down (a worker exiting): nobody can observe
        // the rejection, a plain error is as good.
        return Error::new(Status::GenericFailure, message);
    }
    // SAFETY: `raw` was just created in `env`.
    Error::from(unsafe { Unknown::from_raw_unchecked(env.raw(), raw) })
}

/// Node's own error for a bad argument, as its built-in modules throw them.
#[derive(Debug, Clone, Copy)]
pub enum NodeError {
    /// `TypeError`, `ERR_INVALID_ARG_TYPE`: the wrong kind of value.
    InvalidArgType,
    /// `TypeError`, `ERR_INVALID_ARG_VALUE`: the right kind, unusable content.
    InvalidArgValue,
    /// `RangeError`, `ERR_OUT_OF_RANGE`: a number outside what is accepted.
    OutOfRange,
    /// `RangeError`, `ERR_CRYPTO_INVALID_KEYLEN`: a key of the wrong length.
    InvalidKeyLength,
}

/// Throws `kind` with `message` and returns the error napi must not throw again
/// (its status is `PendingException`, so napi leaves the thrown one in place).
pub fn node_error(env: &Env, kind: NodeError, message: &str) -> Error {
    // SAFETY: `env` is the live environment of the current call.
    if unsafe { throw_node_error(env.raw(), kind, message) } {
        Error::new(Status::PendingException, message.to_string())
    } else {
        // Nothing was thrown (the environment is tearing down): let napi try.
        Error::new(Status::GenericFailure, message.to_string())
    }
}

/// Throws `kind` with `message` from a raw callback; false if it could not.
///
/// # Safety
/// `env` must be the current callback's env.
pub unsafe fn throw_node_error(env: napi::sys::napi_env, kind: NodeError, message: &str) -> bool {
    let (range, code): (bool, &std::ffi::CStr) = match kind {
        NodeError::InvalidArgType => (false, c"ERR_INVALID_ARG_TYPE"),
        NodeError::InvalidArgValue => (false, c"ERR_INVALID_ARG_VALUE"),
        NodeError::OutOfRange => (true, c"ERR_OUT_OF_RANGE"),
        NodeError::InvalidKeyLength => (true, c"ERR_CRYPTO_INVALID_KEYLEN"),
    };
    // Core messages hold no NUL; one that did would lose its tail, not the error.
    let msg = std::ffi::CString::new(message.replace('\0', "")).unwrap_or_default();
    // SAFETY: both strings are NUL-terminated and outlive the call.
    let status = unsafe {
        if range {
            napi::sys::napi_throw_range_error(env, code.as_ptr(), msg.as_ptr())
        } else {
            napi::sys::napi_throw_type_error(env, code.as_ptr(), msg.as_ptr())
        }
    };
    status == napi::sys::Status::napi_ok
}

/// `leafid::Result<T>` → `napi::Result<T, LeafCode>`.
pub trait IntoJs<T> {
    /// Maps the error side with [`coded`]; napi throws it with `code` set.
    fn js(self) -> Result<T, LeafCode>;
}

impl<T> IntoJs<T> for leafid::Result<T> {
    #[inline]
    fn js(self) -> Result<T, LeafCode> {
        self.map_err(coded)
    }
}
