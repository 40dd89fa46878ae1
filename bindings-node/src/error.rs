//! Every failure the binding reports, and the one place it becomes a JS error.
//!
//! A core error (`leafid::Error`) becomes a `LeafError` (the class index.js defines and
//! hands over with [`set_leaf_error_class`]; a plain `Error` before that) whose
//! `message` is the core's message, with the core's method and option names respelled
//! as Node spells them (`create_tag` → `createTag`, `wait_timeout` → `waitTimeoutMs`),
//! and whose `code` is the core's stable code (`LEAF_TAG_NOT_FOUND`, …). Made while a
//! synchronous call runs, its stack is the caller's; a Promise's rejection is made on
//! the event loop with no JS frames, so index.js's wrappers re-make it where the caller
//! awaits (`atCallSite`). A bad argument becomes Node's own
//! error, as its built-in modules throw them: a `TypeError` with `ERR_INVALID_ARG_TYPE`
//! or `ERR_INVALID_ARG_VALUE`, a `RangeError` with `ERR_OUT_OF_RANGE`.
//! Synchronous calls throw it; Promises reject with the same object.

use std::cell::Cell;
use std::ffi::CString;
use std::ptr;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;

thread_local! {
    /// The `LeafError` constructor of this thread's environment (Node runs one
    /// environment per JS thread: the main one and each `worker_threads` worker), a
    /// strong reference that lives as long as the environment.
    static LEAF_ERROR: Cell<sys::napi_ref> = const { Cell::new(ptr::null_mut()) };
}

/// Called once by index.js with its `LeafError` class: every core error is made as one
/// from then on (`instanceof LeafError`, `name === 'LeafError'`). Not public API.
#[napi(js_name = "__setLeafErrorClass")]
pub fn set_leaf_error_class(env: Env, class: Function<'_>) -> Result<()> {
    let mut reference = ptr::null_mut();
    // SAFETY: a function value of this call's env; `reference` is a local.
    check_status!(unsafe {
        sys::napi_create_reference(env.raw(), class.raw(), 1, &mut reference)
    })?;
    let old = LEAF_ERROR.with(|c| c.replace(reference));
    if !old.is_null() {
        // SAFETY: a reference made by an earlier call in this same environment.
        unsafe { sys::napi_delete_reference(env.raw(), old) };
    }
    Ok(())
}

/// `new LeafError(message, code)`, or null when no class was set or it threw.
///
/// # Safety
/// `env` must be the live environment of the current (JS) thread.
unsafe fn new_leaf_error(
    env: sys::napi_env,
    message: sys::napi_value,
    code: sys::napi_value,
) -> sys::napi_value {
    let reference = LEAF_ERROR.with(Cell::get);
    if reference.is_null() {
        return ptr::null_mut();
    }
    let (mut class, mut error) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: the reference was made in this thread's environment; out-pointers are
    // locals.
    unsafe {
        if sys::napi_get_reference_value(env, reference, &mut class) != sys::Status::napi_ok
            || class.is_null()
        {
            return ptr::null_mut();
        }
        let argv = [message, code];
        if sys::napi_new_instance(env, class, 2, argv.as_ptr(), &mut error) != sys::Status::napi_ok
        {
            // A constructor that threw leaves its exception pending: clear it, the
            // plain Error takes its place.
            let mut ignored = ptr::null_mut();
            sys::napi_get_and_clear_last_exception(env, &mut ignored);
            return ptr::null_mut();
        }
    }
    error
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

/// Why a call failed, before it becomes a JS value.
#[derive(Debug)]
pub enum Failure {
    /// An error of the core, with its code.
    Leaf(leafid::Error),
    /// A bad argument, found by the binding's conversion.
    Node(NodeError, String),
    /// Something that cannot happen (a core task panicked): a plain `Error`.
    Internal(String),
}

/// A result whose error is a [`Failure`].
pub type Fallible<T> = std::result::Result<T, Failure>;

impl From<leafid::Error> for Failure {
    fn from(e: leafid::Error) -> Self {
        Failure::Leaf(e)
    }
}

/// How the core's names read in Node. Conversion only: each core name the core's
/// messages mention (methods, options) and the name a Node user knows it by. The
/// longer names come first so `next_id_async` is not read as `next_id` + `_async`
/// (matching is per whole identifier anyway).
const NODE_NAMES: &[(&str, &str)] = &[
    ("create_tag", "createTag"),
    ("create_table", "createTable"),
    ("next_id_async", "nextIdAsync"),
    ("next_ids_async", "nextIdsAsync"),
    ("next_id_now", "nextId"),
    ("next_ids_now", "nextIds"),
    ("next_id", "nextId"),
    ("next_ids", "nextIds"),
    ("next_id_string", "nextIdString"),
    ("close_within", "close"),
    ("close_async", "close"),
    ("wait_timeout", "waitTimeoutMs"),
    ("refresh_interval", "refreshIntervalMs"),
    ("double_buffer", "doubleBuffer"),
    ("max_step", "maxStep"),
    ("js_safe", "jsSafe"),
    ("thread_chunk", "threadChunk"),
    ("registry_url", "registry"),
    ("cache_dir", "cacheDir"),
    ("max_backward", "maxBackwardMs"),
    ("startup_wait", "startupWaitMs"),
    ("max_skew", "maxSkewMs"),
    ("timestamp_bits", "timestampBits"),
    ("worker_bits", "workerBits"),
    ("sequence_bits", "sequenceBits"),
    ("epoch_ms", "epochMs"),
];

/// The core's message as Node reads it: the core's names respelled ([`node_names`]),
/// and a missing table created by the option `createTable: true`, where the core names
/// Rust's builder.
fn message(e: &leafid::Error) -> String {
    match e {
        leafid::Error::TableMissing { table } => leafid::error::table_missing_message(
            table,
            "the option createTable: true (SegmentGenerator.connect(url, { createTable: true }))",
        ),
        _ => node_names(&e.to_string()),
    }
}

/// `message` with every core name of [`NODE_NAMES`] (as a whole identifier) respelled,
/// and the core's waiting calls named as Node's: `nextId` never waits, so only
/// `nextIdAsync` is one.
pub fn node_names(message: &str) -> String {
    let message = &message.replace(leafid::error::WAITING_CALLS, "nextIdAsync");
    let mut out = String::with_capacity(message.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let node = NODE_NAMES.iter().find(|(core, _)| *core == word.as_str());
        out.push_str(node.map_or(word.as_str(), |(_, js)| js));
        word.clear();
    };
    for c in message.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

impl Failure {
    /// `TypeError` `ERR_INVALID_ARG_TYPE`: `what` (`The "tag" argument`) is not `expected`.
    pub fn arg_type(what: &str, expected: &str, got: ValueType) -> Self {
        let got = match got {
            ValueType::Undefined => "undefined",
            ValueType::Null => "null",
            ValueType::Boolean => "type boolean",
            ValueType::Number => "type number",
            ValueType::String => "type string",
            ValueType::Symbol => "type symbol",
            ValueType::Object => "an instance of Object",
            ValueType::Function => "type function",
            ValueType::External => "an external value",
            ValueType::BigInt => "type bigint",
            _ => "an unknown value",
        };
        Failure::Node(
            NodeError::InvalidArgType,
            format!("{what} must be {expected}. Received {got}"),
        )
    }

    /// `RangeError` `ERR_OUT_OF_RANGE`.
    pub fn out_of_range(message: String) -> Self {
        Failure::Node(NodeError::OutOfRange, message)
    }

    /// The JS error object (null if the environment is tearing down).
    ///
    /// # Safety
    /// `env` must be the live environment of the current (JS) thread.
    pub unsafe fn into_value(self, env: sys::napi_env) -> sys::napi_value {
        let leaf = matches!(self, Failure::Leaf(_));
        let (kind, code, message) = match self {
            Failure::Leaf(e) => (None, e.code(), message(&e)),
            Failure::Node(kind, message) => {
                let code = match kind {
                    NodeError::InvalidArgType => "ERR_INVALID_ARG_TYPE",
                    NodeError::InvalidArgValue => "ERR_INVALID_ARG_VALUE",
                    NodeError::OutOfRange => "ERR_OUT_OF_RANGE",
                    NodeError::InvalidKeyLength => "ERR_CRYPTO_INVALID_KEYLEN",
                };
                (Some(kind), code, message)
            }
            Failure::Internal(message) => (None, "", message),
        };
        // SAFETY: a live env (the caller's promise); out-pointers are locals and the
        // strings are created (copied) by Node before they drop.
        unsafe {
            let (mut code_js, mut msg_js, mut error) =
                (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
            // Messages hold no NUL; one that did would lose it, not the error.
            let text = CString::new(message.replace('\0', "")).unwrap_or_default();
            let len = text.as_bytes().len() as isize;
            sys::napi_create_string_utf8(env, text.as_ptr(), len, &mut msg_js);
            if !code.is_empty() {
                sys::napi_create_string_utf8(
                    env,
                    code.as_ptr().cast(),
                    code.len() as isize,
                    &mut code_js,
                );
            }
            match kind {
                Some(NodeError::InvalidArgType | NodeError::InvalidArgValue) => {
                    sys::napi_create_type_error(env, code_js, msg_js, &mut error)
                }
                Some(NodeError::OutOfRange | NodeError::InvalidKeyLength) => {
                    sys::napi_create_range_error(env, code_js, msg_js, &mut error)
                }
                None if leaf => {
                    error = new_leaf_error(env, msg_js, code_js);
                    if error.is_null() {
                        sys::napi_create_error(env, code_js, msg_js, &mut error);
                    }
                    sys::Status::napi_ok
                }
                None => sys::napi_create_error(env, code_js, msg_js, &mut error),
            };
            error
        }
    }

    /// Throws the error from a raw callback (a pending exception for its caller).
    ///
    /// # Safety
    /// `env` must be the current callback's env.
    pub unsafe fn throw_raw(self, env: sys::napi_env) {
        // SAFETY: the callback's env.
        unsafe {
            let error = self.into_value(env);
            if !error.is_null() {
                sys::napi_throw(env, error);
            }
        }
    }

    /// The error as napi's `Error`, holding the JS object: napi throws (or rejects
    /// with) that very object.
    pub fn into_napi(self, env: &Env) -> Error {
        let fallback = Error::new(Status::GenericFailure, format!("{self:?}"));
        // SAFETY: `env` is the live environment of the current call.
        let raw = unsafe { self.into_value(env.raw()) };
        if raw.is_null() {
            // The environment is tearing down: nobody can observe the error.
            return fallback;
        }
        // SAFETY: `raw` was just created in `env`.
        Error::from(unsafe { Unknown::from_raw_unchecked(env.raw(), raw) })
    }
}

/// Node's `kind` of error with `message`, as napi's `Error` (see [`Failure::into_napi`]).
pub fn node_error(env: &Env, kind: NodeError, message: &str) -> Error {
    Failure::Node(kind, message.to_string()).into_napi(env)
}

/// Throws Node's `kind` of error with `message` from a raw callback.
///
/// # Safety
/// `env` must be the current callback's env.
pub unsafe fn throw_node_error(env: sys::napi_env, kind: NodeError, message: &str) {
    // SAFETY: the caller's promise.
    unsafe { Failure::Node(kind, message.to_string()).throw_raw(env) }
}

/// `Result<T, Failure>` → napi's result, for `#[napi]` methods.
pub trait IntoJs<T> {
    /// Maps the error side with [`Failure::into_napi`].
    fn js(self, env: &Env) -> Result<T>;
}

impl<T, E: Into<Failure>> IntoJs<T> for std::result::Result<T, E> {
    #[inline]
    fn js(self, env: &Env) -> Result<T> {
        self.map_err(|e| e.into().into_napi(env))
    }
}

#[cfg(test)]
mod tests {
    use super::node_names;

    #[test]
    fn respells_whole_core_names_only() {
        assert_eq!(
            node_names("create it with create_tag(\"a\", …) or insert into leaf_alloc"),
            "create it with createTag(\"a\", …) or insert into leaf_alloc"
        );
        assert_eq!(
            node_names("raise wait_timeout; call next_id_async or refresh()"),
            "raise waitTimeoutMs; call nextIdAsync or refresh()"
        );
        assert_eq!(node_names("max_id and biz_tag"), "max_id and biz_tag");
    }

    #[test]
    fn names_nextidasync_as_the_waiting_call_never_nextid() {
        let waiting = format!("use the waiting call ({})", leafid::error::WAITING_CALLS);
        assert_eq!(node_names(&waiting), "use the waiting call (nextIdAsync)");
    }
}
