'use strict';
// Every error is a LeafError (an Error) with the core's code and message, thrown
// synchronously by sync calls and as a Promise rejection by async ones.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { ROOT, env, tmpdir: tempDir, uniqueTag, skipIfNotBuilt } = require('./helpers');

const leafid = require(ROOT);

const { SegmentGenerator, SnowflakeGenerator, decode } = leafid;

function isLeafError(code) {
  return (e) => {
    assert.ok(e instanceof Error, 'an Error object');
    assert.ok(e instanceof leafid.LeafError, `a LeafError: ${e.stack}`);
    assert.equal(e.name, 'LeafError');
    assert.equal(e.code, code);
    assert.ok(e.message.length > 10, 'a message that says what to do');
    return true;
  };
}

test('index.d.ts lists exactly the codes of the core error enum', () => {
  const core = fs.readFileSync(path.join(ROOT, 'core', 'src', 'error', 'names.rs'), 'utf8');
  const dts = fs.readFileSync(path.join(ROOT, 'bindings-node', 'index.d.ts'), 'utf8');
  // Quoted codes only: the core's `"LEAF_…"` arms, the d.ts union's `'LEAF_…'` members.
  const codes = (text) => [...new Set([...text.matchAll(/["'](LEAF_[A-Z_]+)["']/g)].map((m) => m[1]))].sort();
  const coreCodes = codes(core);
  assert.ok(coreCodes.length >= 18);
  assert.deepEqual(codes(dts), coreCodes);
});

test('LEAF_INVALID_URL: a store URL of an unknown scheme rejects before any I/O', async () => {
  await assert.rejects(SegmentGenerator.connect('oracle://x/y'), isLeafError('LEAF_INVALID_URL'));
  await assert.rejects(SnowflakeGenerator.connect({ registry: 'etcd://x' }), isLeafError('LEAF_INVALID_URL'));
});

test('LEAF_INVALID_CONFIG: bad options and counts', async () => {
  await assert.rejects(
    SnowflakeGenerator.connect({ registry: 'fixed:1', layout: { timestampBits: 41, workerBits: 10, sequenceBits: 13, epochMs: leafid.LEAF_EPOCH } }),
    isLeafError('LEAF_INVALID_CONFIG'),
  );
  const gen = await SegmentGenerator.connect('memory:');
  await gen.createTag('t', { start: 1, step: 10 });
  await assert.rejects(gen.createTag('u', { start: 1, step: 0 }), isLeafError('LEAF_INVALID_CONFIG'));
  assert.throws(() => decode(2n ** 64n), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  await gen.close();
});

test('LEAF_INVALID_TAG: empty or over-long tags', async () => {
  const gen = await SegmentGenerator.connect('memory:');
  assert.throws(() => gen.nextId(''), isLeafError('LEAF_INVALID_TAG'));
  assert.throws(() => gen.tag('x'.repeat(129)), isLeafError('LEAF_INVALID_TAG'));
  await assert.rejects(gen.createTag(''), isLeafError('LEAF_INVALID_TAG'));
  await gen.close();
});

test('LEAF_TAG_NOT_FOUND and LEAF_TAG_EXISTS', async () => {
  const gen = await SegmentGenerator.connect('memory:');
  assert.throws(() => gen.nextId('missing'), isLeafError('LEAF_TAG_NOT_FOUND'));
  assert.throws(() => gen.nextIds('missing', 2), isLeafError('LEAF_TAG_NOT_FOUND'));
  assert.throws(() => gen.tag('missing'), isLeafError('LEAF_TAG_NOT_FOUND'));
  await gen.createTag('t');
  await assert.rejects(gen.createTag('t'), isLeafError('LEAF_TAG_EXISTS'));
  await gen.close();
});

test('LEAF_CLOSED after close()', async () => {
  const gen = await SegmentGenerator.connect('memory:');
  await gen.createTag('t');
  await gen.close();
  assert.throws(() => gen.nextId('t'), isLeafError('LEAF_CLOSED'));
  await assert.rejects(gen.refresh(), isLeafError('LEAF_CLOSED'));
  const sf = await SnowflakeGenerator.connect({ registry: 'fixed:51', cacheDir: tempDir() });
  await sf.close();
  assert.throws(() => sf.nextId(), isLeafError('LEAF_CLOSED'));
  assert.throws(() => sf.nextIds(3), isLeafError('LEAF_CLOSED'));
});

test('LEAF_WORKER_ID_OUT_OF_RANGE: fixed id beyond the layout', async () => {
  await assert.rejects(SnowflakeGenerator.connect({ registry: 'fixed:1024' }), isLeafError('LEAF_WORKER_ID_OUT_OF_RANGE'));
  await assert.rejects(
    SnowflakeGenerator.connect({ registry: 'fixed:4', layout: { timestampBits: 42, workerBits: 2, sequenceBits: 19, epochMs: leafid.LEAF_EPOCH } }),
    isLeafError('LEAF_WORKER_ID_OUT_OF_RANGE'),
  );
});

test('LEAF_WORKER_ID_EXHAUSTED: a local pool of two ids and three generators', async () => {
  const registry = `local://${tempDir()}`;
  const layout = { timestampBits: 50, workerBits: 1, sequenceBits: 12, epochMs: leafid.LEAF_EPOCH };
  const a = await SnowflakeGenerator.connect({ registry, layout, cacheDir: tempDir() });
  const b = await SnowflakeGenerator.connect({ registry, layout, cacheDir: tempDir() });
  await assert.rejects(
    SnowflakeGenerator.connect({ registry, layout, cacheDir: tempDir() }),
    isLeafError('LEAF_WORKER_ID_EXHAUSTED'),
  );
  await a.close();
  await b.close();
});

test('LEAF_MALFORMED: a corrupt worker cache file', async () => {
  const cacheDir = tempDir();
  const gen = await SnowflakeGenerator.connect({ registry: 'fixed:54', cacheDir });
  gen.nextId();
  await gen.close();
  const files = fs.readdirSync(cacheDir);
  assert.ok(files.length >= 1, 'close() wrote the cache file');
  for (const f of files) fs.writeFileSync(path.join(cacheDir, f), 'not a cache file{');
  await assert.rejects(SnowflakeGenerator.connect({ registry: 'fixed:54', cacheDir }), isLeafError('LEAF_MALFORMED'));
});

test('LEAF_IO: a cache directory that is a file', async () => {
  const file = path.join(tempDir(), 'plain-file');
  fs.writeFileSync(file, 'x');
  await assert.rejects(SnowflakeGenerator.connect({ registry: 'fixed:54', cacheDir: file }), isLeafError('LEAF_IO'));
});

test('LEAF_TABLE_MISSING: a MySQL database without leaf_alloc and createTable false', async () => {
  const base = env('LEAFID_MYSQL_URL');
  // A fresh database on the same server: created through the test's own connection
  // is not possible from Node without a driver, so use a table-less schema the
  // services script provides when present, else the information_schema (never has leaf_alloc).
  const url = base.replace(/\/[^/?]+(\?|$)/, '/information_schema$1');
  await assert.rejects(SegmentGenerator.connect(url, { createTable: false }), isLeafError('LEAF_TABLE_MISSING'));
});

test('LEAF_STORE_UNAVAILABLE: nothing listens on the MySQL port', async () => {
  await assert.rejects(
    SegmentGenerator.connect('mysql://root:x@127.0.0.1:1/leafid'),
    isLeafError('LEAF_STORE_UNAVAILABLE'),
  );
});

test('LEAF_REGISTRY_UNAVAILABLE: nothing listens on the ZooKeeper port', async (t) => {
  try {
    await SnowflakeGenerator.connect({
      registry: `zookeeper://127.0.0.1:1/${uniqueTag('x')}?port=1&connect_timeout_ms=500`,
      cacheDir: tempDir(),
    });
    assert.fail('connected to a port nobody listens on');
  } catch (e) {
    if (skipIfNotBuilt(t, e)) return;
    isLeafError('LEAF_REGISTRY_UNAVAILABLE')(e);
  }
});

test('LEAF_TIMESTAMP_OVERFLOW: a 30-bit timestamp whose range ends three seconds from now', async () => {
  // The layout is valid at connect (the range has not ended); the hot path then runs
  // into its end and must refuse instead of wrapping to an old or negative id.
  const layout = { timestampBits: 30, workerBits: 11, sequenceBits: 22, epochMs: Date.now() - 2 ** 30 + 3000 };
  const gen = await SnowflakeGenerator.connect({ registry: 'fixed:52', layout, cacheDir: tempDir() });
  let last = 0n;
  const giveUp = Date.now() + 60000;
  for (;;) {
    let id;
    try {
      id = gen.nextId();
    } catch (e) {
      isLeafError('LEAF_TIMESTAMP_OVERFLOW')(e);
      break;
    }
    assert.ok(id > last, 'ids keep increasing up to the end of the range');
    last = id;
    if (Date.now() > giveUp) assert.fail('no overflow a minute past the end of the range');
    await new Promise((r) => setTimeout(r, 20));
  }
  await gen.close();
});

test('LEAF_CLOCK_BEHIND_REGISTRY: a process whose clock is behind its worker cache refuses to start', async () => {
  const { spawnSync } = require('node:child_process');
  const cacheDir = tempDir();
  const gen = await SnowflakeGenerator.connect({ registry: 'fixed:9', cacheDir });
  gen.nextIds(10);
  await gen.close();
  const script = `
    const { SnowflakeGenerator } = require(${JSON.stringify(ROOT)});
    SnowflakeGenerator.connect({ registry: 'fixed:9', cacheDir: ${JSON.stringify(cacheDir)}, startupWaitMs: 0 })
      .then(() => console.log('started'), (e) => console.log(e.code));`;
  const r = spawnSync('faketime', ['-f', '-1h', process.execPath, '-e', script], { encoding: 'utf8', timeout: 60000 });
  assert.equal(r.error, undefined, `faketime (Debian package faketime) must be installed: ${r.error}`);
  assert.equal(r.stdout.trim(), 'LEAF_CLOCK_BEHIND_REGISTRY', r.stderr);
});

test('LEAF_INVALID_URL: a "-" in ip or port, refused before any I/O', async () => {
  // Nothing listens on port 1: had the registry been contacted, the code would be
  // LEAF_REGISTRY_UNAVAILABLE. Java Leaf splits node names `ip:port-seq` on '-'.
  for (const registry of [
    'zookeeper://127.0.0.1:1/order?port=80-81&ip=127.0.0.1',
    'zookeeper://127.0.0.1:1/order?port=8080&ip=host-a',
    'mysql://root:x@127.0.0.1:1/leafid?port=80-81&ip=127.0.0.1',
    'mysql://root:x@127.0.0.1:1/leafid?port=8080&ip=host-a',
  ]) {
    await assert.rejects(
      SnowflakeGenerator.connect({ registry, cacheDir: tempDir(), startupWaitMs: 0 }),
      (e) => isLeafError('LEAF_INVALID_URL')(e) && e.message.includes("'-'"),
      registry,
    );
  }
  // A '-' in the name is accepted, as Java Leaf accepts it (with a warning), and so is
  // zookeeper-recycle://, leafid's own tree: the registry is contacted.
  await assert.rejects(
    SnowflakeGenerator.connect({ registry: 'zookeeper://127.0.0.1:1/my-order?port=8080&ip=127.0.0.1&connect_timeout_ms=300', cacheDir: tempDir(), startupWaitMs: 0 }),
    isLeafError('LEAF_REGISTRY_UNAVAILABLE'),
  );
  await assert.rejects(
    SnowflakeGenerator.connect({ registry: 'zookeeper-recycle://127.0.0.1:1/my-pool?connect_timeout_ms=300', cacheDir: tempDir(), startupWaitMs: 0 }),
    isLeafError('LEAF_REGISTRY_UNAVAILABLE'),
  );
});

test('LEAF_INVALID_CONFIG: maxSkewMs out of range', async () => {
  for (const maxSkewMs of [1, 3601000]) {
    await assert.rejects(
      SnowflakeGenerator.connect({ registry: 'fixed:53', cacheDir: tempDir(), maxSkewMs }),
      (e) => isLeafError('LEAF_INVALID_CONFIG')(e) && /maxSkewMs/.test(e.message),
    );
  }
});
