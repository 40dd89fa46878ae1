//! NIST SP 800-38G FF1, specialised to one shape: radix 2, 63 numerals, empty tweak.
//!
//! The `fpe` crate implements FF1 for any radix and length, and pays for it per call:
//! each Feistel round clones the AES key schedule into a fresh CBC-MAC state, and its
//! numeral strings do bignum arithmetic. With the shape fixed, every length in the algorithm is a constant
//! and each round is one AES block on a stack array, so this file does only what the
//! standard's steps say (numbered as in SP 800-38G §6.2, Algorithm 7):
//!
//! - n = 63, u = 31, v = 32; b = ⌈⌈32·log2 2⌉/8⌉ = 4; d = 4⌈b/4⌉ + 4 = 8.
//! - P = [1, 2, 1] ‖ [radix = 2]^3 ‖ [10] ‖ [u mod 256 = 31] ‖ [n = 63]^4 ‖ [t = 0]^4.
//! - Q = [0]^11 ‖ [i] ‖ [NUM(B)]^4 (T is empty, (−t−b−1) mod 16 = 11 zero bytes).
//! - R = PRF(P ‖ Q) = AES(AES(P) ⊕ Q): CBC-MAC of two blocks, the first fixed per key.
//! - S = the first d = 8 bytes of R (no further blocks: d ≤ 16); y = NUM(S).
//!
//! It is FF1, not a variant: `core/tests/cipher.rs` checks it bit for bit against the
//! `fpe` crate's general implementation (itself checked against NIST's samples there)
//! for all three key sizes.

use aes::cipher::consts::U16;
use aes::cipher::{
    Array, BlockCipherEncBackend, BlockCipherEncClosure, BlockCipherEncrypt, BlockSizeUser,
};

/// Numerals in A, the first half (the high bits).
const U: u32 = 31;
/// Numerals in B, the second half (the low bits).
const V: u32 = 32;

/// FF1 over 63 binary numerals with an empty tweak, under block cipher `C`.
#[derive(Clone)]
pub(crate) struct Ff1Bits63<C> {
    aes: C,
    /// AES(P): the CBC-MAC state after the fixed first block.
    p_mac: [u8; 16],
}

impl<C: BlockCipherEncrypt<BlockSize = U16>> Ff1Bits63<C> {
    /// Precomputes AES(P) under `aes`.
    pub(crate) fn new(aes: C) -> Self {
        // Step 5: P = [1,2,1] ‖ [radix]^3 ‖ [10] ‖ [u mod 256] ‖ [n]^4 ‖ [t]^4.
        let p: [u8; 16] = [1, 2, 1, 0, 0, 2, 10, U as u8, 0, 0, 0, 63, 0, 0, 0, 0];
        let mut block = Array::from(p);
        aes.encrypt_block(&mut block);
        Ff1Bits63 {
            aes,
            p_mac: block.into(),
        }
    }

    /// FF1.Encrypt (or FF1.Decrypt) of every id of `ids` in place, walking on past 0
    /// (see [`super`]). Every id must be in `1..=i64::MAX`.
    ///
    /// The AES backend (AES-NI, VAES or software) is chosen once for the whole slice:
    /// going through `encrypt_block` per round repeats that dispatch ten times per id,
    /// which costs more than the AES rounds themselves.
    pub(crate) fn permute(&self, ids: &mut [i64], encrypt: bool) {
        self.aes.encrypt_with_backend(Permute {
            p_mac: &self.p_mac,
            ids,
            encrypt,
        });
    }
}

/// The work [`Ff1Bits63::permute`] hands to the AES backend.
struct Permute<'a> {
    p_mac: &'a [u8; 16],
    ids: &'a mut [i64],
    encrypt: bool,
}

impl BlockSizeUser for Permute<'_> {
    type BlockSize = U16;
}

impl BlockCipherEncClosure for Permute<'_> {
    #[inline(always)]
    fn call<B: BlockCipherEncBackend<BlockSize = U16>>(self, backend: &B) {
        let rounds = Rounds {
            p_mac: self.p_mac,
            backend,
        };
        for id in self.ids.iter_mut() {
            let mut x = *id as u64;
            // Cycle walking: FF1 permutes 0..2^63; 0 is outside the domain, so walk on
            // along FF1's cycle until the value is back inside (once, for one id).
            loop {
                x = if self.encrypt {
                    rounds.encrypt(x)
                } else {
                    rounds.decrypt(x)
                };
                if x != 0 {
                    break;
                }
            }
            *id = x as i64;
        }
    }
}

/// FF1's ten Feistel rounds on one backend.
struct Rounds<'a, B> {
    p_mac: &'a [u8; 16],
    backend: &'a B,
}

impl<B: BlockCipherEncBackend<BlockSize = U16>> Rounds<'_, B> {
    /// Steps 6i–6iv: y = NUM(S) for round `i` with `half` as the PRF's numeral input.
    #[inline(always)]
    fn round_value(&self, i: u8, half: u32) -> u64 {
        // Q = [0]^11 ‖ [i] ‖ [NUM(half)]^4, chained onto AES(P) (CBC with a zero IV).
        let mut q = *self.p_mac;
        q[11] ^= i;
        for (byte, h) in q[12..].iter_mut().zip(half.to_be_bytes()) {
            *byte ^= h;
        }
        let mut block = Array::from(q);
        self.backend.encrypt_block_inplace(&mut block);
        let r: [u8; 16] = block.into();
        u64::from_be_bytes(r[..8].try_into().expect("8 bytes"))
    }

    /// FF1.Encrypt(K, [], X) for X = the 63 low bits of `x`.
    #[inline(always)]
    fn encrypt(&self, x: u64) -> u64 {
        // Steps 1–2: A = the first u numerals, B = the last v.
        let (mut a, mut b) = ((x >> V) as u32, x as u32);
        for i in 0..10u8 {
            // Step 6v: m = u on even rounds, v on odd ones.
            let m = if i % 2 == 0 { U } else { V };
            // Step 6vi: c = (NUM(A) + y) mod 2^m.
            let c = (u64::from(a).wrapping_add(self.round_value(i, b)) & mask(m)) as u32;
            // Steps 6viii–6ix.
            a = b;
            b = c;
        }
        // Step 7: A ‖ B; after ten rounds A has u numerals and B has v.
        (u64::from(a) << V) | u64::from(b)
    }

    /// FF1.Decrypt(K, [], X) for X = the 63 low bits of `x`.
    #[inline(always)]
    fn decrypt(&self, x: u64) -> u64 {
        let (mut a, mut b) = ((x >> V) as u32, x as u32);
        for i in (0..10u8).rev() {
            let m = if i % 2 == 0 { U } else { V };
            // c = (NUM(B) − y) mod 2^m, with A as the PRF's input.
            let c = (u64::from(b).wrapping_sub(self.round_value(i, a)) & mask(m)) as u32;
            b = a;
            a = c;
        }
        (u64::from(a) << V) | u64::from(b)
    }
}

/// The low `bits` bits set.
fn mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}
