//! The hot paths allocate nothing: a counting global allocator watches one thread while
//! it takes ids. Its own test binary, because the allocator is the whole process's.
//! The count is per thread, so the two modes' tests may run at once.

#[path = "../support/counting_alloc.rs"]
mod counting_alloc;

/// Segment mode: `next_id` by handle and by tag name, and `fill`.
mod segment;

/// Snowflake mode: `next_id` and `fill`.
mod snowflake;
