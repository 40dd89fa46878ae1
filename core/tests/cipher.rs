//! `IdCipher` and base-62: NIST's FF1 samples, the 63-bit numeral string checked
//! against the `fpe` crate's general one, and properties over random ids.

use std::collections::HashSet;

use aes::{Aes128, Aes192, Aes256};
use fpe::ff1::{FlexibleNumeralString, FF1};
use leafid::{decode_base62, encode_base62, Error, IdCipher};
use proptest::prelude::*;

const KEY_128: &str = "2B7E151628AED2A6ABF7158809CF4F3C";
const KEY_192: &str = "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F";
const KEY_256: &str = "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F7F036D6F04FC6A94";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Numerals of a radix-10 or radix-36 sample, written as NIST prints them.
fn numerals(s: &str) -> Vec<u16> {
    s.chars().map(|c| c.to_digit(36).unwrap() as u16).collect()
}

fn text(ns: FlexibleNumeralString) -> String {
    Vec::<u16>::from(ns)
        .into_iter()
        .map(|d| char::from_digit(d as u32, 36).unwrap())
        .collect()
}

/// Encrypts and decrypts one sample with FF1 under cipher `C`.
fn check_sample<C>(key: &str, radix: u32, tweak: &str, pt: &str, ct: &str)
where
    C: cipher::KeyInit + cipher::BlockCipherEncrypt + Clone,
{
    let ff1 = FF1::<C>::new(&hex(key), radix).unwrap();
    let x = FlexibleNumeralString::from(numerals(pt));
    let y = ff1.encrypt(&hex(tweak), &x).unwrap();
    assert_eq!(text(y), ct, "encrypt {pt} radix {radix} tweak {tweak:?}");
    let back = ff1
        .decrypt(&hex(tweak), &FlexibleNumeralString::from(numerals(ct)))
        .unwrap();
    assert_eq!(text(back), pt, "decrypt {ct}");
}

/// NIST SP 800-38G, "FF1 samples" (csrc.nist.gov examples), samples 1 to 9.
#[test]
fn ff1_matches_nists_published_samples() {
    const TWEAK_2: &str = "39383736353433323130";
    const TWEAK_3: &str = "3737373770717273373737";
    const DIGITS: &str = "0123456789";
    const ALNUM: &str = "0123456789abcdefghi";
    check_sample::<Aes128>(KEY_128, 10, "", DIGITS, "2433477484");
    check_sample::<Aes128>(KEY_128, 10, TWEAK_2, DIGITS, "6124200773");
    check_sample::<Aes128>(KEY_128, 36, TWEAK_3, ALNUM, "a9tv40mll9kdu509eum");
    check_sample::<Aes192>(KEY_192, 10, "", DIGITS, "2830668132");
    check_sample::<Aes192>(KEY_192, 10, TWEAK_2, DIGITS, "2496655549");
    check_sample::<Aes192>(KEY_192, 36, TWEAK_3, ALNUM, "xbj3kv35jrawxv32ysr");
    check_sample::<Aes256>(KEY_256, 10, "", DIGITS, "6657667009");
    check_sample::<Aes256>(KEY_256, 10, TWEAK_2, DIGITS, "1001623463");
    check_sample::<Aes256>(KEY_256, 36, TWEAK_3, ALNUM, "xs8a0azh2avyalyzuwd");
}

/// FF1 over the crate's general numeral string, radix 2, 63 numerals, most
/// significant first: what `IdCipher` must compute before cycle walking.
fn reference<C>(key: &[u8], id: u64) -> u64
where
    C: cipher::KeyInit + cipher::BlockCipherEncrypt + Clone,
{
    let ff1 = FF1::<C>::new(key, 2).unwrap();
    let bits: Vec<u16> = (0..63).rev().map(|i| ((id >> i) & 1) as u16).collect();
    let out: Vec<u16> = ff1
        .encrypt(&[], &FlexibleNumeralString::from(bits))
        .unwrap()
        .into();
    out.into_iter()
        .fold(0, |acc, bit| (acc << 1) | u64::from(bit))
}

#[test]
fn id_cipher_is_ff1_radix_2_over_63_bits_for_every_key_length() {
    for key in [hex(KEY_128), hex(KEY_192), hex(KEY_256)] {
        let cipher = IdCipher::new(&key).unwrap();
        for id in [
            1i64,
            2,
            3,
            0x7fff_ffff,
            0x8000_0000,
            1 << 62,
            i64::MAX,
            2_124_926_727_518_965_824,
        ] {
            let want = match key.len() {
                16 => reference::<Aes128>(&key, id as u64),
                24 => reference::<Aes192>(&key, id as u64),
                _ => reference::<Aes256>(&key, id as u64),
            };
            // `want` is 0 for one id in 2^63: none of these.
            assert_ne!(want, 0);
            assert_eq!(
                cipher.encrypt(id).unwrap() as u64,
                want,
                "key {} id {id}",
                key.len()
            );
        }
    }
}

#[test]
fn ciphertexts_are_pinned_across_languages() {
    // tests/python/test_cipher.py and tests/node/cipher.test.js pin the same values.
    let cipher = IdCipher::new(&(0u8..16).collect::<Vec<_>>()).unwrap();
    assert_eq!(cipher.encrypt(12345).unwrap(), 3_911_038_333_464_591_060);
    assert_eq!(cipher.encrypt(1).unwrap(), 3_373_251_355_954_433_687);
}

#[test]
fn cycle_walks_past_zero() {
    // The id FF1 maps to 0 is FF1⁻¹(0); IdCipher must send it elsewhere, and back.
    let key = hex(KEY_128);
    let ff1 = FF1::<Aes128>::new(&key, 2).unwrap();
    let zero = FlexibleNumeralString::from(vec![0u16; 63]);
    let bits: Vec<u16> = ff1.decrypt(&[], &zero).unwrap().into();
    let to_zero = bits
        .into_iter()
        .fold(0u64, |acc, b| (acc << 1) | u64::from(b)) as i64;
    assert!(to_zero > 0);
    let cipher = IdCipher::new(&key).unwrap();
    let out = cipher.encrypt(to_zero).unwrap();
    assert_eq!(
        out as u64,
        reference::<Aes128>(&key, 0),
        "walks on to FF1(0)"
    );
    assert!(out > 0);
    assert_eq!(cipher.decrypt(out).unwrap(), to_zero);
}

#[test]
fn refuses_keys_of_the_wrong_length() {
    for n in [0usize, 1, 15, 17, 23, 31, 33, 64] {
        let e = IdCipher::new(&vec![1u8; n]).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig(_)), "{n}: {e}");
        assert!(e.to_string().contains(&format!("key is {n} bytes")), "{e}");
    }
}

#[test]
fn refuses_zero_and_negative_ids() {
    let cipher = IdCipher::new(&[9u8; 32]).unwrap();
    for id in [0, -1, i64::MIN] {
        let e = cipher.encrypt(id).unwrap_err();
        assert!(
            e.to_string().contains(&format!("cannot encrypt id {id}")),
            "{e}"
        );
        let e = cipher.decrypt(id).unwrap_err();
        assert!(
            e.to_string().contains(&format!("cannot decrypt id {id}")),
            "{e}"
        );
    }
    let e = cipher.encrypt_many(&[5, 0, 7]).unwrap_err();
    assert!(e.to_string().contains("id 0"), "{e}");
}

#[test]
fn batch_forms_match_single_calls() {
    let cipher = IdCipher::new(&[3u8; 24]).unwrap();
    let ids: Vec<i64> = (1..=1000).collect();
    let enc = cipher.encrypt_many(&ids).unwrap();
    assert_eq!(
        enc,
        ids.iter()
            .map(|&i| cipher.encrypt(i).unwrap())
            .collect::<Vec<_>>()
    );
    let mut buf = enc.clone();
    cipher.decrypt_in_place(&mut buf).unwrap();
    assert_eq!(buf, ids);
    cipher.encrypt_in_place(&mut buf).unwrap();
    assert_eq!(buf, enc);
    assert_eq!(cipher.decrypt_many(&enc).unwrap(), ids);
}

#[test]
fn no_collision_over_a_million_consecutive_ids() {
    let cipher = IdCipher::new(&[42u8; 16]).unwrap();
    let mut seen = HashSet::with_capacity(1 << 20);
    for id in 1..=1_000_000i64 {
        let out = cipher.encrypt(id).unwrap();
        assert!(out > 0);
        assert!(seen.insert(out), "collision at {id}");
    }
}

#[test]
fn debug_never_shows_the_key() {
    let cipher = IdCipher::new(&[0xAB; 16]).unwrap();
    let shown = format!("{cipher:?}");
    assert!(shown.contains("AES-128"), "{shown}");
    assert!(
        !shown.contains("171") && !shown.to_lowercase().contains("ab"),
        "{shown}"
    );
}

proptest! {
    #[test]
    fn matches_the_fpe_crate_for_random_keys_and_ids(
        id in 1..=i64::MAX,
        key in proptest::collection::vec(any::<u8>(), 32),
        size in prop_oneof![Just(16usize), Just(24), Just(32)],
    ) {
        let key = &key[..size];
        let want = match size {
            16 => reference::<Aes128>(key, id as u64),
            24 => reference::<Aes192>(key, id as u64),
            _ => reference::<Aes256>(key, id as u64),
        };
        prop_assume!(want != 0);
        prop_assert_eq!(IdCipher::new(key).unwrap().encrypt(id).unwrap() as u64, want);
    }

    #[test]
    fn decrypt_inverts_encrypt(id in 1..=i64::MAX, key in proptest::collection::vec(any::<u8>(), 32)) {
        let cipher = IdCipher::new(&key).unwrap();
        let out = cipher.encrypt(id).unwrap();
        prop_assert!(out > 0);
        prop_assert_eq!(cipher.decrypt(out).unwrap(), id);
        prop_assert_eq!(cipher.encrypt(cipher.decrypt(id).unwrap()).unwrap(), id);
    }

    #[test]
    fn distinct_ids_stay_distinct(a in 1..=i64::MAX, b in 1..=i64::MAX) {
        let cipher = IdCipher::new(&[5u8; 16]).unwrap();
        prop_assert_eq!(a == b, cipher.encrypt(a).unwrap() == cipher.encrypt(b).unwrap());
    }

    #[test]
    fn out_of_domain_ids_are_refused(id in i64::MIN..=0) {
        let cipher = IdCipher::new(&[5u8; 16]).unwrap();
        prop_assert!(cipher.encrypt(id).is_err());
        prop_assert!(cipher.decrypt(id).is_err());
    }

    #[test]
    fn base62_round_trips(id in 0..=i64::MAX) {
        let s = encode_base62(id).unwrap();
        prop_assert_eq!(s.len(), 11);
        prop_assert_eq!(decode_base62(&s).unwrap(), id);
    }

    #[test]
    fn base62_byte_order_is_numeric_order(a in 0..=i64::MAX, b in 0..=i64::MAX) {
        let (sa, sb) = (encode_base62(a).unwrap(), encode_base62(b).unwrap());
        prop_assert_eq!(sa.as_bytes().cmp(sb.as_bytes()), a.cmp(&b));
    }

    #[test]
    fn base62_refuses_negative_ids(id in i64::MIN..0) {
        prop_assert!(encode_base62(id).is_err());
    }

    #[test]
    fn base62_decode_never_panics(s in "\\PC{0,14}") {
        if let Ok(id) = decode_base62(&s) {
            prop_assert_eq!(encode_base62(id).unwrap(), s);
        }
    }
}
