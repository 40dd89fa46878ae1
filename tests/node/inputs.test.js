'use strict';
// Every export fed wrong types and extreme numbers: each is refused the way Node's
// built-in modules refuse them (TypeError ERR_INVALID_ARG_TYPE / ERR_INVALID_ARG_VALUE,
// RangeError ERR_OUT_OF_RANGE), thrown by synchronous calls and as a rejection by
// Promise-returning ones, never coerced. Table-driven: one row per argument or option;
// the last test fails when an export has no row.
const test = require('node:test');
const assert = require('node:assert/strict');
const { ROOT, tmpdir } = require('./helpers');

const leafid = require(ROOT);
const { SegmentGenerator, SnowflakeGenerator, IdCipher } = leafid;

const MAX_BATCH = 2 ** 20;
const VALUES = [
  undefined, null, 'x', {}, [], true, Symbol('s'), 1n, -1n, 2n ** 64n,
  1, -1, 0, 1.5, NaN, Infinity, -Infinity, 2 ** 53, 2 ** 64, MAX_BATCH + 1,
];

const TYPE = ['TypeError', 'ERR_INVALID_ARG_TYPE'];
const RANGE = ['RangeError', 'ERR_OUT_OF_RANGE'];
const fitsI64 = (v) => v >= -(2n ** 63n) && v < 2n ** 63n;
const isObject = (v) => typeof v === 'object' && v !== null;

// For each kind of parameter: the error a value must raise, or null when it is valid
// (valid values are not called: they would do real work).
const KINDS = {
  string: (v) => (typeof v === 'string' ? null : TYPE),
  boolean: (v) => (typeof v === 'boolean' ? null : TYPE),
  count: (v) => (typeof v !== 'number' ? TYPE : Number.isInteger(v) && v >= 0 && v <= MAX_BATCH ? null : RANGE),
  millis: (v) => (typeof v !== 'number' ? TYPE : v >= 0 ? null : RANGE),
  int64: (v) => (typeof v === 'bigint' ? (fitsI64(v) ? null : RANGE)
    : typeof v !== 'number' ? TYPE : Number.isSafeInteger(v) ? null : RANGE),
  // Ids per thread chunk: a non-negative integer number; the core refuses past 4096.
  chunk: (v) => (typeof v !== 'number' ? TYPE : Number.isInteger(v) && v >= 0 && v < 2 ** 53
    ? (v <= 4096 ? null : ['LeafError', 'LEAF_INVALID_CONFIG']) : RANGE),
  bits: (v) => (typeof v !== 'number' ? TYPE : Number.isInteger(v) && v >= 0 && v <= 63 ? null : RANGE),
  // An id: a bigint in 0n..2n**63n-1n (ciphers: from 1n).
  id: (v) => (typeof v !== 'bigint' ? TYPE : v >= 1n && v < 2n ** 63n ? null : RANGE),
  options: (v) => (v === undefined || isObject(v) ? null : TYPE),
  requiredObject: (v) => (isObject(v) ? null : TYPE),
  // A registry URL, or the older form's one options object.
  urlOrOptions: (v) => (typeof v === 'string' || isObject(v) ? null : TYPE),
  strings: (v) => (Array.isArray(v) ? null : TYPE),
  bytes: (v) => (v instanceof Uint8Array ? null : TYPE),
  bigints: (v) => (v instanceof BigInt64Array ? null : TYPE),
};

const LAYOUT = { timestampBits: 41, workerBits: 10, sequenceBits: 12, epochMs: leafid.LEAF_EPOCH };
const KEY = new Uint8Array(16);

// [label, kind, call]: `label` starts with the export it covers (`Class.static`,
// `Class#method`, `function`).
function rows({ gen, handle, sf, cipher }) {
  const sfOpts = (extra) => ({ registry: 'fixed:946', cacheDir: '/nonexistent-leafid', ...extra });
  return [
    ['SegmentGenerator.connect url', 'string', (v) => SegmentGenerator.connect(v)],
    ['SegmentGenerator.connect options', 'options', (v) => SegmentGenerator.connect('memory:', v)],
    ['SegmentGenerator.connect options.waitTimeoutMs', '?millis', (v) => SegmentGenerator.connect('memory:', { waitTimeoutMs: v })],
    ['SegmentGenerator.connect options.refreshIntervalMs', '?millis', (v) => SegmentGenerator.connect('memory:', { refreshIntervalMs: v })],
    ['SegmentGenerator.connect options.createTable', '?boolean', (v) => SegmentGenerator.connect('memory:', { createTable: v })],
    ['SegmentGenerator.connect options.doubleBuffer', '?boolean', (v) => SegmentGenerator.connect('memory:', { doubleBuffer: v })],
    ['SegmentGenerator.connect options.maxStep', '?int64', (v) => SegmentGenerator.connect('memory:', { maxStep: v })],
    ['SegmentGenerator.connect options.jsSafe', '?boolean', (v) => SegmentGenerator.connect('memory:', { jsSafe: v })],
    ['SegmentGenerator.connect options.threadChunk', '?chunk', (v) => SegmentGenerator.connect('memory:', { threadChunk: v })],
    ['SegmentGenerator.connect options.tags', '?strings', (v) => SegmentGenerator.connect('memory:', { tags: v })],
    ['SegmentGenerator.connect options.tags[0]', 'string', (v) => SegmentGenerator.connect('memory:', { tags: [v] })],
    ['SegmentGenerator#nextId tag', 'string', (v) => gen.nextId(v)],
    ['SegmentGenerator#nextIdString tag', 'string', (v) => gen.nextIdString(v)],
    ['SegmentGenerator#nextIds tag', 'string', (v) => gen.nextIds(v, 1)],
    ['SegmentGenerator#nextIds n', 'count', (v) => gen.nextIds('t', v)],
    ['SegmentGenerator#nextIdAsync tag', 'string', (v) => gen.nextIdAsync(v)],
    ['SegmentGenerator#nextIdsAsync tag', 'string', (v) => gen.nextIdsAsync(v, 1)],
    ['SegmentGenerator#nextIdsAsync n', 'count', (v) => gen.nextIdsAsync('t', v)],
    ['SegmentGenerator#tag tag', 'string', (v) => gen.tag(v)],
    ['SegmentGenerator#createTag tag', 'string', (v) => gen.createTag(v)],
    ['SegmentGenerator#createTag options', 'options', (v) => gen.createTag('fresh', v)],
    ['SegmentGenerator#createTag options.start', '?int64', (v) => gen.createTag('fresh', { start: v })],
    ['SegmentGenerator#createTag options.step', '?int64', (v) => gen.createTag('fresh', { step: v })],
    ['SegmentGenerator#createTag options.description', '?string', (v) => gen.createTag('fresh', { description: v })],
    ['SegmentGenerator#createTag options.existOk', '?boolean', (v) => gen.createTag('fresh', { existOk: v })],
    ['TagHandle#nextIds n', 'count', (v) => handle.nextIds(v)],
    ['TagHandle#nextIdsAsync n', 'count', (v) => handle.nextIdsAsync(v)],
    ['SnowflakeGenerator.connect url', 'urlOrOptions', (v) => SnowflakeGenerator.connect(v)],
    ['SnowflakeGenerator.connect options', 'options', (v) => SnowflakeGenerator.connect('fixed:946', v)],
    ['SnowflakeGenerator.connect options.registry', 'string', (v) => SnowflakeGenerator.connect({ registry: v })],
    ['SnowflakeGenerator.connect options.layout', 'requiredObject', (v) => SnowflakeGenerator.connect(sfOpts({ layout: v === undefined ? null : v }))],
    ['SnowflakeGenerator.connect options.layout.timestampBits', 'bits', (v) => SnowflakeGenerator.connect(sfOpts({ layout: { ...LAYOUT, timestampBits: v } }))],
    ['SnowflakeGenerator.connect options.layout.epochMs', 'int64', (v) => SnowflakeGenerator.connect(sfOpts({ layout: { ...LAYOUT, epochMs: v } }))],
    ['SnowflakeGenerator.connect options.cacheDir', 'string', (v) => SnowflakeGenerator.connect(sfOpts({ cacheDir: v === undefined ? null : v }))],
    ['SnowflakeGenerator.connect options.heartbeatMs', '?millis', (v) => SnowflakeGenerator.connect(sfOpts({ heartbeatMs: v }))],
    ['SnowflakeGenerator.connect options.lookaheadMs', '?millis', (v) => SnowflakeGenerator.connect(sfOpts({ lookaheadMs: v }))],
    ['SnowflakeGenerator.connect options.maxBackwardMs', '?millis', (v) => SnowflakeGenerator.connect(sfOpts({ maxBackwardMs: v }))],
    ['SnowflakeGenerator.connect options.startupWaitMs', '?millis', (v) => SnowflakeGenerator.connect(sfOpts({ startupWaitMs: v }))],
    ['SnowflakeGenerator.connect options.maxSkewMs', '?millis', (v) => SnowflakeGenerator.connect(sfOpts({ maxSkewMs: v }))],
    ['SnowflakeGenerator#nextIds n', 'count', (v) => sf.nextIds(v)],
    ['SnowflakeGenerator#nextIdsAsync n', 'count', (v) => sf.nextIdsAsync(v)],
    ['decode id', 'id0', (v) => leafid.decode(v)],
    ['decode layout', 'options', (v) => leafid.decode(1n, v)],
    ['decode layout.workerBits', 'bits', (v) => leafid.decode(1n, { ...LAYOUT, workerBits: v })],
    ['decode layout.sequenceBits', 'bits', (v) => leafid.decode(1n, { ...LAYOUT, sequenceBits: v })],
    ['IdCipher.constructor key', 'bytes', (v) => new IdCipher(v)],
    ['IdCipher#encrypt id', 'id', (v) => cipher.encrypt(v)],
    ['IdCipher#decrypt id', 'id', (v) => cipher.decrypt(v)],
    ['IdCipher#encryptMany ids', 'bigints', (v) => cipher.encryptMany(v)],
    ['IdCipher#decryptMany ids', 'bigints', (v) => cipher.decryptMany(v)],
    ['encodeBase62 id', 'id0', (v) => leafid.encodeBase62(v)],
    ['decodeBase62 s', 'string', (v) => leafid.decodeBase62(v)],
  ];
}
// Ids from 0n (decode, base 62).
KINDS.id0 = (v) => (typeof v !== 'bigint' ? TYPE : v >= 0n && v < 2n ** 63n ? null : RANGE);

// Exports that take no argument (extra ones are ignored, as in Node) or are values.
const NO_ARGUMENTS = new Set([
  'SegmentGenerator#tags', 'SegmentGenerator#stats', 'SegmentGenerator#createTable',
  'SegmentGenerator#refresh', 'SegmentGenerator#close', 'TagHandle#nextId',
  'TagHandle#nextIdString', 'TagHandle#nextIdAsync', 'TagHandle#tag',
  'SnowflakeGenerator#nextId', 'SnowflakeGenerator#nextIdString', 'SnowflakeGenerator#nextIdAsync',
  'SnowflakeGenerator#close', 'SnowflakeGenerator#workerId', 'SnowflakeGenerator#layout',
  'leafLayout', 'jsSafeLayout', 'LEAF_EPOCH', 'metricsText',
  // A JS Error subclass and its guard: any message and any value, as Error takes them.
  'LeafError.constructor', 'LeafError#name', 'isLeafError',
  // A JSON.stringify replacer: any key and value, others passed through (json.test.js).
  'jsonReplacer',
  // nextIdAsync's fast path (index.js): any argument, never throws; undefined sends the
  // call to the waiting path, which refuses a bad one (the nextIdAsync rows).
  'SegmentGenerator#_nextIdAtHand', 'TagHandle#_nextIdAtHand', 'SnowflakeGenerator#_nextIdAtHand',
]);

function describe(v) {
  return typeof v === 'symbol' ? v.toString() : typeof v === 'bigint' ? `${v}n`
    : Array.isArray(v) ? '[]' : isObject(v) ? '{}' : String(v);
}

function check(label, expected, v) {
  return (e) => {
    const [name, code] = expected;
    assert.equal(e?.constructor?.name, name, `${label} with ${describe(v)}: ${e}`);
    assert.equal(e.code, code, `${label} with ${describe(v)}: ${e}`);
    assert.ok(typeof e.message === 'string' && e.message.length > 0, `${label}: empty message`);
    return true;
  };
}

// Each test holds its own fixed worker id (one holder per host).
let nextWorkerId = 940;
async function fixtures() {
  const gen = await SegmentGenerator.connect('memory:');
  await gen.createTag('t');
  const sf = await SnowflakeGenerator.connect({ registry: `fixed:${nextWorkerId++}`, cacheDir: tmpdir() });
  return { gen, handle: gen.tag('t'), sf, cipher: new IdCipher(KEY) };
}

test('every argument and option refuses wrong types and extreme numbers with Node\'s errors', async () => {
  const f = await fixtures();
  let checked = 0;
  for (const [label, kind, call] of rows(f)) {
    for (const v of VALUES) {
      // `?kind`: an optional property, where undefined means the default.
      const expected = kind.startsWith('?') ? (v === undefined ? null : KINDS[kind.slice(1)](v)) : KINDS[kind](v);
      if (!expected) continue;
      let out;
      try {
        out = call(v);
      } catch (e) {
        check(label, expected, v)(e);
        checked++;
        continue;
      }
      assert.ok(out instanceof Promise, `${label} with ${describe(v)} neither threw nor returned a Promise`);
      await assert.rejects(out, check(label, expected, v), `${label} with ${describe(v)}`);
      checked++;
    }
  }
  assert.ok(checked > 400, `only ${checked} cases`);
  await f.gen.close();
  await f.sf.close();
});

test('Promise-returning calls reject (never throw) on a bad argument; sync calls throw', async () => {
  const f = await fixtures();
  for (const call of [() => SegmentGenerator.connect(1), () => f.gen.nextIdAsync(1), () => f.gen.createTag(1),
    () => f.handle.nextIdsAsync(-1), () => SnowflakeGenerator.connect(null), () => f.sf.nextIdsAsync(1.5)]) {
    const out = call();
    assert.ok(out instanceof Promise);
    await assert.rejects(out, (e) => e instanceof TypeError || e instanceof RangeError);
  }
  assert.throws(() => f.gen.nextIds('t', NaN), RangeError);
  await f.gen.close();
  await f.sf.close();
});

test('no silent coercion: nextIds(1.5), nextIds(NaN), waitTimeoutMs -1, createTag start NaN', async () => {
  const f = await fixtures();
  assert.throws(() => f.gen.nextIds('t', 1.5), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  assert.throws(() => f.handle.nextIds(NaN), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  assert.throws(() => f.sf.nextIds(MAX_BATCH + 1), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  await assert.rejects(SegmentGenerator.connect('memory:', { waitTimeoutMs: -1 }), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  await assert.rejects(f.gen.createTag('n', { start: NaN }), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  assert.deepEqual(f.gen.tags(), ['t'], 'no tag was created');
  await f.gen.close();
  await f.sf.close();
});

test('decode(1) and a layout the core refuses say what is wrong (the core\'s code for the core\'s verdict)', () => {
  assert.throws(() => leafid.decode(1), (e) => e instanceof TypeError && e.code === 'ERR_INVALID_ARG_TYPE' && /bigint/.test(e.message));
  assert.throws(() => leafid.decode(1n, { ...LAYOUT, sequenceBits: 13 }),
    (e) => e.code === 'LEAF_INVALID_CONFIG' && /sum to 63/.test(e.message));
  assert.throws(() => leafid.decode(-1n), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
});

test('every export has a row (a new export needs one)', async () => {
  const f = await fixtures();
  const covered = new Set(rows(f).map(([label]) => label.split(' ')[0]));
  const found = [];
  for (const [name, value] of Object.entries(leafid)) {
    if (typeof value !== 'function' || !/^[A-Z]/.test(name)) {
      found.push(name);
      continue;
    }
    found.push(`${name}.constructor`);
    for (const key of Object.getOwnPropertyNames(value)) {
      if (!['length', 'name', 'prototype', 'arguments', 'caller'].includes(key)) found.push(`${name}.${key}`);
    }
    for (const key of Object.getOwnPropertyNames(value.prototype)) {
      if (key !== 'constructor') found.push(`${name}#${key}`);
    }
  }
  // Own, bound functions of instances (the fast path).
  for (const [cls, obj] of [['SegmentGenerator', f.gen], ['TagHandle', f.handle], ['SnowflakeGenerator', f.sf], ['IdCipher', f.cipher]]) {
    for (const key of Object.getOwnPropertyNames(obj)) found.push(`${cls}#${key}`);
  }
  // Classes only made by the library need no constructor row.
  const madeByLibrary = new Set(['SegmentGenerator.constructor', 'TagHandle.constructor', 'SnowflakeGenerator.constructor']);
  const missing = found.filter((n) => !covered.has(n) && !NO_ARGUMENTS.has(n) && !madeByLibrary.has(n));
  assert.deepEqual(missing, [], 'exports without a row in inputs.test.js');
  await f.gen.close();
  await f.sf.close();
});
