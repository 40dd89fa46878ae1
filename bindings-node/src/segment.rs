//! `SegmentGenerator`, `TagHandle`: wrap `leafid::segment`.
//!
//! Synchronous calls never wait on I/O (the core's `_now` functions); the `…Async`
//! twins, `connect`, the admin calls and `close` return Promises settled from the
//! core's runtime (see [`crate::promise`]).

use leafid::{SegmentGenerator, SegmentOptions, TagHandle};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::args::{self, Name};
use crate::error::{Fallible, IntoJs};
use crate::fast;
use crate::promise::{pending, Pending};

/// The keys of `SegmentGenerator.connect`'s options object (index.d.ts's
/// `SegmentOptions`).
const SEGMENT_KEYS: &[&str] = &[
    "waitTimeoutMs",
    "refreshIntervalMs",
    "createTable",
    "doubleBuffer",
    "maxStep",
    "jsSafe",
    "threadChunk",
    "tags",
];

/// The core's options from `SegmentGenerator.connect`'s options object (defaults are
/// the core's, Leaf's).
fn segment_options(options: Unknown<'_>) -> Fallible<SegmentOptions> {
    let o = args::options(options, "options", SEGMENT_KEYS)?;
    let d = SegmentOptions::default();
    Ok(SegmentOptions::default()
        .wait_timeout(
            o.get("waitTimeoutMs", args::millis)?
                .unwrap_or(d.wait_timeout),
        )
        .refresh_interval(
            o.get("refreshIntervalMs", args::millis)?
                .unwrap_or(d.refresh_interval),
        )
        .create_table(
            o.get("createTable", args::boolean)?
                .unwrap_or(d.create_table),
        )
        .double_buffer(
            o.get("doubleBuffer", args::boolean)?
                .unwrap_or(d.double_buffer),
        )
        .max_step(o.get("maxStep", args::int64)?.unwrap_or(d.max_step))
        .js_safe(o.get("jsSafe", args::boolean)?.unwrap_or(d.js_safe))
        // A negative count is Node's RangeError here; the core refuses one past its limit.
        .thread_chunk(
            o.get("threadChunk", |v, n| args::integer(v, n, 0, (1 << 53) - 1))?
                .map_or(d.thread_chunk, |n| n as u64),
        )
        .tags(o.get("tags", args::strings)?.unwrap_or(d.tags)))
}

/// `createTag`'s options: start (1), step (1000), description (""), existOk (false).
fn create_tag_options(options: Unknown<'_>) -> Fallible<(i64, i64, String, bool)> {
    let o = args::options(
        options,
        "options",
        &["start", "step", "description", "existOk"],
    )?;
    Ok((
        o.get("start", args::int64)?.unwrap_or(1),
        o.get("step", args::int64)?.unwrap_or(1000),
        o.get("description", args::string)?.unwrap_or_default(),
        o.get("existOk", args::boolean)?.unwrap_or(false),
    ))
}

/// One segment: ids `value..max` remain. The ids are bigints, as every id the binding
/// gives (a number is inexact past 2^53); a step fits an `int` column, so a number.
#[napi(object)]
pub struct SegmentStatsJs {
    pub value: BigInt,
    pub max: BigInt,
    pub step: i64,
}

/// One tag's state, as Leaf's /cache page shows it, plus refill figures.
#[napi(object)]
pub struct TagStatsJs {
    pub tag: String,
    pub initialized: bool,
    pub current: u32,
    pub next_ready: bool,
    pub segments: Vec<SegmentStatsJs>,
    pub step: i64,
    pub min_step: i64,
    pub refills: i64,
    /// Milliseconds the latest refill took.
    pub last_refill_ms: Option<f64>,
    pub last_error: Option<String>,
}

/// Issues ids for the tags of one `leaf_alloc` table.
#[napi(js_name = "SegmentGenerator")]
pub struct JsSegmentGenerator {
    inner: SegmentGenerator,
}

#[napi]
impl JsSegmentGenerator {
    /// Connects to `mysql://…`, `sqlite://path` or `memory:` on the core's runtime;
    /// with `tags`, resolves once those tags' first segments are loaded.
    ///
    /// Writable and configurable (napi makes statics neither) so index.js can wrap it
    /// to re-make a rejection at the caller's `await`.
    #[napi(writable = true, configurable = true)]
    pub fn connect(
        url: Unknown<'_>,
        options: Unknown<'_>,
    ) -> Pending<fast::Bound<JsSegmentGenerator>> {
        pending((|| {
            let url = args::string(url, Name::Arg("url"))?;
            let opts = segment_options(options)?;
            Ok(async move {
                SegmentGenerator::connect(&url, opts)
                    .await
                    .map(|inner| fast::Bound(JsSegmentGenerator { inner }))
            })
        })())
    }

    /// The next id of `tag`, waiting (off the event loop) up to `waitTimeoutMs` for a
    /// refill, and looking the tag up in the store if it is not known yet.
    #[napi]
    pub fn next_id_async(&self, tag: Unknown<'_>) -> Pending<BigInt> {
        let gen = self.inner.clone();
        pending(args::string(tag, Name::Arg("tag")).map(|tag| {
            let id = gen.next_id_async(&tag);
            async move { id.await.map(BigInt::from) }
        }))
    }

    /// `n` ids of `tag`, waiting as `nextIdAsync` does.
    #[napi]
    pub fn next_ids_async(&self, tag: Unknown<'_>, n: Unknown<'_>) -> Pending<BigInt64Array> {
        let gen = self.inner.clone();
        pending((|| {
            let tag = args::string(tag, Name::Arg("tag"))?;
            let n = args::count(n, Name::Arg("n"))?;
            let ids = gen.next_ids_async(&tag, n);
            Ok(async move { ids.await.map(BigInt64Array::new) })
        })())
    }

    /// A handle on `tag`: the fast path. Never waits: a tag missing from the cache is
    /// looked up in the background and this throws `LEAF_TAG_NOT_FOUND` meanwhile.
    #[napi]
    pub fn tag(&self, env: Env, tag: Unknown<'_>) -> Result<fast::Bound<JsTagHandle>> {
        let tag = args::string(tag, Name::Arg("tag")).js(&env)?;
        self.inner
            .tag_now(&tag)
            .map(|inner| fast::Bound(JsTagHandle { inner }))
            .js(&env)
    }

    /// The tags known since the last refresh, sorted.
    #[napi]
    pub fn tags(&self) -> Vec<String> {
        self.inner.tags()
    }

    /// Inserts a tag and makes it usable at once; with `existOk`, a tag already in the
    /// store is left as it is (the core's `ensure_tag`).
    #[napi]
    pub fn create_tag(&self, tag: Unknown<'_>, options: Unknown<'_>) -> Pending<()> {
        let g = self.inner.clone();
        pending((|| {
            let tag = args::string(tag, Name::Arg("tag"))?;
            let (start, step, description, exist_ok) = create_tag_options(options)?;
            Ok(async move {
                if exist_ok {
                    g.ensure_tag(&tag, start, step, &description)
                        .await
                        .map(drop)
                } else {
                    g.create_tag(&tag, start, step, &description).await
                }
            })
        })())
    }

    /// Creates `leaf_alloc` if missing.
    #[napi]
    pub fn create_table(&self) -> Pending<()> {
        let g = self.inner.clone();
        pending(Ok(async move { g.create_table().await }))
    }

    /// Reloads the tag list now.
    #[napi]
    pub fn refresh(&self) -> Pending<()> {
        let g = self.inner.clone();
        pending(Ok(async move { g.refresh().await }))
    }

    /// Per-tag state.
    #[napi]
    pub fn stats(&self) -> Vec<TagStatsJs> {
        self.inner
            .stats()
            .into_iter()
            .map(|s| TagStatsJs {
                tag: s.tag,
                initialized: s.initialized,
                current: s.current as u32,
                next_ready: s.next_ready,
                segments: s
                    .segments
                    .iter()
                    .map(|g| SegmentStatsJs {
                        value: BigInt::from(g.value),
                        max: BigInt::from(g.max),
                        step: g.step,
                    })
                    .collect(),
                step: s.step,
                min_step: s.min_step,
                refills: s.refills as i64,
                last_refill_ms: s.last_refill.map(|d| d.as_secs_f64() * 1000.0),
                last_error: s.last_error,
            })
            .collect()
    }

    /// Stops background work; later calls throw `LEAF_CLOSED`. Idempotent.
    #[napi]
    pub fn close(&self) -> Pending<()> {
        let g = self.inner.clone();
        pending(Ok(async move {
            g.close();
            Ok::<_, leafid::Error>(())
        }))
    }
}

/// The fast way to issue ids for one tag.
#[napi(js_name = "TagHandle")]
pub struct JsTagHandle {
    inner: TagHandle,
}

#[napi]
impl JsTagHandle {
    /// The tag this handle issues for.
    #[napi(getter)]
    pub fn tag(&self) -> String {
        self.inner.tag().to_string()
    }

    /// The next id, waiting (off the event loop) up to `waitTimeoutMs` for a refill.
    #[napi]
    pub fn next_id_async(&self) -> Pending<BigInt> {
        let id = self.inner.next_id_async();
        pending(Ok(async move { id.await.map(BigInt::from) }))
    }

    /// `n` ids, waiting as `nextIdAsync` does.
    #[napi]
    pub fn next_ids_async(&self, n: Unknown<'_>) -> Pending<BigInt64Array> {
        let h = self.inner.clone();
        pending(args::count(n, Name::Arg("n")).map(|n| {
            let ids = h.next_ids_async(n);
            async move { ids.await.map(BigInt64Array::new) }
        }))
    }
}

impl fast::BindsNextId for JsSegmentGenerator {
    type State = SegmentGenerator;
    fn state(&self) -> SegmentGenerator {
        self.inner.clone()
    }
    const NEXT_ID: fast::Callback = next_id_of_tag;
    const NEXT_IDS: fast::Callback = next_ids_of_tag;
    const NEXT_ID_STRING: fast::Callback = next_id_string_of_tag;
    const NEXT_ID_AT_HAND: fast::Callback = next_id_at_hand_of_tag;
}

impl fast::BindsNextId for JsTagHandle {
    type State = TagHandle;
    fn state(&self) -> TagHandle {
        self.inner.clone()
    }
    const NEXT_ID: fast::Callback = next_id_of_handle;
    const NEXT_IDS: fast::Callback = next_ids_of_handle;
    const NEXT_ID_STRING: fast::Callback = next_id_string_of_handle;
    const NEXT_ID_AT_HAND: fast::Callback = next_id_at_hand_of_handle;
}

/// `gen.nextId(tag)`: the next id of `tag` (see [`crate::fast`]).
unsafe extern "C" fn next_id_of_tag(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
) -> fast::Raw {
    let mut argv = [std::ptr::null_mut(); 1];
    // SAFETY (whole block): installed by `fast::Bound` with a `SegmentGenerator`.
    unsafe {
        let gen = fast::state::<SegmentGenerator, 1>(env, info, &mut argv);
        let (mut buf, mut spill) = ([0u8; 512], String::new());
        match fast::str_arg(env, argv[0], &mut buf, &mut spill) {
            Some(tag) => fast::bigint(env, gen.next_id_now(tag)),
            None => std::ptr::null_mut(),
        }
    }
}

/// `gen._nextIdAtHand(tag)`: the next id of `tag` if it is at hand, else `undefined`,
/// never an error (see [`crate::fast`]).
unsafe extern "C" fn next_id_at_hand_of_tag(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
) -> fast::Raw {
    let mut argv = [std::ptr::null_mut(); 1];
    // SAFETY (whole block): installed by `fast::Bound` with a `SegmentGenerator`.
    unsafe {
        let gen = fast::state::<SegmentGenerator, 1>(env, info, &mut argv);
        let (mut buf, mut spill) = ([0u8; 512], String::new());
        let tag = fast::str_arg_quiet(env, argv[0], &mut buf, &mut spill);
        fast::bigint_or_undefined(env, tag.and_then(|tag| gen.next_id_at_hand(tag)))
    }
}

/// `handle._nextIdAtHand()`: the next id if it is at hand, else `undefined`, never an
/// error (see [`crate::fast`]).
unsafe extern "C" fn next_id_at_hand_of_handle(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
) -> fast::Raw {
    // SAFETY: installed by `fast::Bound` with a `TagHandle`.
    unsafe {
        let h = fast::state::<TagHandle, 0>(env, info, &mut []);
        fast::bigint_or_undefined(env, h.next_id_at_hand())
    }
}

/// `gen.nextIdString(tag)`: the next id of `tag` in decimal (see [`crate::fast`]).
unsafe extern "C" fn next_id_string_of_tag(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
) -> fast::Raw {
    let mut argv = [std::ptr::null_mut(); 1];
    // SAFETY (whole block): installed by `fast::Bound` with a `SegmentGenerator`.
    unsafe {
        let gen = fast::state::<SegmentGenerator, 1>(env, info, &mut argv);
        let (mut buf, mut spill) = ([0u8; 512], String::new());
        match fast::str_arg(env, argv[0], &mut buf, &mut spill) {
            Some(tag) => fast::decimal(env, gen.next_id_now(tag)),
            None => std::ptr::null_mut(),
        }
    }
}

/// `handle.nextIdString()`: the next id in decimal (see [`crate::fast`]).
unsafe extern "C" fn next_id_string_of_handle(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
) -> fast::Raw {
    // SAFETY: installed by `fast::Bound` with a `TagHandle`.
    unsafe {
        fast::decimal(
            env,
            fast::state::<TagHandle, 0>(env, info, &mut []).next_id_now(),
        )
    }
}

/// `handle.nextId()`: an atomic add in the common case (see [`crate::fast`]).
unsafe extern "C" fn next_id_of_handle(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
) -> fast::Raw {
    // SAFETY: installed by `fast::Bound` with a `TagHandle`.
    unsafe {
        fast::bigint(
            env,
            fast::state::<TagHandle, 0>(env, info, &mut []).next_id_now(),
        )
    }
}

/// `gen.nextIds(tag, n)`: `n` ids of `tag` in a `BigInt64Array` (see [`crate::fast`]).
unsafe extern "C" fn next_ids_of_tag(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
) -> fast::Raw {
    let mut argv = [std::ptr::null_mut(); 2];
    // SAFETY (whole block): installed by `fast::Bound` with a `SegmentGenerator`.
    unsafe {
        let gen = fast::state::<SegmentGenerator, 2>(env, info, &mut argv);
        let (mut buf, mut spill) = ([0u8; 512], String::new());
        let Some(tag) = fast::str_arg(env, argv[0], &mut buf, &mut spill) else {
            return std::ptr::null_mut();
        };
        match fast::count_arg(env, argv[1]) {
            Some(n) => fast::filled_array(env, n, |out| gen.fill_now(tag, out)),
            None => std::ptr::null_mut(),
        }
    }
}

/// `handle.nextIds(n)`: `n` ids in a `BigInt64Array` (see [`crate::fast`]).
unsafe extern "C" fn next_ids_of_handle(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
) -> fast::Raw {
    let mut argv = [std::ptr::null_mut(); 1];
    // SAFETY (whole block): installed by `fast::Bound` with a `TagHandle`.
    unsafe {
        let h = fast::state::<TagHandle, 1>(env, info, &mut argv);
        match fast::count_arg(env, argv[0]) {
            Some(n) => fast::filled_array(env, n, |out| h.fill_now(out)),
            None => std::ptr::null_mut(),
        }
    }
}
