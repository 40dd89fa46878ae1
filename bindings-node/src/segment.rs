//! `SegmentGenerator`, `TagHandle`: wrap `leafid::segment`.

use leafid::{SegmentGenerator, SegmentOptions, TagHandle};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::error::{IntoJs, LeafCode};
use crate::fast;
use crate::task::{blocking, Blocking};

/// Options of `SegmentGenerator.connect`; defaults are Leaf's.
#[napi(object)]
#[derive(Default)]
pub struct SegmentOptionsJs {
    /// How long `nextId` waits for a refill when both segments are spent (1000 ms).
    pub wait_timeout_ms: Option<f64>,
    /// How often the tag list is reloaded (60 000 ms).
    pub refresh_interval_ms: Option<f64>,
    /// Create `leaf_alloc` if missing (false; SQLite always does).
    pub create_table: Option<bool>,
    /// Preload the next segment at 10% (true).
    pub double_buffer: Option<bool>,
    /// Largest step the dynamic step grows to (1 000 000).
    pub max_step: Option<i64>,
    /// Never issue an id at or above 2^53 (false): ids stay exact as JS numbers.
    pub js_safe: Option<bool>,
}

impl SegmentOptionsJs {
    /// The core's options; numbers converted by the core (no silent coercion of -1, NaN
    /// or Infinity), each option's bound checked by the core.
    fn core(self) -> leafid::Result<SegmentOptions> {
        use leafid::limits::millis;
        let o = self;
        let d = SegmentOptions::default();
        Ok(SegmentOptions {
            wait_timeout: match o.wait_timeout_ms {
                Some(ms) => millis("waitTimeoutMs", ms)?,
                None => d.wait_timeout,
            },
            refresh_interval: match o.refresh_interval_ms {
                Some(ms) => millis("refreshIntervalMs", ms)?,
                None => d.refresh_interval,
            },
            create_table: o.create_table.unwrap_or(d.create_table),
            double_buffer: o.double_buffer.unwrap_or(d.double_buffer),
            max_step: o.max_step.unwrap_or(d.max_step),
            js_safe: o.js_safe.unwrap_or(d.js_safe),
            tags: d.tags,
            clock: d.clock,
        })
    }
}

/// Options of `createTag`.
#[napi(object)]
#[derive(Default)]
pub struct CreateTagOptions {
    /// The first id (1).
    pub start: Option<i64>,
    /// Ids per segment (1000).
    pub step: Option<i64>,
    /// Free text ("").
    pub description: Option<String>,
}

/// One segment: ids `value..max` remain.
#[napi(object)]
pub struct SegmentStatsJs {
    pub value: i64,
    pub max: i64,
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
    /// Connects to `mysql://…`, `sqlite://path` or `memory:` off the event loop.
    #[napi(ts_return_type = "Promise<SegmentGenerator>")]
    pub fn connect(
        url: String,
        options: Option<SegmentOptionsJs>,
    ) -> AsyncTask<Blocking<fast::Bound<JsSegmentGenerator>>> {
        let opts = options.unwrap_or_default().core();
        blocking(move || {
            SegmentGenerator::connect_blocking(&url, opts?)
                .map(|inner| fast::Bound(JsSegmentGenerator { inner }))
        })
    }

    /// The next id of `tag` as a decimal string (for JSON).
    #[napi]
    pub fn next_id_string(&self, tag: String) -> Result<String, LeafCode> {
        self.inner.next_id(&tag).map(|id| id.to_string()).js()
    }

    /// A handle on `tag`: the fast path.
    #[napi]
    pub fn tag(&self, tag: String) -> Result<fast::Bound<JsTagHandle>, LeafCode> {
        self.inner
            .tag(&tag)
            .map(|inner| fast::Bound(JsTagHandle { inner }))
            .js()
    }

    /// The tags known since the last refresh, sorted.
    #[napi]
    pub fn tags(&self) -> Vec<String> {
        self.inner.tags()
    }

    /// Inserts a tag and makes it usable at once.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn create_tag(
        &self,
        tag: String,
        options: Option<CreateTagOptions>,
    ) -> AsyncTask<Blocking<()>> {
        let g = self.inner.clone();
        let o = options.unwrap_or_default();
        let (start, step, description) = (
            o.start.unwrap_or(1),
            o.step.unwrap_or(1000),
            o.description.unwrap_or_default(),
        );
        blocking(move || {
            leafid::runtime::block_on(
                async move { g.create_tag(&tag, start, step, &description).await },
            )
        })
    }

    /// Creates `leaf_alloc` if missing.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn create_table(&self) -> AsyncTask<Blocking<()>> {
        let g = self.inner.clone();
        blocking(move || leafid::runtime::block_on(async move { g.create_table().await }))
    }

    /// Reloads the tag list now.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn refresh(&self) -> AsyncTask<Blocking<()>> {
        let g = self.inner.clone();
        blocking(move || leafid::runtime::block_on(async move { g.refresh().await }))
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
                        value: g.value,
                        max: g.max,
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

    /// Stops background work, off the event loop; later calls throw `LEAF_CLOSED`.
    /// Idempotent.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close(&self) -> AsyncTask<Blocking<()>> {
        let g = self.inner.clone();
        blocking(move || {
            g.close();
            Ok(())
        })
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

    /// The next id as a decimal string (for JSON).
    #[napi]
    pub fn next_id_string(&self) -> Result<String, LeafCode> {
        self.inner.next_id().map(|id| id.to_string()).js()
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
}

impl fast::BindsNextId for JsTagHandle {
    type State = TagHandle;
    fn state(&self) -> TagHandle {
        self.inner.clone()
    }
    const NEXT_ID: fast::Callback = next_id_of_handle;
    const NEXT_IDS: fast::Callback = next_ids_of_handle;
    const NEXT_ID_STRING: fast::Callback = next_id_string_of_handle;
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
            Some(tag) => fast::bigint(env, gen.next_id(tag)),
            None => std::ptr::null_mut(),
        }
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
            Some(tag) => fast::decimal(env, gen.next_id(tag)),
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
            fast::state::<TagHandle, 0>(env, info, &mut []).next_id(),
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
            fast::state::<TagHandle, 0>(env, info, &mut []).next_id(),
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
            Some(n) => fast::filled_array(env, n, |out| gen.fill(tag, out)),
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
            Some(n) => fast::filled_array(env, n, |out| h.fill(out)),
            None => std::ptr::null_mut(),
        }
    }
}
