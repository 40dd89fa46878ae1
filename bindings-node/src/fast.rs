//! Hand-written glue for the `nextId`, `nextIds` and `nextIdString` methods, the
//! benchmark's subject.
//!
//! napi-derive 3 wraps every `#[napi]` method in receiver bookkeeping (a borrow
//! scope on a thread-local stack, guard vectors behind a mutex, class identity
//! checks), and even a bare `napi_unwrap` of `this` plus the type-tag check that
//! makes it sound are two private-property lookups: together most of a call's cost.
//! So `nextId` is a function bound to its core object instead: when a generator or
//! handle reaches JS, a clone of the core object goes into the `data` of a fresh
//! function, set as the instance's own `nextId`. A call reads `data` (no lookup),
//! calls the core and creates the bigint. The clone is dropped when the function is
//! collected. Errors go through [`crate::error::Failure`] like every other call.
//!
//! The bound functions call the core's `_now` functions: they never wait on I/O, so the
//! event loop never stalls behind a database or a registry (issue 12).
//!
//! `_nextIdAtHand` is the fast path of `nextIdAsync` (index.js): the id if the core has
//! it in memory (`next_id_at_hand`, or `try_next_id` in snowflake mode), else `undefined`
//! without throwing and without taking an id, so that `nextIdAsync` resolves at once
//! with the id and otherwise takes its waiting path, where every error comes from
//! (issue 31).

use std::ffi::{c_char, c_void, CStr};
use std::ptr;

use napi::bindgen_prelude::*;
use napi::sys;

use crate::args;
use crate::error::Failure;

/// A raw callback's return value; null when it threw.
pub type Raw = sys::napi_value;

/// A raw Node-API callback.
pub type Callback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> Raw;

/// A `#[napi]` class whose instances get a bound `nextId` and `nextIds` when they
/// reach JS.
pub trait BindsNextId: ToNapiValue {
    /// What the bound functions issue from (a clone of the core object each).
    type State: Clone + Send + 'static;
    /// The clone for the functions' `data`.
    fn state(&self) -> Self::State;
    /// `nextId`; it reads its state with [`state`]`::<Self::State, _>`.
    const NEXT_ID: Callback;
    /// `nextIds`, the same way.
    const NEXT_IDS: Callback;
    /// `nextIdString`, the same way.
    const NEXT_ID_STRING: Callback;
    /// `_nextIdAtHand`, the same way (see the module's comment).
    const NEXT_ID_AT_HAND: Callback;
}

/// A class instance on its way to JS that gets its bound functions on arrival.
pub struct Bound<T>(pub T);

impl<T: BindsNextId> ToNapiValue for Bound<T> {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        let state = val.0.state();
        // SAFETY: called by napi on the JS thread with a live env.
        unsafe {
            let obj = T::to_napi_value(env, val.0)?;
            bind(env, obj, c"nextId", state.clone(), T::NEXT_ID)?;
            bind(env, obj, c"nextIds", state.clone(), T::NEXT_IDS)?;
            bind(env, obj, c"nextIdString", state.clone(), T::NEXT_ID_STRING)?;
            bind(env, obj, c"_nextIdAtHand", state, T::NEXT_ID_AT_HAND)?;
            Ok(obj)
        }
    }
}

impl<T: TypeName> TypeName for Bound<T> {
    fn type_name() -> &'static str {
        T::type_name()
    }
    fn value_type() -> ValueType {
        T::value_type()
    }
}

/// # Safety
/// `env` and `obj` must be live values of the current call.
///
/// Creates a function `name` whose `data` is `state` (freed when the function is
/// collected) and defines it on `obj`, writable and configurable like a method, not
/// enumerable.
pub unsafe fn bind<S: Send + 'static>(
    env: sys::napi_env,
    obj: Raw,
    name: &'static CStr,
    state: S,
    cb: Callback,
) -> Result<()> {
    let data = Box::into_raw(Box::new(state)).cast::<c_void>();
    let mut func = ptr::null_mut();
    // SAFETY: Node-API calls on a live env; out-pointers are locals. `data` is owned
    // by the finalizer once it is attached, and freed here if it cannot be.
    unsafe {
        let len = name.to_bytes().len() as isize;
        let made = sys::napi_create_function(env, name.as_ptr(), len, Some(cb), data, &mut func);
        if made != sys::Status::napi_ok
            || sys::napi_add_finalizer(
                env,
                func,
                data,
                Some(drop_state::<S>),
                ptr::null_mut(),
                ptr::null_mut(),
            ) != sys::Status::napi_ok
        {
            drop(Box::from_raw(data.cast::<S>()));
            return Err(Error::new(
                Status::GenericFailure,
                "cannot create a bound method",
            ));
        }
        let descriptor = sys::napi_property_descriptor {
            utf8name: name.as_ptr(),
            name: ptr::null_mut(),
            method: None,
            getter: None,
            setter: None,
            value: func,
            attributes: sys::PropertyAttributes::writable | sys::PropertyAttributes::configurable,
            data: ptr::null_mut(),
        };
        check_status!(sys::napi_define_properties(env, obj, 1, &descriptor))
    }
}

unsafe extern "C" fn drop_state<S>(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Box<S>` `bind` gave this function; finalizers run once.
    drop(unsafe { Box::from_raw(data.cast::<S>()) });
}

/// The bound function's state and its `N` arguments (unset ones are `undefined`).
///
/// # Safety
/// Only for callbacks installed by [`Bound`] with state `S`; `env` and `info` are the
/// callback's own. The function (and so the state) lives while it runs.
#[inline]
pub unsafe fn state<'a, S, const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    argv: &mut [sys::napi_value; N],
) -> &'a S {
    let mut argc = N;
    let mut data: *mut c_void = ptr::null_mut();
    // SAFETY: the callback's own env and info; out-pointers are locals.
    unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            argv.as_mut_ptr(),
            ptr::null_mut(),
            &mut data,
        );
        &*(data as *const S)
    }
}

/// Converts a core result into the JS value (a bigint), or throws the coded error.
///
/// # Safety
/// `env` must be the callback's env.
#[inline]
pub unsafe fn bigint(env: sys::napi_env, id: leafid::Result<i64>) -> Raw {
    match id {
        Ok(id) => {
            let mut out = ptr::null_mut();
            // SAFETY: a Node-API call on the callback's env; `out` is a local.
            unsafe { sys::napi_create_bigint_int64(env, id, &mut out) };
            out
        }
        Err(e) => {
            // SAFETY: as above; throwing leaves the exception pending for the caller.
            unsafe { Failure::Leaf(e).throw_raw(env) };
            ptr::null_mut()
        }
    }
}

/// The id as a bigint, or `undefined` for `None` (never throws).
///
/// # Safety
/// `env` must be the callback's env.
#[inline]
pub unsafe fn bigint_or_undefined(env: sys::napi_env, id: Option<i64>) -> Raw {
    let mut out = ptr::null_mut();
    // SAFETY: Node-API calls on the callback's env; `out` is a local.
    unsafe {
        match id {
            Some(id) => sys::napi_create_bigint_int64(env, id, &mut out),
            None => sys::napi_get_undefined(env, &mut out),
        };
    }
    out
}

/// The string argument `value` read as [`str_arg`] does, or `None` without throwing
/// when it is not a string (the waiting path then says what is wrong).
///
/// # Safety
/// `env` and `value` must belong to the current callback.
pub unsafe fn str_arg_quiet<'b>(
    env: sys::napi_env,
    value: sys::napi_value,
    buf: &'b mut [u8; 512],
    spill: &'b mut String,
) -> Option<&'b str> {
    let mut kind = sys::ValueType::napi_undefined;
    // SAFETY: the callback's env and value; `kind` is a local.
    unsafe { sys::napi_typeof(env, value, &mut kind) };
    if kind != sys::ValueType::napi_string {
        return None;
    }
    // SAFETY: as above; a string is read without throwing.
    unsafe { str_arg(env, value, buf, spill) }
}

/// Converts a core result into the id's decimal string, or throws the coded error.
/// The digits are written on the stack and copied once into a V8 one-byte string.
///
/// # Safety
/// `env` must be the callback's env.
#[inline]
pub unsafe fn decimal(env: sys::napi_env, id: leafid::Result<i64>) -> Raw {
    match id {
        Ok(id) => {
            // An i64 has at most 19 digits and a sign.
            let mut buf = [0u8; 20];
            let mut at = buf.len();
            let mut n = id.unsigned_abs();
            loop {
                at -= 1;
                buf[at] = b'0' + (n % 10) as u8;
                n /= 10;
                if n == 0 {
                    break;
                }
            }
            if id < 0 {
                at -= 1;
                buf[at] = b'-';
            }
            let mut out = ptr::null_mut();
            let len = (buf.len() - at) as isize;
            // SAFETY: a Node-API call on the callback's env; `buf[at..]` is ASCII
            // (so Latin-1) of `len` bytes, copied by V8; `out` is a local.
            unsafe {
                sys::napi_create_string_latin1(
                    env,
                    buf[at..].as_ptr().cast::<c_char>(),
                    len,
                    &mut out,
                )
            };
            out
        }
        Err(e) => {
            // SAFETY: as above; throwing leaves the exception pending for the caller.
            unsafe { Failure::Leaf(e).throw_raw(env) };
            ptr::null_mut()
        }
    }
}

/// Reads a string argument into `buf` without allocating; a string that does not fit
/// (longer than any valid tag) is read into a `String` instead, so the core still
/// sees it whole and rejects it with its own message. Throws a `TypeError` and
/// returns `None` for a non-string.
///
/// # Safety
/// `env` and `value` must belong to the current callback.
pub unsafe fn str_arg<'b>(
    env: sys::napi_env,
    value: sys::napi_value,
    buf: &'b mut [u8; 512],
    spill: &'b mut String,
) -> Option<&'b str> {
    let mut len = 0usize;
    // SAFETY: `buf` has `buf.len()` writable bytes; Node writes at most len - 1 and a NUL.
    let status = unsafe {
        sys::napi_get_value_string_utf8(
            env,
            value,
            buf.as_mut_ptr().cast::<c_char>(),
            buf.len(),
            &mut len,
        )
    };
    if status != sys::Status::napi_ok {
        // SAFETY: the callback's env and value.
        unsafe {
            let got = args::kind(args::raw(env, value));
            Failure::arg_type("The \"tag\" argument", "of type string", got).throw_raw(env)
        };
        return None;
    }
    // Node copies whole UTF-8 characters only: a string cut short can stop up to 4 bytes
    // before the end (a 4-byte character that did not fit), so only a copy that left
    // room for one more character is surely whole. (`len + 1 <` took a 512-byte tag of
    // 128 emoji for its 127-emoji prefix: another tag's ids.)
    if len + 4 < buf.len() {
        // Whole characters only, so valid UTF-8.
        return std::str::from_utf8(&buf[..len]).ok();
    }
    // Possibly cut short: ask for the full length, then read it all.
    // SAFETY: a null buffer asks only for the length.
    unsafe { sys::napi_get_value_string_utf8(env, value, ptr::null_mut(), 0, &mut len) };
    let mut bytes = vec![0u8; len + 1];
    // SAFETY: `bytes` has len + 1 writable bytes.
    unsafe {
        sys::napi_get_value_string_utf8(
            env,
            value,
            bytes.as_mut_ptr().cast::<c_char>(),
            bytes.len(),
            &mut len,
        )
    };
    bytes.truncate(len);
    *spill = String::from_utf8(bytes).ok()?;
    Some(spill.as_str())
}

/// Reads the id count of `nextIds` (see [`args::count`]); throws and returns `None` if
/// it is not an integer number in `0..=leafid::limits::MAX_BATCH`.
///
/// # Safety
/// `env` and `value` must belong to the current callback.
pub unsafe fn count_arg(env: sys::napi_env, value: sys::napi_value) -> Option<usize> {
    // SAFETY: the callback's env and value.
    match args::count(unsafe { args::raw(env, value) }, args::Name::Arg("n")) {
        Ok(n) => Some(n),
        Err(f) => {
            // SAFETY: the callback's env.
            unsafe { f.throw_raw(env) };
            None
        }
    }
}

/// A `BigInt64Array` of `n` ids written in place by `fill` into memory V8 allocates:
/// no Rust buffer and no external ArrayBuffer to finalize. Throws the coded error if
/// `fill` fails (the partly written array is dropped: its ids are never handed out).
///
/// # Safety
/// `env` must be the current callback's env.
pub unsafe fn filled_array(
    env: sys::napi_env,
    n: usize,
    fill: impl FnOnce(&mut [i64]) -> leafid::Result<()>,
) -> Raw {
    let (mut data, mut buffer, mut array) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: Node-API calls on the callback's env; out-pointers are locals. V8 backs
    // an ArrayBuffer with zeroed memory aligned for any element type, `n * 8` bytes
    // long, which nothing else can reach before the typed array is returned.
    unsafe {
        if sys::napi_create_arraybuffer(env, n * 8, &mut data, &mut buffer) != sys::Status::napi_ok
        {
            return ptr::null_mut();
        }
        let out: &mut [i64] = if n == 0 || data.is_null() {
            &mut []
        } else {
            std::slice::from_raw_parts_mut(data.cast::<i64>(), n)
        };
        if let Err(e) = fill(out) {
            Failure::Leaf(e).throw_raw(env);
            return ptr::null_mut();
        }
        sys::napi_create_typedarray(
            env,
            sys::TypedarrayType::bigint64_array,
            n,
            buffer,
            0,
            &mut array,
        );
        array
    }
}
