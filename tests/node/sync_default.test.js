// A synchronous ORM default (Drizzle `$defaultFn(() => handle.nextId())`) and bulk
// inserts (issue 31): the recipe of docs/faq.md, and the message a synchronous call
// gives when no id is at hand.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const leafid = require('../..');
const { tmpdir } = require('./helpers');

test('a 100 000-row bulk insert through a synchronous default never throws once its ids are reserved', async () => {
  const gen = await leafid.SegmentGenerator.connect(`sqlite://${tmpdir()}/ids.db`);
  try {
    await gen.createTag('order', { start: 1, step: 1000 });
    const order = gen.tag('order');
    const rows = Array.from({ length: 100_000 }, (_, i) => ({ total: i }));
    // The recipe: reserve the batch's ids with the waiting call, then assign them.
    const ids = await order.nextIdsAsync(rows.length);
    const withIds = rows.map((row, i) => ({ ...row, id: ids[i] }));
    // What the ORM does per row: the default runs only for a row without an id.
    const defaultFn = () => order.nextId();
    const inserted = withIds.map((row) => row.id ?? defaultFn());
    assert.equal(new Set(inserted).size, rows.length);
    for (let i = 1; i < inserted.length; i++) assert.ok(inserted[i] > inserted[i - 1]);
    // Single rows after the bulk insert: the default has an id at hand.
    assert.ok(defaultFn() > inserted.at(-1));
  } finally {
    await gen.close();
  }
});

test('a synchronous call with no id at hand names the waiting call nextIdAsync, not nextId', async () => {
  const gen = await leafid.SegmentGenerator.connect(`sqlite://${tmpdir()}/ids.db`);
  try {
    // Segments of 10 ids: a tight synchronous loop outruns the background refill.
    await gen.createTag('burst', { start: 1, step: 10 });
    const burst = gen.tag('burst');
    let thrown;
    for (let i = 0; i < 1_000_000 && !thrown; i++) {
      try {
        burst.nextId();
      } catch (e) {
        thrown = e;
      }
    }
    assert.equal(thrown?.code, 'LEAF_SEGMENTS_EXHAUSTED', `${thrown}`);
    assert.match(thrown.message, /nextIdAsync/);
    assert.doesNotMatch(thrown.message, /\bnextId\b/, thrown.message);
  } finally {
    await gen.close();
  }
});
