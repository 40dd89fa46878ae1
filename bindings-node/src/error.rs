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
