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
//! NIST SP 800-38G FF1 (format-preserving encryption) with AES as its block cipher
//! (the RustCrypto `aes` crate, AES-NI where the CPU has it), over radix 2 with 63
//! numerals and an empty tweak. FF1 permutes `0..2^63`; the domain here is
//! `1..=i64::MAX`, so when FF1 maps an id to 0 the result is encrypted again (cycle
//! walking) until it is not 0. As 0 is a single point of a permutation, this costs a
//! second FF1 call for exactly one input.
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
//! - **Cost**: one AES block per Feistel round, ten per id (the PRF's fixed first
//!   block is computed once per key); figures in `benches/README.md`.
//!
//! FF1 itself lives in `cipher/ff1.rs`, specialised to this one shape: the general
//! `fpe` crate took about 13 µs per id on the same 63 bits (bignum numeral strings, a
//! CBC-MAC state rebuilt every round) against about 0.1 µs here. The tests
//! (`core/tests/cipher.rs`) check `ff1.rs` bit for bit against the `fpe` crate, and the
//! crate against NIST's published FF1 samples.

mod ff1;

use aes::cipher::KeyInit;
use aes::{Aes128, Aes192, Aes256};

use self::ff1::Ff1Bits63;
use crate::error::{Error, Result};

/// A keyed permutation of `1..=i64::MAX` (NIST SP 800-38G FF1 with AES). See the
/// [module docs](self) for the construction and its trade-offs.
///
/// Cheap to share: `encrypt` and `decrypt` take `&self` and hold no lock.
pub struct IdCipher {
    ff1: Ff1,
}

/// FF1 under the AES variant the key length chose.
enum Ff1 {
    Aes128(Ff1Bits63<Aes128>),
    Aes192(Ff1Bits63<Aes192>),
    Aes256(Ff1Bits63<Aes256>),
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
        // `new_from_slice` refuses only a length the AES variant does not take, and
        // each arm passes exactly that variant's length.
        let ff1 = match key.len() {
            16 => Ff1::Aes128(Ff1Bits63::new(Aes128::new_from_slice(key).expect("16 bytes"))),
            24 => Ff1::Aes192(Ff1Bits63::new(Aes192::new_from_slice(key).expect("24 bytes"))),
            32 => Ff1::Aes256(Ff1Bits63::new(Aes256::new_from_slice(key).expect("32 bytes"))),
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
        let mut one = [id];
        self.encrypt_in_place(&mut one)?;
        Ok(one[0])
    }

    /// The id whose opaque form is `id`. Refuses 0 and negative ids.
    pub fn decrypt(&self, id: i64) -> Result<i64> {
        let mut one = [id];
        self.decrypt_in_place(&mut one)?;
        Ok(one[0])
    }

    /// Encrypts every id of `ids` in place. If any id is 0 or negative, nothing is
    /// changed and the error names the first such id.
    pub fn encrypt_in_place(&self, ids: &mut [i64]) -> Result<()> {
        check(ids, "encrypt")?;
        self.permute(ids, true);
        Ok(())
    }

    /// Decrypts every id of `ids` in place (as [`encrypt_in_place`](Self::encrypt_in_place)).
    pub fn decrypt_in_place(&self, ids: &mut [i64]) -> Result<()> {
        check(ids, "decrypt")?;
        self.permute(ids, false);
        Ok(())
    }

    /// The opaque forms of `ids`, in order; fails whole on the first invalid id.
    pub fn encrypt_many(&self, ids: &[i64]) -> Result<Vec<i64>> {
        let mut out = ids.to_vec();
        self.encrypt_in_place(&mut out)?;
        Ok(out)
    }

    /// The ids whose opaque forms are `ids`, in order; fails whole on the first
    /// invalid id.
    pub fn decrypt_many(&self, ids: &[i64]) -> Result<Vec<i64>> {
        let mut out = ids.to_vec();
        self.decrypt_in_place(&mut out)?;
        Ok(out)
    }

    /// FF1 with cycle walking over ids already checked to be in the domain.
    fn permute(&self, ids: &mut [i64], encrypt: bool) {
        match &self.ff1 {
            Ff1::Aes128(f) => f.permute(ids, encrypt),
            Ff1::Aes192(f) => f.permute(ids, encrypt),
            Ff1::Aes256(f) => f.permute(ids, encrypt),
        }
    }
}

/// The error for the first id of `ids` outside the domain, if any.
fn check(ids: &[i64], op: &str) -> Result<()> {
    match ids.iter().find(|&&id| id <= 0) {
        None => Ok(()),
        Some(id) => Err(Error::InvalidConfig(format!(
            "cannot {op} id {id}: IdCipher works on ids 1..=9223372036854775807 (positive i64); \
             pass the id as issued"
        ))),
    }
}
