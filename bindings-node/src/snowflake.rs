//! `SnowflakeGenerator`, `Layout`, `decode`: wrap `leafid::snowflake`.

use leafid::snowflake::{Layout, SnowflakeGenerator, LEAF_EPOCH_MS};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::error::{IntoJs, LeafCode};
use crate::fast;
use crate::task::{blocking, Blocking};

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

impl LayoutJs {
    fn core(self) -> leafid::Result<Layout> {
        Layout::new(
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            self.epoch_ms,
        )
    }
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

/// Options of `SnowflakeGenerator.connect`.
#[napi(object)]
pub struct SnowflakeOptionsJs {
    /// `fixed:7`, `local:///dir`, `zookeeper://host:port/name?port=P`,
    /// `zookeeper-recycle://host:port/name`, `mysql://user:pass@host/db?port=P`.
    pub registry: String,
    /// Bit layout and epoch (Leaf's by default).
    pub layout: Option<LayoutJs>,
    /// Directory of the worker cache file.
    pub cache_dir: Option<String>,
    /// How often the time bound is persisted (3000 ms).
    pub heartbeat_ms: Option<f64>,
    /// Largest backward clock step waited out (5 ms).
    pub max_backward_ms: Option<f64>,
    /// How long start-up waits for a clock behind the worker's floor (10 000 ms).
    pub startup_wait_ms: Option<f64>,
    /// Largest local-vs-registry clock difference (5000 ms).
    pub max_skew_ms: Option<f64>,
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
    /// Acquires a worker id and starts the heartbeat, off the event loop. Bad
    /// options reject the Promise before any I/O.
    #[napi(ts_return_type = "Promise<SnowflakeGenerator>")]
    pub fn connect(
        options: SnowflakeOptionsJs,
    ) -> AsyncTask<Blocking<fast::Bound<JsSnowflakeGenerator>>> {
        blocking(move || {
            let mut builder = SnowflakeGenerator::builder().registry_url(&options.registry)?;
            if let Some(layout) = options.layout {
                builder = builder.layout(layout.core()?);
            }
            if let Some(dir) = options.cache_dir {
                builder = builder.cache_dir(dir);
            }
            // The core's conversion (no silent coercion of -1, NaN or Infinity); the core
            // checks each option's bound.
            use leafid::limits::millis;
            if let Some(ms) = options.heartbeat_ms {
                builder = builder.heartbeat(millis("heartbeatMs", ms)?);
            }
            if let Some(ms) = options.max_backward_ms {
                builder = builder.max_backward(millis("maxBackwardMs", ms)?);
            }
            if let Some(ms) = options.startup_wait_ms {
                builder = builder.startup_wait(millis("startupWaitMs", ms)?);
            }
            if let Some(ms) = options.max_skew_ms {
                builder = builder.max_skew(millis("maxSkewMs", ms)?);
            }
            builder
                .build_blocking()
                .map(|inner| fast::Bound(JsSnowflakeGenerator { inner }))
        })
    }

    /// The next id as a decimal string (for JSON).
    #[napi]
    pub fn next_id_string(&self) -> Result<String, LeafCode> {
        self.inner.next_id().map(|id| id.to_string()).js()
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

    /// Persists the last timestamp, releases the worker id and stops the heartbeat,
    /// off the event loop (it talks to the registry). Later calls throw
    /// `LEAF_CLOSED`. Idempotent.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close(&self) -> AsyncTask<Blocking<()>> {
        let g = self.inner.clone();
        blocking(move || {
            g.close();
            Ok(())
        })
    }
}

/// Splits an id (a bigint) into timestamp, worker id and sequence.
#[napi]
pub fn decode(id: BigInt, layout: Option<LayoutJs>) -> Result<DecodedIdJs, LeafCode> {
    let (value, lossless) = id.get_i64();
    if !lossless {
        return Err(crate::error::coded(leafid::Error::InvalidConfig(format!(
            "{id:?} does not fit a signed 64-bit id"
        ))));
    }
    let layout = match layout {
        Some(l) => l.core().js()?,
        None => Layout::default(),
    };
    let d = layout.checked_decode(value).js()?;
    Ok(DecodedIdJs {
        timestamp_ms: d.timestamp_ms,
        worker_id: d.worker_id,
        sequence: d.sequence,
    })
}

impl fast::BindsNextId for JsSnowflakeGenerator {
    type State = SnowflakeGenerator;
    fn state(&self) -> SnowflakeGenerator {
        self.inner.clone()
    }
    const NEXT_ID: fast::Callback = next_id;
    const NEXT_IDS: fast::Callback = next_ids;
    const NEXT_ID_STRING: fast::Callback = next_id_string;
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
            fast::state::<SnowflakeGenerator, 0>(env, info, &mut []).next_id(),
        )
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
            fast::state::<SnowflakeGenerator, 0>(env, info, &mut []).next_id(),
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
        match fast::count_arg(env, argv[0]) {
            Some(n) => fast::filled_array(env, n, |out| g.fill(out)),
            None => std::ptr::null_mut(),
        }
    }
}
