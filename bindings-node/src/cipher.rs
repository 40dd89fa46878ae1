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

/// `id` (0n..2n**63n-1n) as 11 base-62 characters whose order is the ids' order.
#[napi(ts_args_type = "id: bigint", ts_return_type = "string")]
pub fn encode_base62(env: Env, id: Unknown<'_>) -> Result<String> {
    let id: BigInt = arg(&env, id, "the id must be a bigint")?;
    let (id, lossless) = id.get_i64();
    if !lossless {
        return Err(node_error(
            &env,
            NodeError::OutOfRange,
            "the id must be a bigint in 0n..=9223372036854775807n",
        ));
    }
    leafid::encode_base62(id).map_err(|e| node_error(&env, NodeError::OutOfRange, &e.to_string()))
}

/// The id an 11-character base-62 string encodes.
#[napi(ts_args_type = "s: string", ts_return_type = "bigint")]
pub fn decode_base62(env: Env, s: Unknown<'_>) -> Result<BigInt> {
    let s: String = arg(&env, s, "the base-62 id must be a string")?;
    leafid::decode_base62(&s)
        .map(BigInt::from)
        .map_err(|e| node_error(&env, NodeError::InvalidArgValue, &e.to_string()))
}
