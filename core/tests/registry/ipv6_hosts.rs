//! ZooKeeper connect strings with IPv6 literal hosts (issue 28, item 6), through a
//! `[::1]` proxy in front of the shared ZooKeeper: `zookeeper://[::1]:port/…` reads, and
//! the client connects to a `[::1]:port` host and reads a node. (The database URLs'
//! `[::1]` hosts are the backend layer's, shared by stores and registries: see
//! `tests/segment/ipv6_hosts.rs`.)

use std::time::Duration;

use leafid::snowflake::registry::zk_client::Client;
use leafid::snowflake::registry::RegistryConfig;

use crate::support::ipv6::proxy_on_ipv6_loopback;

#[test]
fn a_zookeeper_connect_string_with_an_ipv6_literal_connects() {
    let zk = std::env::var("LEAFID_ZK").expect("LEAFID_ZK is not set: source .services/env");
    let Some(proxy) = proxy_on_ipv6_loopback(&zk) else {
        return;
    };
    let connect = format!("[::1]:{}", proxy.addr.port());
    let url = format!("zookeeper://{connect}/leafid_ipv6?port=8001&ip=10.0.0.1");
    RegistryConfig::parse(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
    leafid::runtime::block_on(async move {
        let client = Client::connect(&connect, Duration::from_secs(6), Duration::from_secs(3))
            .await
            .unwrap_or_else(|e| panic!("{connect}: {e}"));
        client.get_data("/zookeeper").await.unwrap();
    });
}
