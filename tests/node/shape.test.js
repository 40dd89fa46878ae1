'use strict';
// One shape for both generators (`connect(url, options?)`), ids as bigints wherever they
// appear (stats included), and options objects that refuse a property leafid does not
// know, in plain JS as TypeScript does (issue 21).
const test = require('node:test');
const assert = require('node:assert/strict');
const { ROOT, tmpdir } = require('./helpers');

const leafid = require(ROOT);
const { SegmentGenerator, SnowflakeGenerator, decode, leafLayout } = leafid;

/** A TypeError ERR_INVALID_ARG_VALUE naming `key` and suggesting `meant`. */
function unknownOption(key, meant) {
  return (e) => {
    assert.ok(e instanceof TypeError, e && e.stack);
    assert.equal(e.code, 'ERR_INVALID_ARG_VALUE');
    assert.ok(e.message.includes(`.${key}"`), e.message);
    if (meant) assert.ok(e.message.includes(`Did you mean "${meant}"?`), e.message);
    else assert.ok(!e.message.includes('Did you mean'), e.message);
    return true;
  };
}

test('SnowflakeGenerator.connect(url, options?) has the shape of SegmentGenerator.connect', async () => {
  const cacheDir = tmpdir();
  const sf = await SnowflakeGenerator.connect('fixed:59', { cacheDir });
  assert.equal(sf.workerId, 59);
  assert.equal(typeof sf.nextId(), 'bigint');
  await sf.close();
  const bare = await SnowflakeGenerator.connect(`local://${tmpdir()}`);
  assert.equal(typeof bare.nextId(), 'bigint');
  await bare.close();
});

test('the older form connect({ registry, … }) still works', async () => {
  const sf = await SnowflakeGenerator.connect({ registry: 'fixed:60', cacheDir: tmpdir() });
  assert.equal(sf.workerId, 60);
  await sf.close();
});

test('connect refuses a registry given twice, a non-string url and a second object', async () => {
  await assert.rejects(SnowflakeGenerator.connect('fixed:61', { registry: 'fixed:61' }), unknownOption('registry'));
  await assert.rejects(SnowflakeGenerator.connect(61), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  await assert.rejects(SnowflakeGenerator.connect(), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  await assert.rejects(
    SnowflakeGenerator.connect({ registry: 'fixed:61' }, { cacheDir: tmpdir() }),
    { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' },
  );
});

test('stats() gives ids as bigints, exact past 2^53', async () => {
  const gen = await SegmentGenerator.connect('memory:');
  const start = 2n ** 60n + 1n;
  await gen.createTag('big', { start, step: 1000 });
  assert.equal(gen.nextId('big'), start);
  const [s] = gen.stats();
  const seg = s.segments[s.current];
  assert.equal(seg.value, start + 1n);
  assert.equal(seg.max, start + 1000n);
  for (const g of s.segments) for (const k of ['value', 'max']) assert.equal(typeof g[k], 'bigint', k);
  // Steps fit leaf_alloc.step (an int) and counts are small: numbers.
  assert.equal(seg.step, 1000);
  assert.equal(s.step, 1000);
  assert.equal(s.minStep, 1000);
  assert.equal(typeof s.refills, 'number');
  await gen.close();
});

test('an unknown option is refused, naming the closest one', async () => {
  await assert.rejects(SegmentGenerator.connect('memory:', { waitTimoutMs: 5 }), unknownOption('waitTimoutMs', 'waitTimeoutMs'));
  await assert.rejects(SegmentGenerator.connect('memory:', { jssafe: true }), unknownOption('jssafe', 'jsSafe'));
  await assert.rejects(SegmentGenerator.connect('memory:', { pool: 4 }), unknownOption('pool'));
  const gen = await SegmentGenerator.connect('memory:');
  await assert.rejects(gen.createTag('t', { strat: 5 }), unknownOption('strat', 'start'));
  await assert.rejects(gen.createTag('t', { exists_ok: true }), unknownOption('exists_ok', 'existOk'));
  assert.deepEqual(gen.tags(), [], 'nothing was created');
  await gen.close();
  await assert.rejects(SnowflakeGenerator.connect('fixed:62', { cacheDri: tmpdir() }), unknownOption('cacheDri', 'cacheDir'));
  await assert.rejects(
    SnowflakeGenerator.connect({ registry: 'fixed:62', heartbeat: 100 }),
    unknownOption('heartbeat', 'heartbeatMs'),
  );
  const layout = { ...leafLayout(), workerBit: 10 };
  await assert.rejects(SnowflakeGenerator.connect('fixed:62', { layout }), unknownOption('workerBit', 'workerBits'));
  assert.throws(() => decode(1n, layout), unknownOption('workerBit', 'workerBits'));
});

test('known options still pass: every key of each options object', async () => {
  const gen = await SegmentGenerator.connect('memory:', {
    waitTimeoutMs: 10, refreshIntervalMs: 60000, createTable: true, doubleBuffer: true, maxStep: 100000, jsSafe: false, threadChunk: 16, tags: [],
  });
  await gen.createTag('t', { start: 1, step: 10, description: 'd', existOk: true });
  await gen.close();
  const sf = await SnowflakeGenerator.connect('fixed:63', {
    layout: leafLayout(), cacheDir: tmpdir(), heartbeatMs: 3000, lookaheadMs: 65000, maxBackwardMs: 5, startupWaitMs: 0, maxSkewMs: 5000,
  });
  assert.equal(decode(sf.nextId(), sf.layout).workerId, 63);
  await sf.close();
});
