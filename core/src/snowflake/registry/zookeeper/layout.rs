//! Where the forever registry's nodes live and what they hold: the paths of an
//! identity (`forever/{ip}:{port}-{seq}`, `holders/{ip}:{port}[/live]`), the data of a
//! forever node (Java Leaf's `Endpoint`, byte for byte) and of a `live` node, and how
//! messages name the identity.
//!
//! Apart from the steps that read and write these nodes so that the layout Java Leaf
//! shares with leafid reads in one place. (The `ids/{id}` records of fence rule 3 are
//! with the takeover that uses them, in `takeover.rs`.)

use serde::{Deserialize, Serialize};

use super::ZookeeperRegistry;
use crate::error::Error;

/// What a leafid holder writes into its `live` node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LiveRecord {
    pub(super) host: String,
    pub(super) pid: u32,
    pub(super) since_ms: i64,
    /// The holder's `ip:port` identity (absent in records of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) address: Option<String>,
}

/// The data of a forever node, field for field as Java Leaf's `Endpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Endpoint {
    pub ip: String,
    pub port: String,
    pub timestamp: i64,
}

/// Splits a forever child `{ip}:{port}-{seq}` at the LAST `-`.
pub(super) fn split_child(child: &str) -> Option<(&str, u32)> {
    let (addr, seq) = child.rsplit_once('-')?;
    if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((addr, seq.parse().ok()?))
}

impl ZookeeperRegistry {
    /// `/snowflake/{name}/forever`.
    pub fn forever_path(&self) -> String {
        format!("/snowflake/{}/forever", self.name)
    }

    pub(super) fn address(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    pub(super) fn identity_key(&self) -> String {
        format!("{}/{}", self.name, self.address())
    }

    /// `/snowflake/{name}/holders/{ip}:{port}`: leafid's release record for this identity.
    pub(super) fn holder_path(&self) -> String {
        format!("/snowflake/{}/holders/{}", self.name, self.address())
    }

    /// The EPHEMERAL node of this identity's live leafid holder.
    pub(super) fn live_path(&self) -> String {
        format!("{}/live", self.holder_path())
    }

    /// How messages name this identity.
    pub(super) fn identity(&self) -> String {
        format!(
            "ZooKeeper {} {}/{}",
            crate::redact::url(&self.connect),
            self.forever_path(),
            self.address()
        )
    }

    pub(super) fn in_use(&self, worker_id: Option<u32>, holder: String) -> Error {
        Error::WorkerIdInUse {
            identity: self.identity(),
            worker_id,
            holder,
            advice: crate::snowflake::registry::IN_USE_ADVICE.into(),
        }
    }

    pub(super) fn endpoint_bytes(&self, timestamp: i64) -> Vec<u8> {
        serde_json::to_vec(&Endpoint {
            ip: self.ip.clone(),
            port: self.port.clone(),
            timestamp,
        })
        .expect("an endpoint always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::registry::zookeeper::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_SESSION_TIMEOUT};

    #[test]
    fn child_names_split_at_the_last_dash() {
        assert_eq!(
            split_child("10.0.0.5:8080-0000000007"),
            Some(("10.0.0.5:8080", 7))
        );
        assert_eq!(split_child("host-a:80-0000000012"), Some(("host-a:80", 12)));
        assert_eq!(split_child("10.0.0.5:8080"), None);
        assert_eq!(split_child("10.0.0.5:8080-x1"), None);
        assert_eq!(split_child("10.0.0.5:8080-"), None);
    }

    #[test]
    fn endpoint_json_is_exactly_javas() {
        let r = ZookeeperRegistry::new(
            "127.0.0.1:2181",
            "leaf",
            "10.0.0.5",
            "8080",
            DEFAULT_SESSION_TIMEOUT,
            DEFAULT_CONNECT_TIMEOUT,
        );
        assert_eq!(
            String::from_utf8(r.endpoint_bytes(1_700_000_000_000)).unwrap(),
            r#"{"ip":"10.0.0.5","port":"8080","timestamp":1700000000000}"#
        );
    }
}
