//! Snowflake mode (work in progress).

pub mod registry;
