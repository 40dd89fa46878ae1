//! The NotFound9 fork's `zk_recycle` layout beside ours: detected, refused, watched.
//!
//! The fork keeps its pool in `/snowflake/{name}/recycle/notuse/workId:{i}` and
//! `…/recycle/inuse/workId:{i}`, the same tree and the same id space as this registry,
//! and picks any `notuse` child without reading leafid's `lease/` nodes (its
//! `RecyclableZookeeperHolder.init`). leafid cannot take part in that allocator safely,
//! and the fork cannot see leafid, so by the fencing rule ("where a foreign writer cannot
//! be detected, refuse", [`crate::snowflake::registry::fence`]):
//! - an `acquire` that finds `notuse` or `inuse` under the pool refuses with
//!   [`Error::InvalidConfig`] ([`refusal`]);
//! - a live holder watches the pool's children and stops ([`IssueLimit::lose`]) the
//!   moment the fork creates `notuse` (the first node its `initAllNode` writes), which
//!   is several round trips before the fork's first id; its next `acquire` refuses.
//!   Every renew checks the children again, in case a watch event was missed.

use crate::error::Error;

/// The fork's child nodes under `/snowflake/{name}/recycle`.
pub(super) const FORK_NODES: [&str; 2] = ["notuse", "inuse"];

/// The fork's nodes among the children of `/snowflake/{name}/recycle`.
pub(super) fn fork_nodes(children: &[String]) -> Vec<&str> {
    FORK_NODES
        .iter()
        .copied()
        .filter(|n| children.iter().any(|c| c == n))
        .collect()
}

/// The refusal when the fork's layout is there: what was found and what to do.
pub(super) fn refusal(shown: &str, recycle_dir: &str, found: &[&str], name: &str) -> Error {
    let found = found
        .iter()
        .map(|n| format!("{recycle_dir}/{n}"))
        .collect::<Vec<_>>()
        .join(" and ");
    Error::InvalidConfig(format!(
        "zookeeper-recycle {shown}: {found} exist: the NotFound9 fork's zk_recycle servers \
         use this pool, and they pick worker ids without reading leafid's leases, so leafid \
         cannot share it without issuing duplicate ids. To move the fleet to leafid, stop \
         every fork server first, then delete {recycle_dir}/notuse and {recycle_dir}/inuse. \
         A mixed fleet with the fork's zk_recycle must use a distinct leaf.name / name in the \
         URL (for example zookeeper-recycle://…/{name}-leafid), whose worker ids are a \
         separate space: only for ids that never meet the fork's (another table or service)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_forks_own_nodes_count() {
        let c = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(fork_nodes(&c(&["lease", "last"])).is_empty());
        assert_eq!(fork_nodes(&c(&["lease", "inuse"])), vec!["inuse"]);
        assert_eq!(
            fork_nodes(&c(&["notuse", "last", "inuse"])),
            vec!["notuse", "inuse"]
        );
    }

    #[test]
    fn the_refusal_says_what_was_found_and_what_to_do() {
        let e = refusal("127.0.0.1:2181", "/snowflake/x/recycle", &["notuse"], "x");
        let s = e.to_string();
        assert!(matches!(e, Error::InvalidConfig(_)));
        assert!(s.contains("/snowflake/x/recycle/notuse exist"), "{s}");
        assert!(
            s.contains("must use a distinct leaf.name / name in the URL"),
            "{s}"
        );
    }
}
