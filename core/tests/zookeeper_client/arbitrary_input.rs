//! The fuzz target's entry point (`core/fuzz/`) under proptest, so every CI run sends
//! arbitrary and hostile bytes through every reply decoder: none may panic, and none
//! may allocate what a length field claims beyond the bytes at hand. And a shown
//! connect string never carries its password. Needs no server.

use leafid::snowflake::registry::zk_client as ours;
use proptest::collection::vec;
use proptest::prelude::*;

/// A length or count field: small, at the edges, or anything.
fn length() -> impl Strategy<Value = i32> {
    prop_oneof![
        0..64i32,
        Just(-1),
        Just(i32::MIN),
        Just(i32::MAX),
        any::<i32>()
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn every_reply_decoder_returns_on_arbitrary_bytes(data in vec(any::<u8>(), 0..512)) {
        ours::fuzz_decoders(&data);
    }

    #[test]
    fn every_reply_decoder_returns_on_frames_with_hostile_lengths(
        xid in prop_oneof![Just(-1), Just(-2), Just(-4), any::<i32>()],
        zxid: i64,
        err in prop_oneof![Just(0), Just(-101), any::<i32>()],
        fields in vec((length(), vec(any::<u8>(), 0..24)), 0..8),
    ) {
        // A well-formed reply header, then length fields each followed by a few bytes.
        let mut frame = Vec::new();
        frame.extend_from_slice(&xid.to_be_bytes());
        frame.extend_from_slice(&zxid.to_be_bytes());
        frame.extend_from_slice(&err.to_be_bytes());
        for (len, bytes) in &fields {
            frame.extend_from_slice(&len.to_be_bytes());
            frame.extend_from_slice(bytes);
        }
        ours::fuzz_decoders(&frame);
        ours::fuzz_decoders(&frame[16..]);
    }

    #[test]
    fn a_shown_connect_string_never_carries_the_password(
        user in "[a-z][a-z0-9]{0,7}",
        password in "\\PC{0,16}",
        chroot in proptest::option::of("(/[a-z]{1,5}){1,3}"),
    ) {
        // "PW" cannot occur in the hosts, user or chroot: it is seen only if leaked.
        let password = format!("PW{password}");
        let connect = ours::connect_string(
            "127.0.0.1:2181,127.0.0.1:2182",
            chroot.as_deref(),
            Some((&user, &password)),
        );
        prop_assert!(ours::check_connect(&connect).is_ok(), "{}", connect);
        let shown = ours::shown_connect(&connect);
        prop_assert!(!shown.contains("PW"), "{}", shown);
        prop_assert_eq!(shown, format!(
            "{user}:***@127.0.0.1:2181,127.0.0.1:2182{}",
            chroot.unwrap_or_default()
        ));
    }
}
