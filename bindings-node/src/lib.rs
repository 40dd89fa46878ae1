//! Node bindings of leafid (napi-rs): conversions only. Each file mirrors a core
//! module: `segment.rs` wraps `leafid::segment`, `snowflake.rs` wraps
//! `leafid::snowflake`, `error.rs` maps `leafid::Error` to JS errors with a `code` (a
//! `LeafError`, the class index.js defines; index.js also re-makes a Promise's
//! rejection at the caller's `await`, for its stack);
//! `cipher.rs` wraps `leafid::cipher` and `leafid::base62`, `metrics.rs` wraps
//! `leafid::metrics`;
//! `args.rs` reads arguments as Node's built-in modules do (and refuses an options
//! property it does not know, naming the closest), `promise.rs` settles
//! Promises from the core's runtime and `fast.rs` is the hand-written glue of the
//! `nextId` methods.

// napi registers exports only outside `cfg(test)`; the test build sees them unused.
#![cfg_attr(test, allow(dead_code))]

mod args;
mod cipher;
mod error;
mod fast;
mod metrics;
mod promise;
mod segment;
mod snowflake;
