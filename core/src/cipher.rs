//! Opaque ids: a keyed, reversible permutation of the positive 63-bit ids.
//!
//! Segment ids are a counter and snowflake ids carry a timestamp, so a public id tells
//! a competitor how many orders were placed today and lets anyone walk the URLs.
//! [`IdCipher`] maps every id onto another id of the same domain under a secret key,
//! and back: unique in, unique out, always a positive `i64` (it stays a `BIGINT`
//! primary key), and without the key the output reveals nothing about the input.
//!
//! ```
//! # fn main() -> leafid::Result<()> {
//! let cipher = leafid::IdCipher::new(&[7u8; 16])?;
//! let public = cipher.encrypt(1001)?;
//! assert!(public > 0);
//! assert_eq!(cipher.decrypt(public)?, 1001);
//! # Ok(()) }
//! ```
//!
//! # Construction
//! NIST SP 800-38G FF1 (format-preserving encryption) with AES as its block cipher,
//! through the RustCrypto `fpe` crate, over radix 2 with 63 numerals and an empty
//! tweak. FF1 permutes `0..2^63`; the domain here is `1..=i64::MAX`, so when FF1 maps
//! an id to 0 the result is encrypted again (cycle walking) until it is not 0. As 0 is
//! a single point of a permutation, this costs a second FF1 call for exactly one input.
//!
//! - **Key**: 16, 24 or 32 bytes, choosing AES-128, AES-192 or AES-256. Keep it secret
//!   and keep it forever: ids encrypted under one key decrypt only under that key.
//! - **Domain**: `1..=i64::MAX` onto itself. 0 and negative ids are refused
//!   ([`Error::InvalidConfig`]) rather than mapped, so a caller's sign mistake never
//!   yields a plausible wrong id.
//! - **Trade-off**: opaque ids are not ordered. Their order is random, so they make
//!   poor clustered primary keys (inserts land all over a B-tree) and cannot be sorted
//!   by creation time. Store the plain id and expose the encrypted one where order
//!   must not show (URLs, API payloads); decrypt on the way in.
//! - **Cost**: one AES block for the PRF's fixed first block plus one per Feistel round,
//!   eleven in all (figures in `benches/README.md`).
//!
//! The numeral string is a `u64` (see [`Bits63`]): the `fpe` crate runs FF1 itself
//! (rounds, PRF, tweak handling), and this module only supplies the arithmetic on
//! halves of the 63 bits, which the tests check against the crate's own general
//! numeral string.

use aes::{Aes128, Aes192, Aes256};
use fpe::ff1::{NumeralString, Operations, FF1};

use crate::error::{Error, Result};

/// Bits of the id space: a positive `i64` has 63.
const BITS: usize = 63;

/// A keyed permutation of `1..=i64::MAX` (NIST SP 800-38G FF1 with AES). See the
/// [module docs](self) for the construction and its trade-offs.
///
/// Cheap to share: `encrypt` and `decrypt` take `&self` and hold no lock.
pub struct IdCipher {
    ff1: Ff1,
}

/// FF1 under the AES variant the key length chose.
enum Ff1 {
    Aes128(FF1<Aes128>),
    Aes192(FF1<Aes192>),
    Aes256(FF1<Aes256>),
}

impl std::fmt::Debug for IdCipher {
    /// Shows the AES variant, never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let aes = match self.ff1 {
            Ff1::Aes128(_) => "AES-128",
            Ff1::Aes192(_) => "AES-192",
            Ff1::Aes256(_) => "AES-256",
        };
        f.debug_struct("IdCipher")
            .field("construction", &format_args!("FF1/{aes}, radix 2, 63 bits"))
            .finish_non_exhaustive()
    }
}

impl IdCipher {
    /// A cipher under `key`: 16, 24 or 32 bytes for AES-128, AES-192 or AES-256.
    ///
    /// Any other length is refused with [`Error::InvalidConfig`].
    pub fn new(key: &[u8]) -> Result<IdCipher> {
        // `FF1::new` panics on a key of the wrong length; the match below only passes
        // lengths the chosen AES accepts, and radix 2 is always valid.
        let ff1 = match key.len() {
            16 => Ff1::Aes128(FF1::new(key, 2).expect("radix 2 is valid")),
            24 => Ff1::Aes192(FF1::new(key, 2).expect("radix 2 is valid")),
            32 => Ff1::Aes256(FF1::new(key, 2).expect("radix 2 is valid")),
            n => {
                return Err(Error::InvalidConfig(format!(
                    "cipher key is {n} bytes; give 16, 24 or 32 random bytes (AES-128, AES-192, AES-256)"
                )))
            }
        };
        Ok(IdCipher { ff1 })
    }

    /// The opaque form of `id`, in `1..=i64::MAX`. Refuses 0 and negative ids.
    pub fn encrypt(&self, id: i64) -> Result<i64> {
        let mut x = Bits63(check(id, "encrypt")?);
        loop {
            x = self.round_trip(&x, true);
            // Cycle walking: 0 is outside the domain; walk on to the next point of
            // FF1's cycle, which decrypt walks back along.
            if x.0 != 0 {
                return Ok(x.0 as i64);
            }
        }
    }

    /// The id whose opaque form is `id`. Refuses 0 and negative ids.
    pub fn decrypt(&self, id: i64) -> Result<i64> {
        let mut x = Bits63(check(id, "decrypt")?);
        loop {
            x = self.round_trip(&x, false);
            if x.0 != 0 {
                return Ok(x.0 as i64);
            }
        }
    }

    /// Encrypts every id of `ids` in place. On an invalid id nothing after it is
    /// touched and the error names it; ids before it are already encrypted.
    pub fn encrypt_in_place(&self, ids: &mut [i64]) -> Result<()> {
        for id in ids.iter_mut() {
            *id = self.encrypt(*id)?;
        }
        Ok(())
    }

    /// Decrypts every id of `ids` in place (as [`encrypt_in_place`](Self::encrypt_in_place)).
    pub fn decrypt_in_place(&self, ids: &mut [i64]) -> Result<()> {
        for id in ids.iter_mut() {
            *id = self.decrypt(*id)?;
        }
        Ok(())
    }

    /// The opaque forms of `ids`, in order; fails whole on the first invalid id.
    pub fn encrypt_many(&self, ids: &[i64]) -> Result<Vec<i64>> {
        ids.iter().map(|&id| self.encrypt(id)).collect()
    }

    /// The ids whose opaque forms are `ids`, in order; fails whole on the first
    /// invalid id.
    pub fn decrypt_many(&self, ids: &[i64]) -> Result<Vec<i64>> {
        ids.iter().map(|&id| self.decrypt(id)).collect()
    }

    /// One FF1 call over 63 bits (no cycle walking).
    fn round_trip(&self, x: &Bits63, encrypt: bool) -> Bits63 {
        // Bits63 always has 63 valid binary numerals, above FF1's minimum of 20, so
        // the crate cannot refuse it.
        let out = match (&self.ff1, encrypt) {
            (Ff1::Aes128(f), true) => f.encrypt(&[], x),
            (Ff1::Aes128(f), false) => f.decrypt(&[], x),
            (Ff1::Aes192(f), true) => f.encrypt(&[], x),
            (Ff1::Aes192(f), false) => f.decrypt(&[], x),
            (Ff1::Aes256(f), true) => f.encrypt(&[], x),
            (Ff1::Aes256(f), false) => f.decrypt(&[], x),
        };
        out.expect("63 binary numerals are a valid FF1 input")
    }
}

/// `id` as the 63-bit value FF1 works on, or the error for an id outside the domain.
fn check(id: i64, op: &str) -> Result<u64> {
    if id <= 0 {
        return Err(Error::InvalidConfig(format!(
            "cannot {op} id {id}: IdCipher works on ids 1..=9223372036854775807 (positive i64); \
             pass the id as issued"
        )));
    }
    Ok(id as u64)
}

/// 63 binary numerals held in a `u64`, most significant numeral first (FF1's
/// `NUM_2(X)` is the value itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bits63(pub(crate) u64);

/// One half of a [`Bits63`] during the Feistel rounds: `len` numerals valued `value`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Half {
    value: u64,
    len: usize,
}

impl NumeralString for Bits63 {
    type Ops = Half;

    fn is_valid(&self, radix: u32) -> bool {
        radix == 2 && self.0 >> BITS == 0
    }

    fn numeral_count(&self) -> usize {
        BITS
    }

    /// `A` is the first `u = 31` numerals (the high bits), `B` the last `v = 32`.
    fn split(&self) -> (Half, Half) {
        let v = BITS - BITS / 2;
        (
            Half {
                value: self.0 >> v,
                len: BITS / 2,
            },
            Half {
                value: self.0 & mask(v),
                len: v,
            },
        )
    }

    fn concat(a: Half, b: Half) -> Self {
        Bits63((a.value << b.len) | b.value)
    }
}

/// The low `bits` bits set (`bits` < 64).
fn mask(bits: usize) -> u64 {
    (1u64 << bits) - 1
}

/// `NUM(S) mod 2^m` of a big-endian byte string: only its last 8 bytes can matter,
/// as `m` ≤ 32.
fn num_mod(s: impl Iterator<Item = u8>, m: usize) -> u64 {
    s.fold(0u64, |acc, byte| (acc << 8) | u64::from(byte)) & mask(m)
}

/// The first `len` bytes of `bytes`: a short byte string with no allocation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BeBytes {
    bytes: [u8; 8],
    len: usize,
}

impl AsRef<[u8]> for BeBytes {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl Operations for Half {
    type Bytes = BeBytes;

    fn numeral_count(&self) -> usize {
        self.len
    }

    /// `STR^b_256(NUM(X))`: the value big-endian in `b` bytes. With radix 2 and at
    /// most 32 numerals, `b` ≤ 4 and the value always fits.
    fn to_be_bytes(&self, _radix: u32, b: usize) -> BeBytes {
        debug_assert!(b <= 8);
        let mut bytes = [0u8; 8];
        bytes[..b].copy_from_slice(&self.value.to_be_bytes()[8 - b..]);
        BeBytes { bytes, len: b }
    }

    fn add_mod_exp(self, other: impl Iterator<Item = u8>, _radix: u32, m: usize) -> Self {
        Half {
            value: self.value.wrapping_add(num_mod(other, m)) & mask(m),
            len: m,
        }
    }

    fn sub_mod_exp(self, other: impl Iterator<Item = u8>, _radix: u32, m: usize) -> Self {
        Half {
            value: self.value.wrapping_sub(num_mod(other, m)) & mask(m),
            len: m,
        }
    }
}
