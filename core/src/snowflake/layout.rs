//! The bit layout of a snowflake id and decoding.
//!
//! An id is `0 | timestamp | worker | sequence`, most significant first. Leaf uses
//! 41 + 10 + 12 bits and the Twitter epoch; both are configurable here, validated once
//! so the hot path never has to check them again.
//!
//! ```
//! use leafid::snowflake::{decode, Layout};
//! let layout = Layout::default();
//! let id = (1_000_i64 << 22) | (7 << 12) | 42;
//! let d = decode(id, &layout);
//! assert_eq!((d.timestamp_ms, d.worker_id, d.sequence), (layout.epoch_ms() + 1_000, 7, 42));
//! ```

use crate::error::{Error, Result};

/// Leaf's epoch (Twitter's): 2010-11-04T01:42:54.657Z, in ms since the Unix epoch.
pub const LEAF_EPOCH_MS: i64 = 1_288_834_974_657;

/// Bits of a JavaScript-safe id: every id below 2^53 is exact in a JS `number` (and
/// in JSON parsed by JavaScript).
pub const JS_SAFE_BITS: u32 = 53;

/// How the 63 usable bits of an id are split, and the epoch timestamps count from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    timestamp_bits: u8,
    worker_bits: u8,
    sequence_bits: u8,
    epoch_ms: i64,
}

impl Default for Layout {
    /// Leaf's layout: 41 timestamp bits, 10 worker bits, 12 sequence bits, epoch
    /// 1288834974657 (ids compatible with a Java Leaf deployment).
    fn default() -> Self {
        Layout {
            timestamp_bits: 41,
            worker_bits: 10,
            sequence_bits: 12,
            epoch_ms: LEAF_EPOCH_MS,
        }
    }
}

impl Layout {
    /// A layout with the given bit widths and epoch (ms since the Unix epoch).
    ///
    /// Refused with [`Error::InvalidConfig`] unless the widths sum to 63 (the sign bit
    /// stays 0 so ids are never negative) or to 53 (ids below 2^53, see [`Layout::js_safe`]), the sequence has 1..=22 bits, the worker id
    /// has 0..=31 bits, and the epoch is not negative and not in the future.
    pub fn new(
        timestamp_bits: u8,
        worker_bits: u8,
        sequence_bits: u8,
        epoch_ms: i64,
    ) -> Result<Layout> {
        let sum = timestamp_bits as u32 + worker_bits as u32 + sequence_bits as u32;
        if sum != 63 && sum != JS_SAFE_BITS {
            return Err(Error::InvalidConfig(format!(
                "layout bits {timestamp_bits} + {worker_bits} + {sequence_bits} = {sum}, but they must sum to 63 \
                 (the sign bit stays 0; Leaf uses 41 + 10 + 12), or to 53 for ids JavaScript numbers \
                 hold exactly (Layout::js_safe(): 41 + 3 + 9)"
            )));
        }
        if !(1..=22).contains(&sequence_bits) {
            return Err(Error::InvalidConfig(format!(
                "sequence bits {sequence_bits} out of range 1..=22; Leaf uses 12 (4096 ids per ms)"
            )));
        }
        if worker_bits > 31 {
            return Err(Error::InvalidConfig(format!(
                "worker bits {worker_bits} out of range 0..=31; Leaf uses 10 (1024 workers)"
            )));
        }
        if timestamp_bits < 30 {
            return Err(Error::InvalidConfig(format!(
                "timestamp bits {timestamp_bits} below 30 would run out within 12 days; Leaf uses 41 (69 years)"
            )));
        }
        if epoch_ms < 0 {
            return Err(Error::InvalidConfig(format!(
                "epoch {epoch_ms} is before 1970; give ms since the Unix epoch (Leaf: {LEAF_EPOCH_MS})"
            )));
        }
        let now = crate::clock::Clock::now_millis(&crate::clock::SystemClock);
        if epoch_ms > now {
            return Err(Error::InvalidConfig(format!(
                "epoch {epoch_ms} is in the future (now {now}); pick a past instant (Leaf: {LEAF_EPOCH_MS})"
            )));
        }
        Ok(Layout {
            timestamp_bits,
            worker_bits,
            sequence_bits,
            epoch_ms,
        })
    }

    /// A layout whose ids stay below 2^53, so they survive JSON and a JS `number`
    /// exactly: 41 timestamp bits, 3 worker bits, 9 sequence bits (53 in all, CosId's
    /// `SafeJavaScriptSnowflakeId` split), Leaf's epoch (2010-11-04).
    ///
    /// What it costs against Leaf's 41 + 10 + 12: 8 workers (ids 0..=7) instead of
    /// 1024, and 512 ids per millisecond per worker (512 000 per second; 4096 per ms
    /// over all 8 workers) instead of 4096. The timestamp lasts as long as Leaf's:
    /// 2^41 ms ≈ 69.7 years from the epoch, until 2080-07-10.
    ///
    /// ```
    /// let l = leafid::Layout::js_safe();
    /// assert_eq!((l.timestamp_bits(), l.worker_bits(), l.sequence_bits()), (41, 3, 9));
    /// assert_eq!((l.max_worker_id(), l.ids_per_ms()), (7, 512));
    /// assert!(l.max_id() < 1 << 53);
    /// ```
    pub fn js_safe() -> Layout {
        Layout {
            timestamp_bits: 41,
            worker_bits: 3,
            sequence_bits: 9,
            epoch_ms: LEAF_EPOCH_MS,
        }
    }

    /// The largest id this layout can produce (`2^63 - 1` for 63 bits, `2^53 - 1` for
    /// [`Layout::js_safe`]).
    pub fn max_id(&self) -> i64 {
        let bits = self.timestamp_bits as u32 + self.worker_bits as u32 + self.sequence_bits as u32;
        (u64::MAX >> (64 - bits)) as i64
    }

    /// Bits of milliseconds since the epoch.
    pub fn timestamp_bits(&self) -> u8 {
        self.timestamp_bits
    }

    /// Bits of worker id.
    pub fn worker_bits(&self) -> u8 {
        self.worker_bits
    }

    /// Bits of per-millisecond sequence.
    pub fn sequence_bits(&self) -> u8 {
        self.sequence_bits
    }

    /// The epoch, in ms since the Unix epoch.
    pub fn epoch_ms(&self) -> i64 {
        self.epoch_ms
    }

    /// The largest worker id (1023 for Leaf's layout).
    pub fn max_worker_id(&self) -> u32 {
        ((1u64 << self.worker_bits) - 1) as u32
    }

    /// The largest sequence number (4095 for Leaf's layout).
    pub fn max_sequence(&self) -> u32 {
        ((1u64 << self.sequence_bits) - 1) as u32
    }

    /// The last millisecond (since the Unix epoch) the layout can represent.
    pub fn max_timestamp_ms(&self) -> i64 {
        self.epoch_ms + self.max_relative_ms()
    }

    /// Ids per millisecond at most (4096 for Leaf's layout).
    pub fn ids_per_ms(&self) -> u64 {
        1u64 << self.sequence_bits
    }

    /// The largest timestamp offset from the epoch.
    pub(crate) fn max_relative_ms(&self) -> i64 {
        ((1u64 << self.timestamp_bits) - 1) as i64
    }

    /// Where the timestamp starts (22 for Leaf's layout).
    pub(crate) fn timestamp_shift(&self) -> u32 {
        self.worker_bits as u32 + self.sequence_bits as u32
    }

    /// Builds an id. The caller guarantees every part fits. (The generator composes
    /// with `word::Shape::compose`; this one checks the layout's own arithmetic.)
    #[cfg(test)]
    pub(crate) fn compose(&self, relative_ms: i64, worker_id: u32, sequence: u32) -> u64 {
        ((relative_ms as u64) << self.timestamp_shift())
            | ((worker_id as u64) << self.sequence_bits)
            | sequence as u64
    }

    /// Checks that `worker_id` fits this layout.
    pub fn check_worker_id(&self, worker_id: i64) -> Result<u32> {
        if worker_id < 0 || worker_id > self.max_worker_id() as i64 {
            return Err(Error::WorkerIdOutOfRange {
                worker_id,
                max: self.max_worker_id(),
            });
        }
        Ok(worker_id as u32)
    }

    /// Splits an id into its parts (see [`decode`]).
    pub fn decode(&self, id: i64) -> DecodedId {
        decode(id, self)
    }

    /// [`decode`] for ids from outside (the bindings' `decode`): a negative id was never
    /// issued by any layout and is refused instead of decoded into nonsense.
    pub fn checked_decode(&self, id: i64) -> crate::Result<DecodedId> {
        if id < 0 {
            return Err(crate::Error::InvalidConfig(format!(
                "{id} is not a snowflake id: ids are positive 63-bit integers"
            )));
        }
        Ok(decode(id, self))
    }
}

/// The parts of a snowflake id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodedId {
    /// When it was issued, in ms since the Unix epoch.
    pub timestamp_ms: i64,
    /// The worker that issued it.
    pub worker_id: u32,
    /// Its position within that millisecond.
    pub sequence: u32,
}

/// Splits an id into timestamp, worker id and sequence under `layout` (Leaf's
/// `/decodeSnowflakeId`, with the layout's epoch instead of a hard-coded one).
pub fn decode(id: i64, layout: &Layout) -> DecodedId {
    // Reading as u64 keeps a (foreign, negative) id from smearing its sign bit into
    // the timestamp; the sign bit itself is dropped.
    let raw = (id as u64) & (u64::MAX >> 1);
    let sequence = (raw & ((1u64 << layout.sequence_bits) - 1)) as u32;
    let worker_id = ((raw >> layout.sequence_bits) & ((1u64 << layout.worker_bits) - 1)) as u32;
    let relative = (raw >> layout.timestamp_shift()) as i64;
    DecodedId {
        timestamp_ms: layout.epoch_ms + relative,
        worker_id,
        sequence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_leafs_layout() {
        let l = Layout::default();
        assert_eq!(
            (l.timestamp_bits(), l.worker_bits(), l.sequence_bits()),
            (41, 10, 12)
        );
        assert_eq!(l.epoch_ms(), 1_288_834_974_657);
        assert_eq!(l.max_worker_id(), 1023);
        assert_eq!(l.max_sequence(), 4095);
        assert_eq!(l.max_timestamp_ms(), 3_487_858_230_208);
    }

    #[test]
    fn decodes_leafs_documented_example() {
        // leaf-server's monitor decodes 1567733700834 / worker 39 / sequence 3448.
        let l = Layout::default();
        let id = ((1_567_733_700_834 - LEAF_EPOCH_MS) << 22) | (39 << 12) | 3448;
        let d = decode(id, &l);
        assert_eq!(d.timestamp_ms, 1_567_733_700_834);
        assert_eq!(d.worker_id, 39);
        assert_eq!(d.sequence, 3448);
    }

    #[test]
    fn compose_and_decode_round_trip_on_custom_layout() {
        let l = Layout::new(39, 16, 8, 1_600_000_000_000).unwrap();
        let id = l.compose(123_456, 65_535, 255) as i64;
        let d = l.decode(id);
        assert_eq!(d.timestamp_ms, 1_600_000_000_000 + 123_456);
        assert_eq!(d.worker_id, 65_535);
        assert_eq!(d.sequence, 255);
    }

    #[test]
    fn js_safe_layout_keeps_every_id_below_2_pow_53() {
        let l = Layout::js_safe();
        assert_eq!(l.max_id(), (1 << 53) - 1);
        let top = l.compose(l.max_relative_ms(), l.max_worker_id(), l.max_sequence());
        assert_eq!(top, (1 << 53) - 1);
        // 2080-07-10T17:30:30.208Z, as long as Leaf's own layout.
        assert_eq!(l.max_timestamp_ms(), 3_487_858_230_208);
        // The same split is accepted from its parts (how Python and Node pass it).
        assert_eq!(Layout::new(41, 3, 9, LEAF_EPOCH_MS).unwrap(), l);
        assert_eq!(Layout::default().max_id(), i64::MAX);
    }

    #[test]
    fn refuses_bits_not_summing_to_63() {
        let e = Layout::new(41, 10, 13, LEAF_EPOCH_MS).unwrap_err();
        assert!(e.to_string().contains("sum to 63"), "{e}");
    }

    #[test]
    fn refuses_future_and_negative_epochs() {
        let e = Layout::new(41, 10, 12, i64::MAX / 2).unwrap_err();
        assert!(e.to_string().contains("future"), "{e}");
        let e = Layout::new(41, 10, 12, -1).unwrap_err();
        assert!(e.to_string().contains("before 1970"), "{e}");
    }

    #[test]
    fn refuses_zero_sequence_and_tiny_timestamp() {
        assert!(Layout::new(53, 10, 0, LEAF_EPOCH_MS).is_err());
        assert!(Layout::new(20, 21, 22, LEAF_EPOCH_MS).is_err());
        assert!(Layout::new(30, 32, 1, LEAF_EPOCH_MS).is_err());
    }

    #[test]
    fn worker_id_range_is_checked() {
        let l = Layout::default();
        assert_eq!(l.check_worker_id(1023).unwrap(), 1023);
        assert!(matches!(
            l.check_worker_id(1024),
            Err(Error::WorkerIdOutOfRange { max: 1023, .. })
        ));
        assert!(l.check_worker_id(-1).is_err());
    }
}
