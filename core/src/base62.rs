//! Ids as short strings: fixed-width base-62 whose byte order is numeric order.
//!
//! Every id `0..=i64::MAX` becomes exactly 11 characters from `0-9A-Za-z` (62^10 <
//! 2^63 ≤ 62^11), left-padded with `0`. The alphabet is in ASCII order and the width is
//! fixed, so comparing two encodings byte by byte (`strcmp`, a database's binary
//! collation, JavaScript's `<` on strings) orders them exactly as the ids: a string
//! primary key keeps the ids' trend, and a URL-safe token is 11 characters instead of 19.
//!
//! ```
//! use leafid::{decode_base62, encode_base62};
//! # fn main() -> leafid::Result<()> {
//! assert_eq!(encode_base62(61)?, "0000000000z");
//! assert_eq!(encode_base62(i64::MAX)?, "AzL8n0Y58m7");
//! assert_eq!(decode_base62("AzL8n0Y58m7")?, i64::MAX);
//! assert!(encode_base62(9)? < encode_base62(10)?);
//! # Ok(()) }
//! ```
//!
//! Base-62 is an encoding, not encryption: anyone can decode it. Encrypt first with
//! [`IdCipher`](crate::IdCipher) when the id itself must not show.

use crate::error::{Error, Result};

/// Characters of every encoded id.
pub const BASE62_LEN: usize = 11;

/// The digits, in ASCII order (so byte order is numeric order).
const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// `id` as 11 base-62 characters (ASCII). Refuses a negative id.
pub fn encode_base62_bytes(id: i64) -> Result<[u8; BASE62_LEN]> {
    if id < 0 {
        return Err(Error::InvalidConfig(format!(
            "cannot encode id {id} in base 62: ids are 0..=9223372036854775807; pass the id as issued"
        )));
    }
    let mut n = id as u64;
    let mut out = [b'0'; BASE62_LEN];
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(n % 62) as usize];
        n /= 62;
    }
    Ok(out)
}

/// `id` as an 11-character base-62 string. Refuses a negative id.
pub fn encode_base62(id: i64) -> Result<String> {
    let bytes = encode_base62_bytes(id)?;
    // Every byte comes from ALPHABET, which is ASCII, so always UTF-8.
    Ok(std::str::from_utf8(&bytes).expect("ASCII").to_owned())
}

/// The id an 11-character base-62 string encodes.
///
/// Refused with [`Error::InvalidConfig`]: a length other than 11, a character outside
/// `0-9A-Za-z`, or a value past `i64::MAX` (above `"AzL8n0Y58m7"`).
pub fn decode_base62(s: &str) -> Result<i64> {
    let bytes = s.as_bytes();
    if bytes.len() != BASE62_LEN {
        return Err(Error::InvalidConfig(format!(
            "base-62 id {s:?} is {} bytes long; it must be exactly {BASE62_LEN} characters of 0-9A-Za-z",
            bytes.len()
        )));
    }
    let mut n: u64 = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'A'..=b'Z' => b - b'A' + 10,
            b'a'..=b'z' => b - b'a' + 36,
            _ => {
                return Err(Error::InvalidConfig(format!(
                    "base-62 id {s:?} has {:?} at position {i}; only 0-9A-Za-z are digits",
                    char::from(b)
                )))
            }
        };
        // 62^11 > 2^64, so the last step can overflow a u64 as well as pass i64::MAX.
        n = n
            .checked_mul(62)
            .and_then(|n| n.checked_add(u64::from(digit)))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "base-62 id {s:?} is past the largest id (AzL8n0Y58m7 = 9223372036854775807)"
                ))
            })?;
    }
    Ok(n as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_the_ends_of_the_range() {
        assert_eq!(encode_base62(0).unwrap(), "00000000000");
        assert_eq!(encode_base62(62).unwrap(), "00000000010");
        assert_eq!(encode_base62(i64::MAX).unwrap(), "AzL8n0Y58m7");
        assert_eq!(decode_base62("00000000000").unwrap(), 0);
        assert_eq!(decode_base62("AzL8n0Y58m7").unwrap(), i64::MAX);
    }

    #[test]
    fn refuses_negative_ids() {
        let e = encode_base62(-1).unwrap_err();
        assert!(e.to_string().contains("cannot encode id -1"), "{e}");
    }

    #[test]
    fn refuses_wrong_length_bad_characters_and_overflow() {
        for (s, what) in [
            ("", "0 bytes"),
            ("0000000000", "10 bytes"),
            ("000000000000", "12 bytes"),
            ("0000000000-", "'-' at position 10"),
            ("00000000é0", "position"),
            ("AzL8n0Y58m8", "past the largest id"),
            ("zzzzzzzzzzz", "past the largest id"),
        ] {
            let e = decode_base62(s).unwrap_err();
            assert!(e.to_string().contains(what), "{s:?}: {e}");
            assert_eq!(e.code(), "LEAF_INVALID_CONFIG");
        }
    }
}
