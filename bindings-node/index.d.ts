// Type definitions of leafid for Node.
//
// - Ids are always `bigint` (64-bit, never a lossy `number`). `JSON.stringify` throws on
//   a bigint, so every `nextId` has a `nextIdString` twin giving the decimal form: send
//   that in JSON, parse it back with `BigInt(s)`; or serialize whole responses with
//   `jsonReplacer` (Express `app.set('json replacer', jsonReplacer)`). Ids of the
//   `jsSafe` option and `jsSafeLayout()` are `bigint` too, below 2^53: `Number(id)` is
//   exact for them.
// - Synchronous calls (`nextId`, `nextIds`, `nextIdString`, `tag`, …) never wait on I/O:
//   when no id is at hand (both segments spent and the refill not back, first segment
//   not loaded yet, the registry needed first) they throw at once, a segment generator
//   with `LEAF_SEGMENTS_EXHAUSTED`, a snowflake generator with the cause's code.
// - Both generators connect the same way: `SegmentGenerator.connect(url, options?)`,
//   `SnowflakeGenerator.connect(registryUrl, options?)` (the older
//   `SnowflakeGenerator.connect({ registry, … })` still works).
// - Every failure of the core is a `LeafError` (a class: `instanceof`, `isLeafError`)
//   with a stable `code`; its stack names your call site, a Promise's rejection too.
// - `connect`, the `…Async` twins (`nextIdAsync`, `nextIdsAsync`), the admin calls and
//   `close` return Promises. Their work runs on the core's own threads (never on the
//   event loop, never on libuv's thread pool, which your `fs`/`dns` work needs); the
//   Promise settles on the event loop when it is done. The `…Async` twins wait up to
//   `waitTimeoutMs` for a refill. `nextIdAsync` with the id at hand returns a Promise
//   already resolved (no thread); every 64th in a row resolves after a turn of the
//   event loop instead (`setImmediate`), so that a loop of `await`s lets timers and I/O run.
// - Arguments are checked as Node's built-in modules check them, nothing is coerced:
//   the wrong type is a `TypeError` with `code: 'ERR_INVALID_ARG_TYPE'`, unusable
//   content a `TypeError` `ERR_INVALID_ARG_VALUE`, a number out of range, NaN, or not an
//   integer where one is needed a `RangeError` `ERR_OUT_OF_RANGE` (see `ArgumentError`),
//   an options property leafid does not know a `TypeError` `ERR_INVALID_ARG_VALUE`
//   naming the closest option. Synchronous calls throw it, Promise-returning ones
//   reject with it. Everything else is a `LeafError` with a `LEAF_…` code.
// - `nextId`, `nextIds` and `nextIdString` are own, bound functions of each generator
//   and handle (the fast path): `const next = handle.nextId; next()` works.
// - Generators cannot cross `worker_threads` (they are native objects): connect one per
//   thread, to the same URL; ids stay unique. Under `cluster` every worker connects
//   its own, with its own segments; a snowflake worker id has one live holder, so
//   workers sharing one registry URL need a registry that hands out distinct ids
//   (`local:`, `zookeeper-recycle:`); the others reject with `LEAF_WORKER_ID_IN_USE`.

/**
 * The error of every failure of leafid's core: `name` is `'LeafError'`, `message` the
 * core's message (what happened, then what to do, naming methods and options as Node
 * spells them: `createTag`, `waitTimeoutMs`), `code` stable across releases (one class
 * for every code: switch on `code`). Synchronous calls throw it, Promises reject with
 * it; either way its stack names your call site (a rejection's through V8's async stack
 * trace, so `await` the call). A bad argument is an `ArgumentError` instead, as Node's
 * built-in modules throw them. Exported at run time: `e instanceof LeafError`,
 * `isLeafError(e)`.
 */
export declare class LeafError extends Error {
  constructor(message: string, code: LeafErrorCode, options?: { cause?: unknown });
  name: 'LeafError';
  /** e.g. `LEAF_TAG_NOT_FOUND`, `LEAF_STORE_UNAVAILABLE`, `LEAF_CLOCK_MOVED_BACKWARDS`. */
  code: LeafErrorCode;
}

/**
 * Whether `e` is a `LeafError`, also one thrown by another copy of the package (two
 * versions side by side, where `instanceof` compares with the other copy's class).
 */
export declare function isLeafError(e: unknown): e is LeafError;

/**
 * A `JSON.stringify` replacer for responses that carry ids: a bigint becomes its decimal
 * string, a `BigInt64Array` an array of them, anything else passes unchanged. Always a
 * string, even below 2^53, so a field's JSON type never depends on its value (JS
 * clients take 64-bit ids as strings, like Twitter's `id_str`); read it back with
 * `BigInt(s)`. Express: `app.set('json replacer', jsonReplacer)`; Fastify:
 * `app.setReplySerializer((payload) => JSON.stringify(payload, jsonReplacer))`.
 */
export declare function jsonReplacer(key: string, value: unknown): unknown;

/**
 * Node's own error for a bad argument, as its built-in modules throw them: a `TypeError`
 * (`ERR_INVALID_ARG_TYPE`: the wrong type; `ERR_INVALID_ARG_VALUE`: the right type,
 * unusable content, or an options property leafid does not know) or a `RangeError`
 * (`ERR_OUT_OF_RANGE`: a number out of range, NaN, infinite or not an integer;
 * `ERR_CRYPTO_INVALID_KEYLEN`: an `IdCipher` key). A type only: test `e.code`.
 */
export interface ArgumentError extends Error {
  name: 'TypeError' | 'RangeError';
  code: 'ERR_INVALID_ARG_TYPE' | 'ERR_INVALID_ARG_VALUE' | 'ERR_OUT_OF_RANGE' | 'ERR_CRYPTO_INVALID_KEYLEN';
}

/** Every code a leafid error can carry (one per core error). */
export type LeafErrorCode =
  | 'LEAF_INVALID_TAG'
  | 'LEAF_INVALID_URL'
  | 'LEAF_INVALID_CONFIG'
  | 'LEAF_TAG_NOT_FOUND'
  | 'LEAF_TAG_EXISTS'
  | 'LEAF_TABLE_MISSING'
  | 'LEAF_ACCESS_DENIED'
  | 'LEAF_STORE_UNAVAILABLE'
  | 'LEAF_SEGMENTS_EXHAUSTED'
  | 'LEAF_CLOSED'
  | 'LEAF_CLOCK_MOVED_BACKWARDS'
  | 'LEAF_CLOCK_BEHIND_REGISTRY'
  | 'LEAF_TIMESTAMP_OVERFLOW'
  | 'LEAF_WORKER_ID_OUT_OF_RANGE'
  | 'LEAF_WORKER_ID_EXHAUSTED'
  | 'LEAF_WORKER_ID_IN_USE'
  | 'LEAF_CLOCK_SKEW'
  | 'LEAF_REGISTRY_UNAVAILABLE'
  | 'LEAF_LEASE_LOST'
  | 'LEAF_MALFORMED'
  | 'LEAF_IO';

/**
 * Options of `SegmentGenerator.connect`; defaults are Leaf's. A property not listed here
 * is refused, in plain JS too (a `TypeError`, `ERR_INVALID_ARG_VALUE`, naming the
 * closest option), as in every options object of leafid.
 */
export interface SegmentOptions {
  /**
   * How long `nextIdAsync` waits for a refill when both segments are spent (1000; a
   * non-negative number, `Infinity` for no limit). `nextId` never waits.
   */
  waitTimeoutMs?: number;
  /** How often the tag list is reloaded from the table (60000). */
  refreshIntervalMs?: number;
  /** Create `leaf_alloc` if missing (false; SQLite URLs always do). */
  createTable?: boolean;
  /** Preload the next segment once 10% of the current one is used (true). */
  doubleBuffer?: boolean;
  /** The largest step the dynamic step grows to (1000000). */
  maxStep?: number;
  /**
   * Never issue an id at or above 2^53 (false), so `Number(id)` is exact (ids are still
   * `bigint`, as every id). Once a tag reaches 2^53 its calls throw `LEAF_INVALID_CONFIG`.
   */
  jsSafe?: boolean;
  /**
   * Up to this many ids (at most 4096) reserved per thread at a time, so worker
   * threads issuing from one tag do not contend (0: every id in call order across
   * threads). Ids then increase per thread, and across threads as a trend only.
   */
  threadChunk?: number;
  /**
   * Tags whose first segments are loaded before `connect` resolves, so the first
   * `nextId` on them succeeds without waiting.
   */
  tags?: string[];
}

/** Options of `createTag`. */
export interface CreateTagOptions {
  /** The first id (1): a safe integer or a bigint. */
  start?: number | bigint;
  /** Ids per segment (1000): a safe integer or a bigint. */
  step?: number | bigint;
  /** Free text (""). */
  description?: string;
  /**
   * A tag already in the store is fine (false): it is left as it is (start and step not
   * compared) and usable at once, so a start-up script can run twice.
   */
  existOk?: boolean;
}

/**
 * One segment: ids `value..max` remain. The ids are `bigint`, as every id (a `number` is
 * inexact past 2^53); a step fits `leaf_alloc.step`, an `int`, so it is a `number`.
 */
export interface SegmentStats {
  value: bigint;
  max: bigint;
  step: number;
  /** The JSON form (`JSON.stringify(gen.stats())` works): the ids as decimal strings. */
  toJSON(): { value: string; max: string; step: number };
}

/** One tag's state, as Leaf's /cache page shows it, plus refill figures. */
export interface TagStats {
  tag: string;
  initialized: boolean;
  /** Index (0 or 1) of the current segment in `segments`. */
  current: number;
  nextReady: boolean;
  segments: SegmentStats[];
  /** The step of the latest load (dynamic). */
  step: number;
  /** The table's step (the floor of the dynamic step). */
  minStep: number;
  /** Successful loads so far. */
  refills: number;
  /** Milliseconds the latest refill took. */
  lastRefillMs?: number;
  lastError?: string;
}

/** Issues ids for the tags of one `leaf_alloc` table. */
export declare class SegmentGenerator {
  private constructor();
  /**
   * Connects to `mysql://user:pass@host:port/db`, `sqlite://path` or `memory:` and loads
   * the tag list (and the first segments of `options.tags`), off the event loop. Rejects with `LEAF_INVALID_URL` before any I/O,
   * `LEAF_STORE_UNAVAILABLE` when the database cannot be reached, `LEAF_TABLE_MISSING`
   * when `leaf_alloc` is absent and `createTable` is not set.
   */
  static connect(url: string, options?: SegmentOptions): Promise<SegmentGenerator>;
  /**
   * The next id of `tag`: a hash lookup and an atomic add; never waits. Throws
   * `LEAF_TAG_NOT_FOUND` for a tag not in the table at the last refresh (`nextIdAsync`
   * looks it up in the store), `LEAF_INVALID_TAG` for an empty or over-long one,
   * `LEAF_SEGMENTS_EXHAUSTED` at once when no id is at hand (a refill is then under
   * way: retry, or use `nextIdAsync`), `LEAF_CLOSED` after `close()`.
   */
  nextId(tag: string): bigint;
  /**
   * The next id of `tag`, waiting off the event loop up to `waitTimeoutMs` for a refill
   * (a tag created elsewhere since the last refresh is looked up in the store first).
   * Rejects as `nextId` throws.
   */
  nextIdAsync(tag: string): Promise<bigint>;
  /** `n` ids of `tag` (0 ≤ n ≤ 2^20), waiting as `nextIdAsync` does. */
  nextIdsAsync(tag: string, n: number): Promise<BigInt64Array>;
  /** The next id of `tag` as a decimal string (for JSON). */
  nextIdString(tag: string): string;
  /**
   * `n` ids of `tag` (0 ≤ n ≤ 2^20), ascending within each segment, written straight
   * into the returned array. A bad `n` is a `TypeError` / `RangeError`; otherwise it
   * throws as `nextId` does, and a failed batch hands out none of its ids.
   */
  nextIds(tag: string, n: number): BigInt64Array;
  /**
   * A handle on `tag`: the fast path (no lookup per call). Never waits: a tag missing
   * from the cache throws `LEAF_TAG_NOT_FOUND` while it is looked up in the background
   * (`nextIdAsync(tag)` waits for that lookup).
   */
  tag(tag: string): TagHandle;
  /** The tags known since the last refresh, sorted. */
  tags(): string[];
  /** Inserts a tag and makes it usable at once. */
  createTag(tag: string, options?: CreateTagOptions): Promise<void>;
  /** Creates `leaf_alloc` if missing. */
  createTable(): Promise<void>;
  /** Reloads the tag list now. */
  refresh(): Promise<void>;
  /** Per-tag state. */
  stats(): TagStats[];
  /**
   * Stops background work, off the event loop; once the Promise settles every call
   * on this generator and its handles throws `LEAF_CLOSED`. Idempotent.
   */
  close(): Promise<void>;
}

/** The fast way to issue ids for one tag. */
export declare class TagHandle {
  private constructor();
  /** The tag this handle issues for. */
  readonly tag: string;
  /**
   * The next id: an atomic add in the common case, no lookup. Throws as
   * `SegmentGenerator.nextId` does.
   */
  nextId(): bigint;
  /** The next id as a decimal string (for JSON). */
  nextIdString(): string;
  /** `n` ids (0 ≤ n ≤ 2^20), as `SegmentGenerator.nextIds`. */
  nextIds(n: number): BigInt64Array;
  /** The next id, waiting off the event loop up to `waitTimeoutMs` for a refill. */
  nextIdAsync(): Promise<bigint>;
  /** `n` ids (0 ≤ n ≤ 2^20), waiting as `nextIdAsync` does. */
  nextIdsAsync(n: number): Promise<BigInt64Array>;
}

/** How the 63 bits of an id are split, and the epoch. */
export interface Layout {
  timestampBits: number;
  workerBits: number;
  sequenceBits: number;
  epochMs: number;
}

/**
 * Options of `SnowflakeGenerator.connect(url, options)`. A property not listed here is
 * refused, in plain JS too (a `TypeError`, `ERR_INVALID_ARG_VALUE`, naming the closest
 * option).
 */
export interface SnowflakeConnectOptions {
  /** Bit layout and epoch (Leaf's 41 + 10 + 12 by default). */
  layout?: Layout;
  /** Directory of the worker cache file. */
  cacheDir?: string;
  /** How often the time bound is persisted (3000). */
  heartbeatMs?: number;
  /**
   * How far ahead of the clock each persisted bound reaches (65000, or twice a longer
   * `heartbeatMs`): ids keep coming through a registry outage this long, less at most
   * one heartbeat; past it `nextId` throws and `nextIdAsync` waits for the registry.
   * Holders of one identity must share it. The price: a holder that takes over the
   * worker id after a crash issues ids whose time part leads the clock by up to this
   * much until the clock catches up.
   */
  lookaheadMs?: number;
  /** Largest backward clock step waited out (5). */
  maxBackwardMs?: number;
  /**
   * How far the clock may be behind the worker's recorded floor beyond `lookaheadMs`
   * and `maxSkewMs` before `connect` rejects with `LEAF_CLOCK_BEHIND_REGISTRY` (10000).
   * Start-up never waits for the clock: ids start above the floor at once.
   */
  startupWaitMs?: number;
  /**
   * Largest difference allowed between the local clock and the registry's clock
   * (ZooKeeper's, the database's), checked at connect and on every heartbeat (5000).
   * Beyond it `connect` rejects with `LEAF_CLOCK_SKEW`. `fixed:` and `local:` have no
   * clock to compare with.
   */
  maxSkewMs?: number;
}

/** The older form's one object, `SnowflakeGenerator.connect({ registry, … })`. */
export interface SnowflakeOptions extends SnowflakeConnectOptions {
  /** The registry URL, as `connect(url)` takes it. */
  registry: string;
}

/** Issues snowflake ids with a worker id from a registry. */
export declare class SnowflakeGenerator {
  private constructor();
  /**
   * Acquires a worker id and starts the heartbeat, off the event loop. A worker id has
   * at most one live holder: another process (a `cluster` worker started from the same
   * options) or generator claiming a held identity gets a distinct worker id where the
   * registry can give one (`local:`, `zookeeper-recycle:`), else the Promise rejects
   * with `LEAF_WORKER_ID_IN_USE`, whose message names the identity, the holder and what
   * to do. Rejects with `LEAF_INVALID_URL` / `LEAF_INVALID_CONFIG` /
   * `LEAF_WORKER_ID_OUT_OF_RANGE` before any I/O (also for a `-` in `ip`, `port` or a
   * `zookeeper://` name, which Java Leaf cannot read back), `LEAF_WORKER_ID_EXHAUSTED`
   * when every id of the pool is held, `LEAF_REGISTRY_UNAVAILABLE`,
   * `LEAF_CLOCK_BEHIND_REGISTRY` when the clock is behind a time this worker id may
   * already have used, `LEAF_CLOCK_SKEW` when the local clock is more than `maxSkewMs`
   * off the registry's, `LEAF_MALFORMED` / `LEAF_IO` for the cache file.
   *
   * `url` is the registry: `fixed:7`, `local:///dir`, `zookeeper://host:port/name?port=P`,
   * `zookeeper-recycle://host:port/name`, `mysql://user:pass@host/db?port=P`; the same
   * shape as `SegmentGenerator.connect(url, options)`.
   */
  static connect(url: string, options?: SnowflakeConnectOptions): Promise<SnowflakeGenerator>;
  /**
   * The older form, kept working: `connect({ registry: url, ...options })` is
   * `connect(url, options)`.
   */
  static connect(options: SnowflakeOptions): Promise<SnowflakeGenerator>;
  /**
   * The next id: strictly greater than every id this generator issued before. With
   * Leaf's layout at most 4096 per millisecond (past that it waits for the next ms).
   * Throws `LEAF_CLOCK_MOVED_BACKWARDS` when the clock went back more than
   * `maxBackwardMs`, `LEAF_TIMESTAMP_OVERFLOW` past the layout's range, `LEAF_LEASE_LOST`
   * when the registry took the worker id away, `LEAF_CLOCK_SKEW` when a heartbeat found
   * the local clock more than `maxSkewMs` off the registry's (issuing resumes once they
   * agree), `LEAF_CLOSED` after `close()`. Never waits on I/O: when the registry is
   * needed first (a late heartbeat, a lost lease) it throws at once with the cause's code
   * while the work goes on in the background. A registry out of reach for less than
   * `lookaheadMs` is not needed: ids keep coming; past that, `LEAF_REGISTRY_UNAVAILABLE`.
   */
  nextId(): bigint;
  /**
   * The next id, waiting off the event loop when the registry is needed first: for at
   * most 10 s (the core's `MAX_ASYNC_WAIT`), then it rejects with the cause's code
   * (`LEAF_REGISTRY_UNAVAILABLE` for a registry out of reach past `lookaheadMs`).
   */
  nextIdAsync(): Promise<bigint>;
  /**
   * `n` ids (0 ≤ n ≤ 2^20), waiting as `nextIdAsync` does, off the event loop: a
   * maximal batch takes about 370 ms in Leaf's layout (3 072 ids per millisecond).
   */
  nextIdsAsync(n: number): Promise<BigInt64Array>;
  /** The next id as a decimal string (for JSON). */
  nextIdString(): string;
  /**
   * `n` ids in increasing order, reserving a run of sequence numbers per atomic step;
   * paced by the layout's ids per millisecond (a batch takes at most three quarters of
   * each millisecond's sequence, the rest is kept for single ids). It holds the event
   * loop while the sequence paces it, so `n` is at most 8 milliseconds' worth (the core's
   * `SYNC_BATCH_MS`): 24 576 ids in Leaf's layout, 3 072 in `jsSafeLayout()`; a larger
   * `n` (up to 2^20) throws `LEAF_INVALID_CONFIG` naming `nextIdsAsync`, which takes up
   * to 2^20 without holding the loop.
   */
  nextIds(n: number): BigInt64Array;
  /** The worker id held. */
  readonly workerId: number;
  /** The layout in use. */
  readonly layout: Layout;
  /**
   * Persists the last timestamp issued, releases the worker id (another process may
   * take it afterwards) and stops the heartbeat, off the event loop, waiting at most the
   * core's bound (3 s, `DEFAULT_CLOSE_WAIT`). Resolves with `true` when the worker id was
   * released in time, `false` when the registry did not answer within the bound (the
   * release goes on in the background; failing that, the lease expires on the
   * registry's side). Once it settles every call throws `LEAF_CLOSED`. Idempotent.
   */
  close(): Promise<boolean>;
}

/** An id split into its parts. */
export interface DecodedId {
  timestampMs: number;
  workerId: number;
  sequence: number;
}

/**
 * Splits an id into timestamp, worker id and sequence (Leaf's layout by default). A
 * non-bigint id is a `TypeError`, a negative id or one past 2^63-1 a `RangeError`, a
 * layout with a property it does not know a `TypeError` (`ERR_INVALID_ARG_VALUE`), one
 * whose bits the core refuses a `LeafError` (`LEAF_INVALID_CONFIG`).
 */
export declare function decode(id: bigint, layout?: Layout): DecodedId;
/** Leaf's layout: 41 + 10 + 12 bits, epoch 1288834974657. */
export declare function leafLayout(): Layout;
/**
 * A layout whose ids stay below 2^53, so `Number(id)` is exact (the generator still
 * returns `bigint`, as every id):
 * 41 timestamp bits (until 2080-07-10), 3 worker bits (worker ids 0..7), 9 sequence
 * bits (512 ids per ms per worker), Leaf's epoch. `new Layout` bits must sum to 63, or
 * to 53 like this one.
 */
export declare function jsSafeLayout(): Layout;

/**
 * A keyed, reversible permutation of the positive ids `1n..2n**63n-1n` (NIST SP
 * 800-38G FF1 with AES): public ids that reveal no count and no time. Same key, same
 * answer as Rust and Python.
 *
 * Encrypted ids are positive 64-bit ids but not ordered: store the plain id, show the
 * encrypted one. `encrypt` and `decrypt` are own, bound functions of each instance
 * (the fast path), usable detached. Errors: a key that is not a `Uint8Array` (a `Buffer` is one) or an id
 * that is not a bigint is a `TypeError` (`ERR_INVALID_ARG_TYPE`); a key that is not
 * 16, 24 or 32 bytes a `RangeError` (`ERR_CRYPTO_INVALID_KEYLEN`); an id that is 0,
 * negative or past 2^63-1 a `RangeError` (`ERR_OUT_OF_RANGE`).
 */
export declare class IdCipher {
  /** `key`: 16, 24 or 32 secret bytes (AES-128, AES-192, AES-256); keep it forever. */
  constructor(key: Uint8Array);
  /** The opaque form of `id`. */
  encrypt(id: bigint): bigint;
  /** The id whose opaque form is `id`. */
  decrypt(id: bigint): bigint;
  /** `encrypt` over every id, into a new array; throws on the first invalid id. */
  encryptMany(ids: BigInt64Array): BigInt64Array;
  /** `decrypt` over every id, into a new array; throws on the first invalid id. */
  decryptMany(ids: BigInt64Array): BigInt64Array;
}

/**
 * `id` (`0n..2n**63n-1n`) as 11 characters of `0-9A-Za-z` whose string order (`<`,
 * `sort()`) is the ids' order. An encoding, not encryption. A negative or oversized id
 * is a `RangeError` (`ERR_OUT_OF_RANGE`), a non-bigint a `TypeError`.
 */
export declare function encodeBase62(id: bigint): string;
/**
 * The id an 11-character base-62 string encodes. A wrong length, a character outside
 * `0-9A-Za-z` or a value past 2^63-1 is a `TypeError` (`ERR_INVALID_ARG_VALUE`).
 */
export declare function decodeBase62(s: string): bigint;
/**
 * The Prometheus metrics of every live generator in this process, as OpenMetrics text
 * (families `leafid_…`; ends with `# EOF`). Serve it from your own `/metrics` with the
 * content type `application/openmetrics-text; version=1.0.0; charset=utf-8`. Reads
 * memory only: never waits on I/O.
 */
export declare function metricsText(): string;
/** Leaf's epoch, ms since the Unix epoch. */
export declare const LEAF_EPOCH: number;
