//! The name of a test inside its binary, for tests that re-run their own binary as a
//! child process on one `#[ignore]`d entry point (`--exact NAME`). A test binary groups
//! several modules, so a test's name is its module path (without the crate) and its own.

/// `name` as the test harness knows it, for a test declared in the module
/// `module_path` (the caller's `module_path!()`).
pub fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}
