//! `SnowflakeGenerator`, `Layout`, `decode`: wrap `leafid::snowflake`.
//!
//! Synchronous calls never wait on I/O (the core's `_now` functions); `connect`, the
//! `…Async` twins and `close` return Promises settled from the core's runtime (see
//! [`crate::promise`]).

use leafid::snowflake::{Layout, SnowflakeGenerator, LEAF_EPOCH_MS};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::args::{self, Name};
use crate::error::{Failure, Fallible, IntoJs};
use crate::fast;
use crate::promise::{pending, Pending};

/// How the 63 bits of an id are split, and the epoch (default: Leaf's 41 + 10 + 12,
/// epoch 1288834974657).
#[napi(object)]
#[derive(Clone, Copy)]
pub struct LayoutJs {
    pub timestamp_bits: u8,
    pub worker_bits: u8,
    pub sequence_bits: u8,
    pub epoch_ms: i64,
}

/// A layout object (`{ timestampBits, workerBits, sequenceBits, epochMs }`, every field
/// required) as the core's `Layout`. The binding checks types and ranges (Node's
/// codes); bits the core refuses keep the core's `LEAF_INVALID_CONFIG`.
fn layout(v: Unknown<'_>, name: Name) -> Fallible<Layout> {
    let what = match name {
        Name::Arg(n) | Name::Prop(_, n) => n,
    };
    let o = args::options(
        v,
        what,
        &["timestampBits", "workerBits", "sequenceBits", "epochMs"],
    )?;
    let bits = |key| {
        o.get(key, |v, n| args::integer(v, n, 0, 63))?
            .map(|b| b as u8)
            .ok_or_else(|| missing(what, key))
    };
    let (t, w, s) = (
        bits("timestampBits")?,
        bits("workerBits")?,
        bits("sequenceBits")?,
    );
    let epoch = o
        .get("epochMs", args::int64)?
        .ok_or_else(|| missing(what, "epochMs"))?;
    Ok(Layout::new(t, w, s, epoch)?)
}

/// `ERR_INVALID_ARG_TYPE` for a required property that is `undefined`.
fn missing(object: &'static str, key: &'static str) -> Failure {
    Failure::arg_type(
        &Name::Prop(object, key).to_string(),
        "of type number",
        ValueType::Undefined,
    )
}

impl From<&Layout> for LayoutJs {
    fn from(l: &Layout) -> Self {
        LayoutJs {
            timestamp_bits: l.timestamp_bits(),
            worker_bits: l.worker_bits(),
            sequence_bits: l.sequence_bits(),
            epoch_ms: l.epoch_ms(),
        }
    }
}

/// Leaf's layout: 41 + 10 + 12 bits, epoch 1288834974657.
#[napi]
pub fn leaf_layout() -> LayoutJs {
    LayoutJs::from(&Layout::default())
}

/// Ids below 2^53 (exact as a JS number): 41 + 3 + 9 bits, Leaf's epoch
/// (see `leafid::Layout::js_safe`).
#[napi]
pub fn js_safe_layout() -> LayoutJs {
    LayoutJs::from(&Layout::js_safe())
}

/// Leaf's epoch in ms since the Unix epoch.
#[napi]
pub const LEAF_EPOCH: i64 = LEAF_EPOCH_MS;

/// The keys of `SnowflakeGenerator.connect`'s options object (index.d.ts's
/// `SnowflakeOptions`): `registry` only in the older form, `connect({ registry, … })`.
const SNOWFLAKE_KEYS: &[&str] = &[
    "registry",
    "layout",
    "cacheDir",
    "heartbeatMs",
    "lookaheadMs",
    "maxBackwardMs",
    "startupWaitMs",
    "maxSkewMs",
];

/// The core's builder from `SnowflakeGenerator.connect`'s arguments: `(url, options?)`,
/// the shape of `SegmentGenerator.connect`, or the older `({ registry, … })`.
fn builder(
    first: Unknown<'_>,
    options: Unknown<'_>,
) -> Fallible<leafid::snowflake::SnowflakeBuilder> {
    let (registry, o) = match args::kind(first) {
        ValueType::String => {
            let o = args::options(options, "options", SNOWFLAKE_KEYS)?;
            if o.get("registry", |_, _| Ok(()))?.is_some() {
                return Err(Failure::Node(
                    crate::error::NodeError::InvalidArgValue,
                    "The \"options.registry\" property is not an option of \
                     connect(url, options): the registry is the \"url\" argument"
                        .to_string(),
                ));
            }
            (args::string(first, Name::Arg("url"))?, o)
        }
        ValueType::Object => {
            // The older form takes everything in one object: a second argument would
            // be ignored, so it is refused.
            if args::kind(options) != ValueType::Undefined {
                return Err(Failure::arg_type(
                    "The second argument",
                    "undefined when the first is an options object",
                    args::kind(options),
                ));
            }
            let o = args::options(first, "options", SNOWFLAKE_KEYS)?;
            let registry = o.get("registry", args::string)?.ok_or_else(|| {
                Failure::arg_type(
                    &Name::Prop("options", "registry").to_string(),
                    "of type string",
                    ValueType::Undefined,
                )
            })?;
            (registry, o)
        }
        k => {
            return Err(Failure::arg_type(
                "The \"url\" argument",
                "of type string",
                k,
            ))
        }
    };
    let mut builder = SnowflakeGenerator::builder().registry_url(&registry)?;
    if let Some(layout) = o.get("layout", layout)? {
        builder = builder.layout(layout);
    }
    if let Some(dir) = o.get("cacheDir", args::string)? {
        builder = builder.cache_dir(dir);
    }
    if let Some(d) = o.get("heartbeatMs", args::millis)? {
        builder = builder.heartbeat(d);
    }
    if let Some(d) = o.get("lookaheadMs", args::millis)? {
        builder = builder.lookahead(d);
    }
    if let Some(d) = o.get("maxBackwardMs", args::millis)? {
        builder = builder.max_backward(d);
    }
    if let Some(d) = o.get("startupWaitMs", args::millis)? {
        builder = builder.startup_wait(d);
    }
    if let Some(d) = o.get("maxSkewMs", args::millis)? {
        builder = builder.max_skew(d);
    }
    Ok(builder)
}

/// An id split into its parts.
#[napi(object)]
pub struct DecodedIdJs {
    pub timestamp_ms: i64,
    pub worker_id: u32,
    pub sequence: u32,
}

/// Issues snowflake ids with a worker id from a registry.
#[napi(js_name = "SnowflakeGenerator")]
pub struct JsSnowflakeGenerator {
    inner: SnowflakeGenerator,
}

#[napi]
impl JsSnowflakeGenerator {
    /// Acquires a worker id from the registry `url` and starts the heartbeat on the
    /// core's runtime; also `connect({ registry, … })`, the older form. Bad options
    /// reject the Promise before any I/O.
    ///
    /// Writable and configurable (napi makes statics neither) so index.js can wrap it
    /// to re-make a rejection at the caller's `await`.
    #[napi(writable = true, configurable = true)]
    pub fn connect(
        url: Unknown<'_>,
        options: Unknown<'_>,
    ) -> Pending<fast::Bound<JsSnowflakeGenerator>> {
        pending(builder(url, options).map(|b| async move {
            b.build()
                .await
                .map(|inner| fast::Bound(JsSnowflakeGenerator { inner }))
        }))
    }

    /// The next id, waiting off the event loop when the registry is needed first.
    #[napi]
    pub fn next_id_async(&self) -> Pending<BigInt> {
        let id = self.inner.next_id_async();
        pending(Ok(async move { id.await.map(BigInt::from) }))
    }

    /// `n` ids, waiting as `nextIdAsync` does.
    #[napi]
    pub fn next_ids_async(&self, n: Unknown<'_>) -> Pending<BigInt64Array> {
        let g = self.inner.clone();
        pending(args::count(n, Name::Arg("n")).map(|n| {
            let ids = g.next_ids_async(n);
            async move { ids.await.map(BigInt64Array::new) }
        }))
    }

    /// The worker id held.
    #[napi(getter)]
    pub fn worker_id(&self) -> u32 {
        self.inner.worker_id()
    }

    /// The layout in use.
    #[napi(getter)]
    pub fn layout(&self) -> LayoutJs {
        LayoutJs::from(self.inner.layout())
    }

    /// Persists the last timestamp, releases the worker id and stops the heartbeat on
    /// the core's runtime, waiting at most the core's bound
    /// (`leafid::snowflake::DEFAULT_CLOSE_WAIT`); resolves with `true` when the worker id
    /// was released in time, `false` when the registry did not answer within the bound
    /// (the lease then expires on the registry's side). Later calls throw `LEAF_CLOSED`.
    #[napi]
    pub fn close(&self) -> Pending<bool> {
        let closed = self.inner.close_async();
        pending(Ok(async move { Ok::<_, leafid::Error>(closed.await) }))
    }
}

/// Splits an id (a bigint) into timestamp, worker id and sequence.
#[napi]
pub fn decode(env: Env, id: Unknown<'_>, layout: Unknown<'_>) -> Result<DecodedIdJs> {
    (|| -> Fallible<DecodedIdJs> {
        let value = args::bigint(id, Name::Arg("id"))?;
        let layout = match args::kind(layout) {
            ValueType::Undefined => Layout::default(),
            _ => self::layout(layout, Name::Arg("layout"))?,
        };
        let d = layout
            .checked_decode(value)
            .map_err(|e| Failure::out_of_range(e.to_string()))?;
        Ok(DecodedIdJs {
            timestamp_ms: d.timestamp_ms,
            worker_id: d.worker_id,
            sequence: d.sequence,
        })
    })()
    .js(&env)
}

impl fast::BindsNextId for JsSnowflakeGenerator {
    type State = SnowflakeGenerator;
    fn state(&self) -> SnowflakeGenerator {
        self.inner.clone()
    }
    const NEXT_ID: fast::Callback = next_id;
    const NEXT_IDS: fast::Callback = next_ids;
    const NEXT_ID_STRING: fast::Callback = next_id_string;
    const NEXT_ID_AT_HAND: fast::Callback = next_id_at_hand;
}

/// `sf.nextId()`: the next id (see [`crate::fast`]).
unsafe extern "C" fn next_id(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
) -> fast::Raw {
    // SAFETY: installed by `fast::Bound` with a `SnowflakeGenerator`.
    unsafe {
        fast::bigint(
            env,
            fast::state::<SnowflakeGenerator, 0>(env, info, &mut []).next_id_now(),
        )
    }
}

/// `sf._nextIdAtHand()`: the next id if the lock-free path gives it, else `undefined`,
/// never an error (see [`crate::fast`]).
unsafe extern "C" fn next_id_at_hand(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
) -> fast::Raw {
    // SAFETY: installed by `fast::Bound` with a `SnowflakeGenerator`.
    unsafe {
        let g = fast::state::<SnowflakeGenerator, 0>(env, info, &mut []);
        fast::bigint_or_undefined(env, g.try_next_id())
    }
}

/// `sf.nextIdString()`: the next id in decimal (see [`crate::fast`]).
unsafe extern "C" fn next_id_string(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
) -> fast::Raw {
    // SAFETY: installed by `fast::Bound` with a `SnowflakeGenerator`.
    unsafe {
        fast::decimal(
            env,
            fast::state::<SnowflakeGenerator, 0>(env, info, &mut []).next_id_now(),
        )
    }
}

/// `sf.nextIds(n)`: `n` ids in increasing order in a `BigInt64Array` (see
/// [`crate::fast`]).
unsafe extern "C" fn next_ids(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
) -> fast::Raw {
    let mut argv = [std::ptr::null_mut(); 1];
    // SAFETY (whole block): installed by `fast::Bound` with a `SnowflakeGenerator`.
    unsafe {
        let g = fast::state::<SnowflakeGenerator, 1>(env, info, &mut argv);
        // The core's limit first: a refused count allocates nothing.
        match fast::count_arg(env, argv[0]).map(|n| g.sync_batch(n)) {
            Some(Ok(n)) => fast::filled_array(env, n, |out| g.fill_now(out)),
            Some(Err(e)) => {
                Failure::Leaf(e).throw_raw(env);
                std::ptr::null_mut()
            }
            None => std::ptr::null_mut(),
        }
    }
}
