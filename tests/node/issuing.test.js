// Errors raised while issuing (the clock stepping back, both segments spent), the shape
// of thrown and rejected errors, the argument checks of the hand-written nextId glue,
// and every registry URL passed through to the real services. The codes raised at
// start-up are in errors.test.js.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const leafid = require('../..');
const { tmpdir } = require('./helpers');

const PACKAGE = require.resolve('../..');

test('a thrown error is an Error with the core code and message', async () => {
  const gen = await leafid.SegmentGenerator.connect('memory:');
  let caught;
  try {
    gen.nextId('absent');
  } catch (e) {
    caught = e;
  }
  assert.ok(caught instanceof Error);
  assert.equal(caught.code, 'LEAF_TAG_NOT_FOUND');
  assert.match(caught.message, /^tag "absent" not found; create it/);
  assert.match(caught.stack, /issuing\.test\.js/);
  const rejected = await leafid.SegmentGenerator.connect('nosuch://x').catch((e) => e);
  assert.ok(rejected instanceof Error);
  assert.equal(rejected.code, 'LEAF_INVALID_URL');
  await gen.close();
});

test('nextId(tag) checks its argument: a non-string is a TypeError, a long tag LEAF_INVALID_TAG', async () => {
  const gen = await leafid.SegmentGenerator.connect('memory:');
  await gen.createTag('ü-tag');
  assert.throws(() => gen.nextId(42), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => gen.nextId(), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  // Longer than the 512-byte stack buffer the binding reads tags into: the core still
  // sees the whole tag.
  const long = 'é'.repeat(400);
  assert.throws(() => gen.nextId(long), (e) => e.code === 'LEAF_INVALID_TAG' && e.message.includes('é'.repeat(40)));
  assert.equal(gen.nextId('ü-tag'), 1n);
  await gen.close();
});

test('nextIds checks its count: a non-number is a TypeError, out of 0..2^20 (the core\'s batch limit) a RangeError', async () => {
  const gen = await leafid.SegmentGenerator.connect('memory:');
  await gen.createTag('t');
  const h = gen.tag('t');
  assert.deepEqual([...h.nextIds(3)], [1n, 2n, 3n]);
  assert.deepEqual([...gen.nextIds('t', 2)], [4n, 5n]);
  assert.equal(h.nextIds(0).length, 0);
  assert.throws(() => h.nextIds('3'), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => h.nextIds(-1), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  assert.throws(() => gen.nextIds('t', 2 ** 31), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  assert.throws(() => h.nextIds(2 ** 20 + 1), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  assert.throws(() => gen.nextIds('absent', 2), { code: 'LEAF_TAG_NOT_FOUND' });
  // None of the refused calls consumed an id.
  assert.equal(h.nextId(), 6n);
  await gen.close();
  assert.throws(() => h.nextIds(2), { code: 'LEAF_CLOSED' });
});

test('nextId is bound to its generator: a detached call still issues', async () => {
  const gen = await leafid.SegmentGenerator.connect('memory:');
  await gen.createTag('t', { start: 10 });
  const { nextId } = gen.tag('t');
  assert.equal(nextId(), 10n);
  assert.equal(gen.nextId.call(undefined, 't'), 11n);
  const sf = await leafid.SnowflakeGenerator.connect({ registry: 'fixed:4', cacheDir: tmpdir() });
  const sfNext = sf.nextId;
  assert.equal(leafid.decode(sfNext()).workerId, 4);
  assert.ok(!Object.keys(sf).includes('nextId'), 'not enumerable');
  await Promise.all([gen.close(), sf.close()]);
});

test('the clock stepping back 10 s under a running generator: LEAF_CLOCK_MOVED_BACKWARDS', async (t) => {
  const lib = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
  if (!fs.existsSync(lib)) return t.skip('libfaketime not installed (apt-get install faketime)');
  const d = tmpdir();
  const spec = path.join(d, 'faketime');
  fs.writeFileSync(spec, '+0\n');
  const code = `
    const leafid = require(${JSON.stringify(PACKAGE)});
    const fs = require('node:fs');
    (async () => {
      const sf = await leafid.SnowflakeGenerator.connect({ registry: 'fixed:948', cacheDir: ${JSON.stringify(d)} });
      sf.nextId();
      fs.writeFileSync(${JSON.stringify(spec)}, '-10s\\n');
      let code = 'none';
      try { sf.nextId(); } catch (e) { code = e.code; }
      console.log(code);
      await sf.close();
    })();`;
  const env = { ...process.env, LD_PRELOAD: lib, FAKETIME_TIMESTAMP_FILE: spec, FAKETIME_NO_CACHE: '1', FAKETIME_DONT_FAKE_MONOTONIC: '1' };
  const res = spawnSync(process.execPath, ['-e', code], { env, encoding: 'utf8', timeout: 60_000 });
  assert.equal(res.status, 0, res.stderr);
  assert.equal(res.stdout.trim(), 'LEAF_CLOCK_MOVED_BACKWARDS');
});

test('both segments spent while the database is locked: LEAF_SEGMENTS_EXHAUSTED', async () => {
  const d = tmpdir();
  const db = path.join(d, 'ids.db');
  const gen = await leafid.SegmentGenerator.connect(`sqlite://${db}`, { waitTimeoutMs: 200, doubleBuffer: false });
  await gen.createTag('t', { step: 5 });
  const h = gen.tag('t');
  h.nextId();
  // Another process holds SQLite's exclusive lock: no refill can happen.
  const locker = spawn('python3', ['-c', `import sqlite3, sys
c = sqlite3.connect(${JSON.stringify(db)}, isolation_level=None, timeout=30)
c.execute('BEGIN EXCLUSIVE')
print('locked', flush=True)
sys.stdin.read()`], { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise((resolve) => locker.stdout.once('data', resolve));
  let outcome;
  try {
    for (let i = 0; i < 10 && !outcome; i++) {
      try {
        h.nextId();
      } catch (e) {
        outcome = e;
      }
    }
  } finally {
    locker.stdin.end();
    await new Promise((resolve) => locker.on('exit', resolve));
  }
  assert.equal(outcome?.code, 'LEAF_SEGMENTS_EXHAUSTED');
  await gen.close();
});

// The binding passes registry URLs through; each registry the core has is exercised
// against the real service, the others are reported as skipped.
function registryCases() {
  const zk = process.env.LEAFID_ZK;
  const mysql = process.env.LEAFID_MYSQL_URL;
  if (!zk || !mysql) throw new Error('LEAFID_ZK / LEAFID_MYSQL_URL are not set: source .services/env');
  const name = `node_test_${process.pid}_${Date.now()}`;
  return [
    ['zookeeper', `zookeeper://${zk}/${name}?port=7001`, 'zookeeper://127.0.0.1:1/unreachable?port=7001'],
    ['zookeeper-recycle', `zookeeper-recycle://${zk}/${name}-pool`, 'zookeeper-recycle://127.0.0.1:1/unreachable'],
    ['mysql', `${mysql}?port=7001`, 'mysql://root:x@127.0.0.1:1/leafid?port=7001'],
  ];
}

for (const [kind, url, unreachable] of registryCases()) {
  test(`${kind} registry: a worker id from the real service, LEAF_REGISTRY_UNAVAILABLE when it is down`, async (t) => {
    const sf = await leafid.SnowflakeGenerator.connect({ registry: url, cacheDir: tmpdir() }).catch((e) => e);
    if (sf.code === 'LEAF_INVALID_CONFIG' && /not part of this build/.test(sf.message)) return t.skip(sf.message);
    assert.ok(!(sf instanceof Error), String(sf));
    assert.equal(leafid.decode(sf.nextId()).workerId, sf.workerId);
    await sf.close();
    assert.throws(() => sf.nextId(), { code: 'LEAF_CLOSED' });
    const down = await leafid.SnowflakeGenerator.connect({ registry: unreachable, cacheDir: tmpdir(), startupWaitMs: 0 }).catch((e) => e);
    assert.equal(down.code, 'LEAF_REGISTRY_UNAVAILABLE', String(down));
  });
}
