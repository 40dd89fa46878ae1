// IdCipher, base-62, the JS-safe layout and nextIdString from Node.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const leafid = require('../..');
const { tmpdir } = require('./helpers');

const KEY = Buffer.from([...Array(16).keys()]);
const MAX = 2n ** 63n - 1n;

test('round trips and no collisions over a million ids', () => {
  const c = new leafid.IdCipher(KEY);
  const ids = new BigInt64Array(1_000_000);
  for (let i = 0; i < ids.length; i++) ids[i] = BigInt(i + 1);
  const enc = c.encryptMany(ids);
  assert.ok(enc instanceof BigInt64Array);
  assert.equal(new Set(enc).size, ids.length);
  for (const e of enc) assert.ok(e > 0n);
  assert.deepEqual(c.decryptMany(enc), ids);
  assert.equal(ids[0], 1n, 'the input array is not modified');
});

test('single calls match the batch forms, at the ends of the domain too', () => {
  const c = new leafid.IdCipher(Buffer.alloc(32, 7));
  const ids = BigInt64Array.from([1n, 2n, 12345n, 1n << 53n, MAX]);
  const enc = c.encryptMany(ids);
  ids.forEach((id, i) => {
    assert.equal(c.encrypt(id), enc[i]);
    assert.equal(c.decrypt(enc[i]), id);
  });
});

test('ciphertexts match Rust and Python for the same key', () => {
  // core/tests/cipher.rs and tests/python/test_cipher.py pin the same values.
  const c = new leafid.IdCipher(KEY);
  assert.equal(c.encrypt(12345n), 3911038333464591060n);
  assert.equal(c.encrypt(1n), 3373251355954433687n);
  assert.ok(c instanceof leafid.IdCipher);
  // encrypt/decrypt are own bound functions (the fast path), usable detached.
  const { encrypt, decrypt } = c;
  assert.equal(decrypt(encrypt(77n)), 77n);
});

test('a Uint8Array key works as a Buffer does', () => {
  const a = new leafid.IdCipher(new Uint8Array(KEY));
  const b = new leafid.IdCipher(KEY);
  assert.equal(a.encrypt(99n), b.encrypt(99n));
  assert.notEqual(new leafid.IdCipher(Buffer.alloc(24)).encrypt(99n), b.encrypt(99n));
});

test('a key of the wrong length is a RangeError', () => {
  for (const n of [0, 8, 15, 17, 33]) {
    assert.throws(() => new leafid.IdCipher(Buffer.alloc(n)), (e) => {
      assert.ok(e instanceof RangeError);
      assert.equal(e.code, 'ERR_CRYPTO_INVALID_KEYLEN');
      assert.match(e.message, new RegExp(`key is ${n} bytes`));
      return true;
    });
  }
});

test('a key that is not bytes is a TypeError', () => {
  for (const bad of ['0123456789abcdef', 16, undefined, [1, 2]]) {
    assert.throws(() => new leafid.IdCipher(bad), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  }
});

test('ids outside 1n..2^63-1 are RangeErrors, non-bigints TypeErrors', () => {
  const c = new leafid.IdCipher(KEY);
  for (const bad of [0n, -1n, -(2n ** 63n), 2n ** 63n, 2n ** 64n]) {
    for (const op of [(x) => c.encrypt(x), (x) => c.decrypt(x)]) {
      assert.throws(() => op(bad), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
    }
  }
  assert.throws(() => c.encryptMany(BigInt64Array.from([1n, 0n])), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  assert.throws(() => c.decryptMany(BigInt64Array.from([-5n])), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  for (const bad of [1, '1', null]) {
    assert.throws(() => c.encrypt(bad), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  }
  assert.throws(() => c.encryptMany([1n]), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
});

test('base-62: fixed width, round trip, string order is numeric order', () => {
  assert.equal(leafid.encodeBase62(0n), '00000000000');
  assert.equal(leafid.encodeBase62(MAX), 'AzL8n0Y58m7');
  const ids = [0n, 1n, 61n, 62n, MAX];
  for (let i = 0; i < 20000; i++) {
    ids.push(BigInt.asUintN(63, (BigInt(Math.floor(Math.random() * 2 ** 32)) << 32n) | BigInt(Math.floor(Math.random() * 2 ** 32))));
  }
  const enc = ids.map((id) => leafid.encodeBase62(id));
  for (const s of enc) assert.equal(s.length, 11);
  assert.deepEqual(enc.map((s) => leafid.decodeBase62(s)), ids);
  const byId = [...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)).map((id) => leafid.encodeBase62(id));
  assert.deepEqual([...enc].sort(), byId);
});

test('base-62: malformed strings are TypeErrors, bad ids RangeErrors', () => {
  for (const [bad, what] of [
    ['', /0 bytes/],
    ['0000000000', /10 bytes/],
    ['0000000000-', /position 10/],
    ['0'.repeat(100), /100 bytes/],
    ['00000000é0', /position 8/],
    ['AzL8n0Y58m8', /past the largest id/],
    ['zzzzzzzzzzz', /past the largest id/],
  ]) {
    assert.throws(() => leafid.decodeBase62(bad), (e) => {
      assert.ok(e instanceof TypeError);
      assert.equal(e.code, 'ERR_INVALID_ARG_VALUE');
      assert.match(e.message, what);
      return true;
    });
  }
  assert.throws(() => leafid.decodeBase62(5), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  for (const bad of [-1n, 2n ** 63n]) {
    assert.throws(() => leafid.encodeBase62(bad), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  }
  assert.throws(() => leafid.encodeBase62(5), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
});

test('the JS-safe layout keeps ids below 2^53, exact as numbers', async () => {
  const layout = leafid.jsSafeLayout();
  assert.deepEqual(layout, { timestampBits: 41, workerBits: 3, sequenceBits: 9, epochMs: leafid.LEAF_EPOCH });
  const d = tmpdir();
  const sf = await leafid.SnowflakeGenerator.connect({ registry: 'fixed:6', layout, cacheDir: d });
  const ids = await sf.nextIdsAsync(5000); // above the synchronous limit of this layout (3 072)
  assert.equal(new Set(ids).size, 5000);
  for (const id of ids) {
    assert.ok(id > 0n && id < 2n ** 53n);
    assert.equal(BigInt(Number(id)), id);
  }
  assert.equal(leafid.decode(ids[0], layout).workerId, 6);
  const s = sf.nextIdString();
  assert.equal(BigInt(JSON.parse(JSON.stringify({ id: Number(s) })).id), BigInt(s));
  await sf.close();
  await assert.rejects(
    leafid.SnowflakeGenerator.connect({ registry: 'fixed:1', layout: { ...layout, sequenceBits: 8 }, cacheDir: d }),
    { code: 'LEAF_INVALID_CONFIG', message: /sum to 63/ },
  );
});

test('nextIdString is the bound fast path and gives increasing decimal ids', async () => {
  const d = tmpdir();
  const sf = await leafid.SnowflakeGenerator.connect({ registry: 'fixed:43', cacheDir: d });
  assert.ok(Object.prototype.hasOwnProperty.call(sf, 'nextIdString'));
  const next = sf.nextIdString;
  const a = BigInt(next());
  const b = sf.nextIdString();
  assert.match(b, /^[1-9]\d*$/);
  assert.ok(BigInt(b) > a);
  await sf.close();
  assert.throws(() => sf.nextIdString(), { code: 'LEAF_CLOSED' });

  const gen = await leafid.SegmentGenerator.connect(`sqlite://${d}/ids.db`);
  await gen.createTag('s', { start: 1, step: 100 });
  const h = gen.tag('s');
  const got = [h.nextIdString(), gen.nextIdString('s'), h.nextIdString()];
  assert.deepEqual(got, ['1', '2', '3']);
  assert.throws(() => gen.nextIdString('missing'), { code: 'LEAF_TAG_NOT_FOUND' });
  assert.throws(() => gen.nextIdString(5), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  await gen.close();
});

test('a jsSafe segment generator stops below 2^53 with LEAF_INVALID_CONFIG', async () => {
  const gen = await leafid.SegmentGenerator.connect('memory:', { jsSafe: true });
  const start = 2 ** 53 - 2;
  await gen.createTag('big', { start, step: 10 });
  assert.deepEqual([gen.nextId('big'), gen.nextId('big')], [2n ** 53n - 2n, 2n ** 53n - 1n]);
  // The refill that would start at 2^53 fails for good; the waiting call reports it.
  await assert.rejects(gen.nextIdAsync('big'), (e) => e.code === 'LEAF_INVALID_CONFIG' && /2\^53/.test(e.message));
  await gen.close();
});
