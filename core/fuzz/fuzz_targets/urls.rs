//! The store and registry URL parsers (`leafid::segment::store::open`,
//! `RegistryConfig::parse`) on arbitrary input, with a password planted in it.
//!
//! The input is split into a prefix and a suffix at its first `0xff` byte; the URL is
//! `prefix + "user:" + PASSWORD + "@" + suffix`, with the password percent-encoded as a
//! user would write it. A panic is a finding, and so is the password (raw or encoded)
//! in any error message, or in the `Debug` output of a parsed store or registry that
//! has credentials (a `local:` directory or a SQLite file path is shown as it is: a path
//! is not a secret, even one that looks like `user:pass@`).
#![no_main]

use libfuzzer_sys::fuzz_target;

/// Long and unlikely, so it never shows up by coincidence.
const PASSWORD: &str = "Zq8#pW@x/9";
const ENCODED: &str = "Zq8%23pW%40x%2F9";

fn check(url: &str, shown: &str) {
    assert!(
        !shown.contains(PASSWORD) && !shown.contains(ENCODED) && !shown.contains("Zq8"),
        "password shown for {url:?}: {shown}"
    );
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // Both parsers on the bare input: only panics count here.
    let _ = leafid::segment::store::open(&text);
    let _ = leafid::RegistryConfig::parse(&text);

    if text.contains("Zq8") {
        return; // the input itself carries the marker: nothing to tell apart
    }
    let (prefix, suffix) = text.split_once('\u{fffd}').unwrap_or((&text, ""));
    let url = format!("{prefix}user:{ENCODED}@{suffix}");
    match leafid::segment::store::open(&url) {
        Ok(store) => {
            let shown = format!("{store:?}");
            if !shown.starts_with("SqliteStore") {
                check(&url, &shown);
            }
        }
        Err(e) => {
            check(&url, &e.to_string());
            check(&url, &format!("{e:?}"));
        }
    }
    match leafid::RegistryConfig::parse(&url) {
        Ok(leafid::RegistryConfig::Local { .. }) => {}
        Ok(config) => check(&url, &format!("{config:?}")),
        Err(e) => {
            check(&url, &e.to_string());
            check(&url, &format!("{e:?}"));
        }
    }
});
