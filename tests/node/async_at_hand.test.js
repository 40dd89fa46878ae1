'use strict';
// Issue 31: nextIdAsync with the id at hand is a resolved Promise (no trip to the core's
// runtime and back through the event loop), in order with nextId; a call that must wait
// still resolves, and errors still come out of the await as before. No timing asserted:
// "at hand" shows as a Promise settled within microtasks, which a native completion
// (delivered by the event loop, a macrotask) never is.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { ROOT, tmpdir, assertUnique } = require('./helpers');

const { SegmentGenerator, SnowflakeGenerator } = require(ROOT);

/** What `promise` resolved to within a few microtask turns, or `undefined` if it had not. */
async function settledInMicrotasks(promise) {
  let value;
  promise.then((v) => { value = v; }, () => {});
  for (let i = 0; i < 10; i++) await null;
  return value;
}

test('nextIdAsync with the id at hand resolves within microtasks, in order with nextId', async () => {
  const gen = await SegmentGenerator.connect('memory:');
  const sf = await SnowflakeGenerator.connect('fixed:732', { cacheDir: tmpdir() });
  try {
    await gen.createTag('a', { step: 100_000 });
    const h = gen.tag('a');
    const ids = [];
    for (let i = 0; i < 100; i++) {
      for (const call of [() => h.nextIdAsync(), () => gen.nextIdAsync('a')]) {
        const id = await settledInMicrotasks(call());
        assert.equal(typeof id, 'bigint', 'an id at hand resolves without the event loop');
        ids.push(id, h.nextId());
      }
    }
    const snow = [sf.nextId()];
    for (let i = 0; i < 100; i++) {
      const id = await settledInMicrotasks(sf.nextIdAsync());
      assert.equal(typeof id, 'bigint');
      snow.push(id);
    }
    snow.push(sf.nextId());
    for (const list of [ids, snow]) {
      for (let i = 1; i < list.length; i++) assert.ok(list[i] > list[i - 1], `${list[i]} after ${list[i - 1]}`);
      assertUnique(assert, list);
    }
  } finally {
    await gen.close();
    await sf.close();
  }
});

test('nextIdAsync that must wait (a tag not in the cache yet) resolves through the waiting path', async () => {
  const url = `sqlite://${path.join(tmpdir(), 'ids.db')}`;
  const admin = await SegmentGenerator.connect(url);
  const gen = await SegmentGenerator.connect(url);
  try {
    await admin.createTag('later', { start: 500, step: 10 });
    const pending = gen.nextIdAsync('later');
    assert.equal(await settledInMicrotasks(pending), undefined, 'the store is asked first');
    const first = await pending;
    assert.ok(first >= 500n);
    assert.ok((await gen.nextIdAsync('later')) > first);
  } finally {
    await gen.close();
    await admin.close();
  }
});

test('nextIdAsync errors still reject at the caller\'s await with the core\'s code', async () => {
  const gen = await SegmentGenerator.connect('memory:');
  const sf = await SnowflakeGenerator.connect('fixed:735', { cacheDir: tmpdir() });
  await gen.createTag('a');
  const h = gen.tag('a');
  await h.nextIdAsync();
  const named = (code) => (e) => e.code === code && e.stack.includes('async_at_hand.test.js');
  await assert.rejects(gen.nextIdAsync('missing'), named('LEAF_TAG_NOT_FOUND'));
  const bad = gen.nextIdAsync(1);
  assert.ok(bad instanceof Promise, 'a bad argument rejects, never throws');
  await assert.rejects(bad, { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  await gen.close();
  await sf.close();
  await assert.rejects(h.nextIdAsync(), named('LEAF_CLOSED'));
  await assert.rejects(gen.nextIdAsync('a'), named('LEAF_CLOSED'));
  await assert.rejects(sf.nextIdAsync(), named('LEAF_CLOSED'));
});
