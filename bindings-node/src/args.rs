//! Reading JS arguments the way Node's built-in modules do: the wrong kind of value is
//! a `TypeError` (`ERR_INVALID_ARG_TYPE`), a number that is not an integer where one is
//! needed, NaN, infinite or out of range a `RangeError` (`ERR_OUT_OF_RANGE`). Nothing is
//! coerced. An options object's property that is not an option is refused
//! (`ERR_INVALID_ARG_VALUE`, naming the closest option), as TypeScript refuses it. The
//! limits are the core's (`leafid::limits`); this file only converts.

use std::fmt;
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi::{sys, JsValue};

use crate::error::{Failure, Fallible};

/// What a value is, for messages: an argument or a property of an options object.
#[derive(Clone, Copy)]
pub enum Name {
    /// `The "tag" argument`.
    Arg(&'static str),
    /// `The "options.waitTimeoutMs" property`.
    Prop(&'static str, &'static str),
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Name::Arg(name) => write!(f, "The \"{name}\" argument"),
            Name::Prop(object, key) => write!(f, "The \"{object}.{key}\" property"),
        }
    }
}

impl Name {
    fn short(self) -> String {
        match self {
            Name::Arg(name) => name.to_string(),
            Name::Prop(object, key) => format!("{object}.{key}"),
        }
    }
}

/// The value's JS type (`Unknown` if Node cannot tell, which it always can).
#[inline]
pub fn kind(v: Unknown<'_>) -> ValueType {
    v.get_type().unwrap_or(ValueType::Unknown)
}

fn expect(v: Unknown<'_>, want: ValueType, name: Name, expected: &str) -> Fallible<()> {
    match kind(v) {
        k if k == want => Ok(()),
        k => Err(Failure::arg_type(&name.to_string(), expected, k)),
    }
}

/// A string.
pub fn string(v: Unknown<'_>, name: Name) -> Fallible<String> {
    expect(v, ValueType::String, name, "of type string")?;
    // SAFETY: the value is a string (checked above).
    unsafe { v.cast::<String>() }.map_err(|e| Failure::Internal(e.to_string()))
}

/// A boolean.
pub fn boolean(v: Unknown<'_>, name: Name) -> Fallible<bool> {
    expect(v, ValueType::Boolean, name, "of type boolean")?;
    // SAFETY: the value is a boolean (checked above).
    unsafe { v.cast::<bool>() }.map_err(|e| Failure::Internal(e.to_string()))
}

/// A number (any: NaN and infinities included; the caller checks the range).
pub fn number(v: Unknown<'_>, name: Name) -> Fallible<f64> {
    expect(v, ValueType::Number, name, "of type number")?;
    // SAFETY: the value is a number (checked above).
    unsafe { v.cast::<f64>() }.map_err(|e| Failure::Internal(e.to_string()))
}

/// `v` as an integer in `min..=max`, from a number that is exactly one, or `None`.
#[inline]
pub fn integral(v: f64, min: i64, max: i64) -> Option<i64> {
    // `as` saturates, so the round trip holds only for integers that fit an i64.
    let i = v as i64;
    (v.fract() == 0.0 && i as f64 == v && (min..=max).contains(&i)).then_some(i)
}

fn out_of_range(name: Name, min: i64, max: i64, received: &dyn fmt::Display) -> Failure {
    Failure::out_of_range(format!(
        "The value of \"{}\" is out of range. It must be an integer >= {min} and <= {max}. Received {received}",
        name.short()
    ))
}

/// An integer number in `min..=max` (both within ±2^53, where numbers are exact).
pub fn integer(v: Unknown<'_>, name: Name, min: i64, max: i64) -> Fallible<i64> {
    let n = number(v, name)?;
    integral(n, min, max).ok_or_else(|| out_of_range(name, min, max, &n))
}

/// An id count: an integer number in `0..=leafid::limits::MAX_BATCH`.
pub fn count(v: Unknown<'_>, name: Name) -> Fallible<usize> {
    Ok(integer(v, name, 0, leafid::limits::MAX_BATCH as i64)? as usize)
}

/// A bigint that fits a signed 64-bit integer.
pub fn bigint(v: Unknown<'_>, name: Name) -> Fallible<i64> {
    expect(v, ValueType::BigInt, name, "of type bigint")?;
    let (mut value, mut lossless) = (0i64, false);
    // SAFETY: a bigint of a live call; out-pointers are locals.
    unsafe { sys::napi_get_value_bigint_int64(v.value().env, v.raw(), &mut value, &mut lossless) };
    if !lossless {
        return Err(Failure::out_of_range(format!(
            "The value of \"{}\" is out of range. It must be >= -(2n ** 63n) and < 2n ** 63n",
            name.short()
        )));
    }
    Ok(value)
}

/// A 64-bit integer given as a number (a safe integer) or a bigint.
pub fn int64(v: Unknown<'_>, name: Name) -> Fallible<i64> {
    const SAFE: i64 = (1 << 53) - 1;
    match kind(v) {
        ValueType::BigInt => bigint(v, name),
        ValueType::Number => integer(v, name, -SAFE, SAFE),
        k => Err(Failure::arg_type(
            &name.to_string(),
            "of type number or bigint",
            k,
        )),
    }
}

/// A duration in milliseconds, converted by the core (`leafid::limits::millis`): NaN
/// and negative numbers are refused, a huge or infinite one means "no limit".
pub fn millis(v: Unknown<'_>, name: Name) -> Fallible<Duration> {
    let ms = number(v, name)?;
    leafid::limits::millis(&name.short(), ms)
        .map_err(|e| Failure::out_of_range(crate::error::node_names(&e.to_string())))
}

/// An array of strings.
pub fn strings(v: Unknown<'_>, name: Name) -> Fallible<Vec<String>> {
    let mut is_array = false;
    // SAFETY: a value of a live call; `is_array` is a local.
    unsafe { sys::napi_is_array(v.value().env, v.raw(), &mut is_array) };
    if !is_array {
        return Err(Failure::arg_type(
            &name.to_string(),
            "an array of strings",
            kind(v),
        ));
    }
    // The length first, checked against the core's limit: a conversion to `Vec` would
    // reserve whatever length the array claims (`new Array(2**32 - 1)` aborted).
    let mut len = 0u32;
    // SAFETY: the value is an array (checked above); `len` is a local.
    unsafe { sys::napi_get_array_length(v.value().env, v.raw(), &mut len) };
    leafid::limits::tag_count(u64::from(len))
        .map_err(|e| Failure::out_of_range(crate::error::node_names(&e.to_string())))?;
    // SAFETY: the value is an array (checked above).
    let array: Object<'_> = unsafe { v.cast() }.map_err(|e| Failure::Internal(e.to_string()))?;
    (0..len)
        .map(|i| {
            let item: Unknown<'_> = array
                .get_element(i)
                .map_err(|e| Failure::Internal(e.to_string()))?;
            string(item, name)
        })
        .collect()
}

/// An options object (or `undefined`: every option at its default).
pub struct Options<'a> {
    object: Option<Object<'a>>,
    name: &'static str,
}

/// Reads the options argument `name`: an object or `undefined` (every option at its
/// default); `null` and anything else are refused, as Node's built-in modules do. A
/// property that is not one of `keys` is refused too (`TypeError`,
/// `ERR_INVALID_ARG_VALUE`, naming the closest key): plain JS gets the check
/// TypeScript makes, instead of a misspelt option silently left at its default.
pub fn options<'a>(
    v: Unknown<'a>,
    name: &'static str,
    keys: &'static [&'static str],
) -> Fallible<Options<'a>> {
    let object = match kind(v) {
        ValueType::Undefined => None,
        // SAFETY: the value is an object (checked).
        ValueType::Object => {
            Some(unsafe { v.cast::<Object<'a>>() }.map_err(|e| Failure::Internal(e.to_string()))?)
        }
        k => {
            return Err(Failure::arg_type(
                &Name::Arg(name).to_string(),
                "of type object",
                k,
            ))
        }
    };
    if object.is_some() {
        if let Some(unknown) = own_keys(v)?
            .into_iter()
            .find(|k| !keys.contains(&k.as_str()))
        {
            return Err(unknown_key(name, &unknown, keys));
        }
    }
    Ok(Options { object, name })
}

/// The object's own enumerable string keys (what a literal `{ … }` sets).
fn own_keys(v: Unknown<'_>) -> Fallible<Vec<String>> {
    let env = v.value().env;
    let mut names = std::ptr::null_mut();
    // SAFETY: an object of a live call (checked by the caller); `names` is a local.
    let status = unsafe {
        sys::napi_get_all_property_names(
            env,
            v.raw(),
            sys::KeyCollectionMode::own_only,
            sys::KeyFilter::enumerable | sys::KeyFilter::skip_symbols,
            sys::KeyConversion::numbers_to_strings,
            &mut names,
        )
    };
    if status != sys::Status::napi_ok {
        return Err(Failure::Internal(format!(
            "cannot list the options' keys (status {status})"
        )));
    }
    // SAFETY: `names` is the array Node just created in this env.
    strings_unchecked(unsafe { raw(env, names) })
}

/// The strings of an array Node made (no limit: an object's own keys).
fn strings_unchecked(v: Unknown<'_>) -> Fallible<Vec<String>> {
    let mut len = 0u32;
    // SAFETY: an array of a live call; `len` is a local.
    unsafe { sys::napi_get_array_length(v.value().env, v.raw(), &mut len) };
    // SAFETY: the value is an array.
    let array: Object<'_> = unsafe { v.cast() }.map_err(|e| Failure::Internal(e.to_string()))?;
    (0..len)
        .map(|i| {
            let item: Unknown<'_> = array
                .get_element(i)
                .map_err(|e| Failure::Internal(e.to_string()))?;
            string(item, Name::Arg("key"))
        })
        .collect()
}

/// `TypeError` `ERR_INVALID_ARG_VALUE` for the property `key` of `object`, which is not
/// one of `keys`: names the closest key when one is close, and lists them all.
fn unknown_key(object: &str, key: &str, keys: &[&str]) -> Failure {
    let hint = closest(key, keys)
        .map(|k| format!(" Did you mean \"{k}\"?"))
        .unwrap_or_default();
    Failure::Node(
        crate::error::NodeError::InvalidArgValue,
        format!(
            "The \"{object}.{key}\" property is not an option.{hint} The options are: {}",
            keys.join(", ")
        ),
    )
}

/// The key of `keys` closest to `key` (edit distance, ignoring case), if it is close
/// enough to be the one meant: at most a third of its letters differ (at least 2).
pub fn closest<'k>(key: &str, keys: &[&'k str]) -> Option<&'k str> {
    let key = key.to_lowercase();
    keys.iter()
        .map(|k| (edit_distance(&key, &k.to_lowercase()), *k))
        .min_by_key(|(d, _)| *d)
        .filter(|(d, k)| *d <= (k.len() / 3).max(2))
        .map(|(_, k)| k)
}

/// Levenshtein distance between `a` and `b` (in characters).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

impl<'a> Options<'a> {
    /// The property `key` read with `read`, or `None` when it is `undefined`.
    pub fn get<T>(
        &self,
        key: &'static str,
        read: impl FnOnce(Unknown<'a>, Name) -> Fallible<T>,
    ) -> Fallible<Option<T>> {
        let Some(object) = &self.object else {
            return Ok(None);
        };
        let v: Unknown<'a> = object
            .get_named_property(key)
            .map_err(|e| Failure::Internal(e.to_string()))?;
        match kind(v) {
            ValueType::Undefined => Ok(None),
            _ => read(v, Name::Prop(self.name, key)).map(Some),
        }
    }
}

/// The raw value `value` of a callback as an `Unknown`.
///
/// # Safety
/// `env` and `value` must belong to the current callback.
#[inline]
pub unsafe fn raw<'a>(env: sys::napi_env, value: sys::napi_value) -> Unknown<'a> {
    // SAFETY: the caller's promise.
    unsafe { Unknown::from_raw_unchecked(env, value) }
}

#[cfg(test)]
mod tests {
    use super::{closest, edit_distance};

    #[test]
    fn names_the_closest_key_only_when_close() {
        let keys = [
            "waitTimeoutMs",
            "refreshIntervalMs",
            "createTable",
            "jsSafe",
        ];
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(closest("waitTimoutMs", &keys), Some("waitTimeoutMs"));
        assert_eq!(closest("waittimeoutms", &keys), Some("waitTimeoutMs"));
        assert_eq!(closest("jssafe", &keys), Some("jsSafe"));
        assert_eq!(closest("registry", &keys), None);
    }
}
