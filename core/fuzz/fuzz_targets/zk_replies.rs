//! Every reply decoder of the core's ZooKeeper client on arbitrary bytes: reply header,
//! Stat, get_data, children, create path, multi results, connect response, watch event,
//! and the connect-string parser. A panic, or an allocation sized by a length field past
//! the input (libFuzzer's `-rss_limit_mb` / `-malloc_limit_mb`), is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    leafid::snowflake::registry::zk_client::fuzz_decoders(data);
});
