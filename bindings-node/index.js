// leafid for Node: the public exports, taken from the native module, and the little
// JS that must be JS.
//
// binding.js is napi-rs's generated loader: it picks this platform's build
// (`leafid.<platform>.node` beside it in a checkout, else the `leafid-<platform>`
// package, glibc or musl on Linux). It is generated, so its failure is wrapped here
// (`noBinary`): napi's own message blames npm and names packages that do not exist.
// The loader also exports napi's internal names (`JsIdCipher`…, undefined at run time);
// the names below are the ones index.d.ts declares.
//
// Errors: every core error is a `LeafError` (the native side makes it with the class
// handed over by `__setLeafErrorClass`). A synchronous call's error is made while the
// caller's frames are on the stack; a Promise's rejection is made on the event loop,
// with none, so each Promise-returning method is wrapped (`wrapAsync`) to take the
// caller's frames at the call and re-make the rejection with them (`atCallSite`),
// whether the caller awaits it or chains `.then`. The hot synchronous methods
// (`nextId`, `nextIds`, `nextIdString`) are not wrapped.
'use strict';

/**
 * The platforms with a prebuilt binary on npm: the ones scripts/build-npm.sh packs
 * (tests/node/loader.test.js checks the two agree).
 */
const PREBUILT = ['linux-x64-gnu'];

const REPOSITORY = 'https://github.com/leafid/leafid';

/** This platform as napi names its packages (`linux-x64-gnu`, `darwin-arm64`, …). */
function platformName() {
  const { platform, arch } = process;
  if (platform === 'linux') return `linux-${arch}-${isMusl() ? 'musl' : 'gnu'}`;
  if (platform === 'win32') return `win32-${arch}-msvc`;
  return `${platform}-${arch}`;
}

function isMusl() {
  try {
    return require('node:fs').readFileSync('/usr/bin/ldd', 'utf8').includes('musl');
  } catch {
    try {
      const report = process.report && process.report.getReport();
      return Boolean(report && report.header && !report.header.glibcVersionRuntime);
    } catch {
      return false;
    }
  }
}

/** The error for a native module that did not load, saying what to do; `cause` is napi's. */
function noBinary(cause) {
  const platform = platformName();
  const fromSource =
    `build it from source with cargo (Rust from https://rustup.rs): \`git clone ${REPOSITORY} && ` +
    'cd leafid && npm install && npm run build`, then `npm install /path/to/leafid` in your ' +
    'project (or point NAPI_RS_NATIVE_LIBRARY_PATH at the built bindings-node/leafid.*.node)';
  const message = PREBUILT.includes(platform)
    ? `leafid: the native binary for ${platform} did not load. It comes in the optional ` +
      `package leafid-${platform}: reinstall leafid without --omit=optional (a lock file ` +
      `made on another platform can leave it out), or ${fromSource}.`
    : `leafid has no prebuilt binary for this platform (${platform}) yet; prebuilt: ` +
      `${PREBUILT.join(', ')}. Run on one of those (e.g. a Debian or Ubuntu container on ` +
      `x86-64), or ${fromSource}.`;
  const error = new Error(message);
  error.code = 'ERR_LEAFID_NO_BINARY';
  error.platform = platform;
  error.cause = cause;
  return error;
}

let native;
try {
  native = require('./binding.js');
} catch (e) {
  throw noBinary(e);
}

/**
 * The error of every failure of leafid's core: `code` is stable (`LEAF_TAG_NOT_FOUND`,
 * …), `message` says what happened and what to do. Bad arguments are Node's own
 * `TypeError` / `RangeError` instead (`ERR_INVALID_ARG_TYPE`, …), as Node's built-in
 * modules throw them.
 */
class LeafError extends Error {
  constructor(message, code, options) {
    super(message, options);
    this.code = code;
  }
}
Object.defineProperty(LeafError.prototype, 'name', {
  value: 'LeafError',
  writable: true,
  configurable: true,
});

/**
 * Whether `e` is an error of leafid's core: a `LeafError`, also one from another copy of
 * the package (two versions installed side by side), whose class is another.
 */
function isLeafError(e) {
  return (
    e instanceof LeafError ||
    (e instanceof Error && e.name === 'LeafError' && typeof e.code === 'string' && e.code.startsWith('LEAF_'))
  );
}

native.__setLeafErrorClass(LeafError);

/**
 * A `JSON.stringify` replacer that writes ids as decimal strings: a bigint becomes its
 * decimal string, a `BigInt64Array` (`nextIds`) an array of them; everything else
 * passes as it is. Strings, never numbers, even for ids below 2^53: a field's JSON type
 * must not change with its value (a client reading `id` as a number breaks silently
 * once ids pass 2^53), and JS API clients expect 64-bit ids as strings (Twitter's
 * `id_str`). Read one back with `BigInt(s)`. Express: `app.set('json replacer',
 * jsonReplacer)`; Fastify: `app.setReplySerializer((p) => JSON.stringify(p, jsonReplacer))`.
 */
function jsonReplacer(key, value) {
  if (typeof value === 'bigint') return value.toString();
  // Otherwise stringify writes a typed array as an object (`{"0": …}`).
  if (value instanceof BigInt64Array || value instanceof BigUint64Array) return Array.from(value, String);
  return value;
}

/** The JSON form of a segment's stats: its ids as decimal strings (see `jsonReplacer`). */
function segmentStatsToJSON() {
  return { value: this.value.toString(), max: this.max.toString(), step: this.step };
}

/** `e` re-made with its class, message and properties (`code`), its stack the frames
 * `site` took at the call (see `wrapAsync`). */
function atCallSite(e, site) {
  if (!(e instanceof Error)) return e;
  let fresh;
  if (e instanceof LeafError) fresh = new LeafError(e.message, e.code);
  else if (e instanceof RangeError) fresh = new RangeError(e.message);
  else if (e instanceof TypeError) fresh = new TypeError(e.message);
  else fresh = new Error(e.message);
  Object.assign(fresh, e);
  // `site.stack` is "Error" then the caller's frames.
  if (typeof site.stack === 'string') fresh.stack = String(fresh) + site.stack.slice(site.stack.indexOf('\n'));
  return fresh;
}

/** Replaces the Promise-returning method `name` of `target` by one whose rejection is
 * re-made with the caller's frames (see the top of this file). They are taken at the
 * call, while the caller is on the stack: V8 links an `await`ing caller's frames to a
 * later rejection, but a `.then` chain's not at all. Taking them costs about a
 * microsecond, so a fast path that answers at once goes first: with `atHandOf` (a class),
 * `name` is a `nextIdAsync` whose id, when `this` is one of that class and
 * `_nextIdAtHand` has it, resolves at once (see `resolvedAtHand`). */
function wrapAsync(target, name, atHandOf) {
  const method = target[name];
  const wrapped = {
    [name](...args) {
      // Before the frames are taken (they are the cost to skip), and inside this
      // wrapper so that a rejection's stack starts at the caller, not in this file.
      if (atHandOf !== undefined && this instanceof atHandOf) {
        const id = this._nextIdAtHand?.(...args);
        if (id !== undefined) return resolvedAtHand(id);
      }
      const site = {};
      if (Error.captureStackTrace) Error.captureStackTrace(site, wrapped);
      const again = (e) => {
        throw atCallSite(e, site);
      };
      try {
        return method.apply(this, args).then(undefined, again);
      } catch (e) {
        return Promise.reject(atCallSite(e, site));
      }
    },
  }[name];
  Object.defineProperty(target, name, { value: wrapped, writable: true, configurable: true });
}

// nextIdAsync resolves at once with an id the core has in memory: `_nextIdAtHand` (a
// bound native function, src/fast.rs) gives it, or `undefined` when it would have to
// wait, without throwing and without taking an id. Only then the native call runs, off
// the event loop, and every error (closed, bad tag, bad argument, a `this` of another
// class: "Illegal invocation") comes from it, as a rejection made at the caller's
// `await`. (Issue 31: 17-28 µs per id before, a trip to the core's runtime and back.)
//
// An `await` of a resolved Promise only runs microtasks, never the event loop: a loop of
// such `await`s would starve timers, I/O and every other callback. So every
// `AT_HAND_STREAK`-th at-hand id in a row resolves from `setImmediate`, after the loop
// has had a turn (a few µs, once per 64 ids). One counter for the module: JavaScript
// runs one thread per isolate, and each worker thread loads its own copy.
const AT_HAND_STREAK = 64;
let atHandRun = 0;

/** A Promise of `id`, resolved at once, or every `AT_HAND_STREAK`-th time after a turn
 * of the event loop. */
function resolvedAtHand(id) {
  if (++atHandRun < AT_HAND_STREAK) return Promise.resolve(id);
  atHandRun = 0;
  return new Promise((resolve) => setImmediate(resolve, id));
}

const { SegmentGenerator, TagHandle, SnowflakeGenerator } = native;
wrapAsync(SegmentGenerator, 'connect');
wrapAsync(SnowflakeGenerator, 'connect');
for (const cls of [SegmentGenerator, TagHandle, SnowflakeGenerator]) wrapAsync(cls.prototype, 'nextIdAsync', cls);
for (const name of ['nextIdsAsync', 'createTag', 'createTable', 'refresh', 'close']) {
  wrapAsync(SegmentGenerator.prototype, name);
}
wrapAsync(TagHandle.prototype, 'nextIdsAsync');
for (const name of ['nextIdsAsync', 'close']) wrapAsync(SnowflakeGenerator.prototype, name);

// stats(): each segment's ids stay bigints, with a (non-enumerable) toJSON so that
// `JSON.stringify(gen.stats())` works without a replacer.
const nativeStats = SegmentGenerator.prototype.stats;
Object.defineProperty(SegmentGenerator.prototype, 'stats', {
  value: function stats() {
    const tags = nativeStats.call(this);
    for (const tag of tags) {
      for (const segment of tag.segments) {
        Object.defineProperty(segment, 'toJSON', { value: segmentStatsToJSON, configurable: true, writable: true });
      }
    }
    return tags;
  },
  writable: true,
  configurable: true,
});

module.exports = {
  SegmentGenerator,
  TagHandle,
  SnowflakeGenerator,
  LeafError,
  isLeafError,
  jsonReplacer,
  decode: native.decode,
  leafLayout: native.leafLayout,
  jsSafeLayout: native.jsSafeLayout,
  IdCipher: native.IdCipher,
  encodeBase62: native.encodeBase62,
  decodeBase62: native.decodeBase62,
  metricsText: native.metricsText,
  LEAF_EPOCH: native.LEAF_EPOCH,
};
