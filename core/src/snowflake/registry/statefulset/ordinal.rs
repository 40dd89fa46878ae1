//! A StatefulSet pod's ordinal, read from its host name (`orders-3` -> 3).
//!
//! Apart from the registry because it is the one rule that decides whether a host name
//! is a StatefulSet pod's at all, pure text with no I/O, checked at URL parsing and
//! again when a registry is built by hand.
//!
//! Kubernetes names a StatefulSet's pods `<statefulset>-<ordinal>` and gives each pod
//! that name as its host name. The ordinal is the decimal number after the last `-`,
//! written without leading zeros. A Deployment's pod (`orders-7d4b9c8f6-x2k9z`) usually
//! fails that test, but its random suffix can be all digits: pass the StatefulSet's name
//! (`?name=orders`) and a host name whose part before the ordinal is anything else is
//! refused.

/// The ordinal of a StatefulSet pod whose host name is `hostname` (its first DNS label,
/// so `orders-3.orders.default.svc.cluster.local` works too). With `statefulset`, the
/// part before the ordinal must be exactly that name. The error says why the name is
/// not a StatefulSet pod's, for a message.
pub fn ordinal(hostname: &str, statefulset: Option<&str>) -> Result<u32, String> {
    let label = hostname.split('.').next().unwrap_or("");
    let not_a_pod = |why: &str| {
        format!(
            "host name {hostname:?} is not a StatefulSet pod's (<statefulset>-<ordinal>, e.g. \
             orders-3): {why}; run in a StatefulSet pod, or pass ?hostname=<pod name> (with \
             hostNetwork the host name is the node's: pass the pod's name from the downward \
             API)"
        )
    };
    let Some((set, digits)) = label.rsplit_once('-') else {
        return Err(not_a_pod("it has no '-'"));
    };
    if set.is_empty() {
        return Err(not_a_pod("nothing before the last '-'"));
    }
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(not_a_pod("the part after the last '-' is not a number"));
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err(not_a_pod(
            "the number after the last '-' has a leading zero, which Kubernetes never writes",
        ));
    }
    let Ok(n) = digits.parse::<u32>() else {
        return Err(not_a_pod("the ordinal is too large"));
    };
    if let Some(name) = statefulset {
        if set != name {
            return Err(format!(
                "host name {hostname:?} is not a pod of StatefulSet {name:?} (its pods are \
                 {name}-0, {name}-1, …); check ?name= or ?hostname="
            ));
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_come_from_the_last_dash() {
        assert_eq!(ordinal("orders-3", None), Ok(3));
        assert_eq!(ordinal("orders-0", None), Ok(0));
        assert_eq!(ordinal("my-orders-12", Some("my-orders")), Ok(12));
        assert_eq!(
            ordinal("orders-3.orders.default.svc.cluster.local", Some("orders")),
            Ok(3)
        );
    }

    #[test]
    fn names_that_are_not_a_pods_are_refused() {
        for bad in [
            "orders",
            "orders-",
            "-3",
            "orders-x3",
            "orders-03",
            "orders-7d4b9c8f6-x2k9z",
            "orders-99999999999",
            "",
        ] {
            assert!(ordinal(bad, None).is_err(), "{bad}");
        }
        // A Deployment pod whose random suffix happens to be all digits.
        assert!(ordinal("orders-7d4b9c8f6-24567", Some("orders")).is_err());
        assert!(ordinal("payments-3", Some("orders")).is_err());
    }
}
