//! The statistics the generators show (`SegmentGenerator::stats`,
//! `SnowflakeGenerator::stats`): plain data types, one file per mode. They sit below
//! both modes and below `metrics`: the modes fill them, `metrics`, the bindings and the
//! server read them, and no mode has to import `metrics`' readers or the other way round.
//! The types are public through their modes (`leafid::segment::TagStats`,
//! `leafid::snowflake::SnowflakeStats`) and the crate root.

pub mod segment;
pub mod snowflake;
