//! `IdCipher`, `encodeBase62`, `decodeBase62`: wrap `leafid::cipher` and
//! `leafid::base62`.
//!
//! Bad input surfaces as Node's own errors (see [`crate::error::node_error`]): a
//! non-bigint id, a non-`Uint8Array` key or a non-string is a `TypeError`
//! (`ERR_INVALID_ARG_TYPE`); an id outside `1n..2n**63n-1n` a `RangeError`
//! (`ERR_OUT_OF_RANGE`); a key of the wrong length a `RangeError`
//! (`ERR_CRYPTO_INVALID_KEYLEN`, as `crypto.createCipheriv`); a malformed base-62
//! string a `TypeError` (`ERR_INVALID_ARG_VALUE`). Messages are the core's.

use std::sync::Arc;

use leafid::IdCipher;
use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;

use crate::error::{node_error, throw_node_error, NodeError};
use crate::fast;

/// A keyed, reversible permutation of the positive 63-bit ids (NIST FF1 with AES).
#[napi(js_name = "IdCipher")]
pub struct JsIdCipher {
    inner: Arc<IdCipher>,
}

/// `value` as a `T`, or the `TypeError` naming what was expected.
fn arg<T: FromNapiValue>(env: &Env, value: Unknown<'_>, expected: &str) -> Result<T> {
    // SAFETY: `value` belongs to `env`, the current call's environment.
    unsafe { T::from_napi_value(env.raw(), value.raw()) }
        .map_err(|_| node_error(env, NodeError::InvalidArgType, expected))
}

/// `cipher.encrypt(id)`: a bound function (see [`JsIdCipher::new`]).
unsafe extern "C" fn encrypt(env: sys::napi_env, info: sys::napi_callback_info) -> fast::Raw {
    // SAFETY: installed by `JsIdCipher::new` with an `Arc<IdCipher>`.
    unsafe { apply(env, info, |c, id| c.encrypt(id)) }
}

/// `cipher.decrypt(id)`: a bound function (see [`JsIdCipher::new`]).
unsafe extern "C" fn decrypt(env: sys::napi_env, info: sys::napi_callback_info) -> fast::Raw {
    // SAFETY: installed by `JsIdCipher::new` with an `Arc<IdCipher>`.
    unsafe { apply(env, info, |c, id| c.decrypt(id)) }
}

/// Reads the bigint argument, runs `op`, returns the bigint or throws.
///
/// # Safety
/// Only for callbacks bound with an `Arc<IdCipher>` state; `env`/`info` are theirs.
#[inline]
unsafe fn apply(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    op: impl FnOnce(&IdCipher, i64) -> leafid::Result<i64>,
) -> fast::Raw {
    let mut argv = [std::ptr::null_mut(); 1];
    // SAFETY (whole block): the callback's own env, info and values; out-pointers are
    // locals.
    unsafe {
        let cipher = fast::state::<Arc<IdCipher>, 1>(env, info, &mut argv);
        let (mut id, mut lossless) = (0i64, false);
        if sys::napi_get_value_bigint_int64(env, argv[0], &mut id, &mut lossless)
            != sys::Status::napi_ok
        {
            throw_node_error(env, NodeError::InvalidArgType, "the id must be a bigint");
            return std::ptr::null_mut();
        }
        if !lossless {
            throw_node_error(
                env,
                NodeError::OutOfRange,
                "the id must be a bigint in 1n..=9223372036854775807n",
            );
            return std::ptr::null_mut();
        }
        match op(cipher, id) {
            Ok(out) => {
                let mut value = std::ptr::null_mut();
                sys::napi_create_bigint_int64(env, out, &mut value);
                value
            }
            Err(e) => {
                throw_node_error(env, NodeError::OutOfRange, &e.to_string());
                std::ptr::null_mut()
            }
        }
    }
}

/// Runs `op` over a copy of a `BigInt64Array` argument.
fn many(
    env: &Env,
    ids: Unknown<'_>,
    op: impl FnOnce(&mut [i64]) -> leafid::Result<()>,
) -> Result<BigInt64Array> {
    let ids: BigInt64Array = arg(env, ids, "ids must be a BigInt64Array")?;
    let mut out = ids.to_vec();
    op(&mut out).map_err(|e| node_error(env, NodeError::OutOfRange, &e.to_string()))?;
    Ok(BigInt64Array::new(out))
}

#[napi]
impl JsIdCipher {
    /// A cipher under `key`: 16, 24 or 32 bytes (AES-128, AES-192, AES-256).
    ///
    /// `encrypt` and `decrypt` become own, bound functions of the instance (see
    /// [`crate::fast`]): a call reads its cipher from the function's data.
    #[napi(constructor, ts_args_type = "key: Uint8Array")]
    pub fn new(env: Env, this: This<Object<'_>>, key: Unknown<'_>) -> Result<Self> {
        let key: Uint8Array = arg(&env, key, "the key must be a Buffer or Uint8Array")?;
        let inner = Arc::new(
            IdCipher::new(&key)
                .map_err(|e| node_error(&env, NodeError::InvalidKeyLength, &e.to_string()))?,
        );
        // SAFETY: `this` is the object under construction, in this call's env.
        unsafe {
            fast::bind(env.raw(), this.raw(), c"encrypt", inner.clone(), encrypt)?;
            fast::bind(env.raw(), this.raw(), c"decrypt", inner.clone(), decrypt)?;
        }
        Ok(JsIdCipher { inner })
    }

    /// `encrypt` over every id, into a new array.
    #[napi(ts_args_type = "ids: BigInt64Array", ts_return_type = "BigInt64Array")]
    pub fn encrypt_many(&self, env: Env, ids: Unknown<'_>) -> Result<BigInt64Array> {
        many(&env, ids, |ids| self.inner.encrypt_in_place(ids))
    }

    /// `decrypt` over every id, into a new array.
    #[napi(ts_args_type = "ids: BigInt64Array", ts_return_type = "BigInt64Array")]
    pub fn decrypt_many(&self, env: Env, ids: Unknown<'_>) -> Result<BigInt64Array> {
        many(&env, ids, |ids| self.inner.decrypt_in_place(ids))
    }
}

/// Defines `encodeBase62` and `decodeBase62` on the module's exports as plain
/// Node-API functions: no class, no state, so none of napi-derive's per-call
/// bookkeeping (it costs several times the encoding itself).
#[napi(module_exports)]
pub fn base62_exports(exports: Object<'_>, env: Env) -> Result<()> {
    let functions: [(&std::ffi::CStr, fast::Callback); 2] = [
        (c"encodeBase62", encode_base62),
        (c"decodeBase62", decode_base62),
    ];
    for (name, cb) in functions {
        let mut func = std::ptr::null_mut();
        // SAFETY: Node-API calls on the live env of module registration; `name` is
        // NUL-terminated and `func` a local.
        unsafe {
            check_status!(sys::napi_create_function(
                env.raw(),
                name.as_ptr(),
                name.to_bytes().len() as isize,
                Some(cb),
                std::ptr::null_mut(),
                &mut func,
            ))?;
            check_status!(sys::napi_set_named_property(
                env.raw(),
                exports.raw(),
                name.as_ptr(),
                func
            ))?;
        }
    }
    Ok(())
}

/// `encodeBase62(id)`: `id` (0n..2n**63n-1n) as 11 base-62 characters whose order is
/// the ids' order.
unsafe extern "C" fn encode_base62(env: sys::napi_env, info: sys::napi_callback_info) -> fast::Raw {
    let mut argv = [std::ptr::null_mut(); 1];
    let mut argc = 1usize;
    // SAFETY (whole block): the callback's own env, info and values; out-pointers are
    // locals.
    unsafe {
        let (this, data) = (std::ptr::null_mut(), std::ptr::null_mut());
        sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), this, data);
        let (mut id, mut lossless) = (0i64, false);
        if sys::napi_get_value_bigint_int64(env, argv[0], &mut id, &mut lossless)
            != sys::Status::napi_ok
        {
            throw_node_error(env, NodeError::InvalidArgType, "the id must be a bigint");
            return std::ptr::null_mut();
        }
        if !lossless {
            throw_node_error(
                env,
                NodeError::OutOfRange,
                "the id must be a bigint in 0n..=9223372036854775807n",
            );
            return std::ptr::null_mut();
        }
        match leafid::base62::encode_base62_bytes(id) {
            Ok(bytes) => {
                let mut out = std::ptr::null_mut();
                // `bytes` is ASCII, so Latin-1; V8 copies it.
                sys::napi_create_string_latin1(
                    env,
                    bytes.as_ptr().cast(),
                    bytes.len() as isize,
                    &mut out,
                );
                out
            }
            Err(e) => {
                throw_node_error(env, NodeError::OutOfRange, &e.to_string());
                std::ptr::null_mut()
            }
        }
    }
}

/// `decodeBase62(s)`: the id an 11-character base-62 string encodes.
unsafe extern "C" fn decode_base62(env: sys::napi_env, info: sys::napi_callback_info) -> fast::Raw {
    let mut argv = [std::ptr::null_mut(); 1];
    let mut argc = 1usize;
    // SAFETY (whole block): the callback's own env, info and values; out-pointers are
    // locals, and each buffer passed has the length given with it.
    unsafe {
        let (this, data) = (std::ptr::null_mut(), std::ptr::null_mut());
        sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), this, data);
        // A valid id is 11 bytes; a longer string is read whole so the core's message
        // can quote it.
        let mut buf = [0u8; 64];
        let mut len = 0usize;
        if sys::napi_get_value_string_utf8(
            env,
            argv[0],
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut len,
        ) != sys::Status::napi_ok
        {
            throw_node_error(
                env,
                NodeError::InvalidArgType,
                "the base-62 id must be a string",
            );
            return std::ptr::null_mut();
        }
        let spill;
        let s: &[u8] = if len + 1 < buf.len() {
            &buf[..len]
        } else {
            sys::napi_get_value_string_utf8(env, argv[0], std::ptr::null_mut(), 0, &mut len);
            let mut all = vec![0u8; len + 1];
            sys::napi_get_value_string_utf8(
                env,
                argv[0],
                all.as_mut_ptr().cast(),
                all.len(),
                &mut len,
            );
            all.truncate(len);
            spill = all;
            &spill
        };
        // Node writes whole UTF-8 characters, so this is valid UTF-8.
        let s = String::from_utf8_lossy(s);
        match leafid::decode_base62(&s) {
            Ok(id) => {
                let mut out = std::ptr::null_mut();
                sys::napi_create_bigint_int64(env, id, &mut out);
                out
            }
            Err(e) => {
                throw_node_error(env, NodeError::InvalidArgValue, &e.to_string());
                std::ptr::null_mut()
            }
        }
    }
}
