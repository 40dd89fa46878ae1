//! Node bindings of leafid (napi-rs): conversions only. Each file mirrors a core
//! module: `segment.rs` wraps `leafid::segment`, `snowflake.rs` wraps
//! `leafid::snowflake`, `error.rs` maps `leafid::Error` to JS errors with a `code`.

mod error;
mod segment;
mod snowflake;
mod task;
