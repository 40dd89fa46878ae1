// Ids in JSON (issue 31): the exported replacer, stats() through JSON.stringify, and
// the jsSafe ids' type.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const leafid = require('../..');
const { tmpdir } = require('./helpers');

test('jsonReplacer writes bigint ids and BigInt64Array batches as decimal strings', () => {
  const body = { id: 2n ** 62n + 1n, small: 7n, ids: BigInt64Array.of(1n, 2n ** 63n - 1n), n: 3, s: 'x' };
  // What Express's res.json does once `app.set('json replacer', jsonReplacer)`.
  assert.equal(
    JSON.stringify(body, leafid.jsonReplacer),
    '{"id":"4611686018427387905","small":"7","ids":["1","9223372036854775807"],"n":3,"s":"x"}',
  );
  assert.throws(() => JSON.stringify(body), TypeError, 'without it, a bigint throws');
});

test('JSON.stringify(stats()) works: segment ids as strings, bigints in the objects', async () => {
  const gen = await leafid.SegmentGenerator.connect(`sqlite://${tmpdir()}/ids.db`);
  try {
    await gen.createTag('order', { start: 1, step: 1000 });
    gen.nextId('order');
    const [stats] = gen.stats();
    const current = stats.segments[stats.current];
    assert.equal(typeof current.value, 'bigint');
    const [json] = JSON.parse(JSON.stringify(gen.stats()));
    const segment = json.segments[json.current];
    assert.equal(typeof segment.value, 'string');
    assert.equal(BigInt(segment.value), current.value);
    assert.equal(segment.max, current.max.toString());
    assert.equal(segment.step, 1000);
    assert.equal(json.tag, 'order');
    assert.deepEqual(Object.keys(current), ['value', 'max', 'step'], 'toJSON is not enumerable');
  } finally {
    await gen.close();
  }
});

test('jsSafe segment ids are bigints below 2^53, exact through Number()', async () => {
  const gen = await leafid.SegmentGenerator.connect(`sqlite://${tmpdir()}/ids.db`, { jsSafe: true });
  try {
    await gen.createTag('user', { start: 2 ** 53 - 5, step: 1000 });
    const id = await gen.nextIdAsync('user');
    assert.equal(typeof id, 'bigint');
    assert.ok(Number.isSafeInteger(Number(id)));
    assert.equal(BigInt(Number(id)), id);
  } finally {
    await gen.close();
  }
});
