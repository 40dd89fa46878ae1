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
  // Every 64th at-hand id in a row resolves after a turn of the event loop instead
  // (setImmediate), so that a loop of awaits does not starve it.
  let calls = 0;
  let later = 0;
  const atHand = async (promise) => {
    calls++;
    const id = await settledInMicrotasks(promise);
    if (id !== undefined) return id;
    later++;
    return promise;
  };
  try {
    await gen.createTag('a', { step: 100_000 });
    const h = gen.tag('a');
    const ids = [];
    for (let i = 0; i < 100; i++) {
      for (const call of [() => h.nextIdAsync(), () => gen.nextIdAsync('a')]) {
        const id = await atHand(call());
        assert.equal(typeof id, 'bigint', 'an id at hand resolves without the event loop');
        ids.push(id, h.nextId());
      }
    }
    const snow = [sf.nextId()];
    for (let i = 0; i < 100; i++) {
      const id = await atHand(sf.nextIdAsync());
      assert.equal(typeof id, 'bigint');
      snow.push(id);
    }
    snow.push(sf.nextId());
    assert.ok(later > 0 && later <= Math.ceil(calls / 64) + 1, `${later} of ${calls} after the event loop`);
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

test('a loop of nextIdAsync awaits with ids at hand lets timers and other callbacks run', async () => {
  // Review of issue 31: an await of a resolved Promise only runs microtasks, so
  // `while (!stop) await h.nextIdAsync()` never let a timer set `stop`. No timing: `CAP`
  // only turns the old hang into a clear failure.
  const CAP = 200_000;
  const gen = await SegmentGenerator.connect('memory:');
  try {
    await gen.createTag('a', { step: 10_000_000 });
    const h = gen.tag('a');
    h.nextId(); // the first segment is loaded: every id below is at hand
    const ran = [];
    setTimeout(() => ran.push('timer'), 0);
    setImmediate(() => ran.push('immediate'));
    let n = 0;
    while (ran.length < 2 && n < CAP) {
      await (n % 2 ? h.nextIdAsync() : gen.nextIdAsync('a'));
      n++;
    }
    assert.deepEqual(ran.sort(), ['immediate', 'timer'], `the event loop never ran in ${n} awaits`);
  } finally {
    await gen.close();
  }
});

test('nextIdAsync with a this of another class or a look-alike rejects as the native method does', async () => {
  // Review of issue 31: the fast path took `_nextIdAtHand` from any `this`, so a handle
  // of tag a answered for tag b, and a plain object with that method for a generator.
  const gen = await SegmentGenerator.connect('memory:');
  const sf = await SnowflakeGenerator.connect('fixed:736', { cacheDir: tmpdir() });
  try {
    await gen.createTag('a', { start: 1000 });
    await gen.createTag('b', { start: 5_000_000 });
    const ha = gen.tag('a');
    ha.nextId();
    gen.nextId('b');
    const illegal = { name: 'TypeError', message: /Illegal invocation/ };
    await assert.rejects(gen.nextIdAsync.call(ha, 'b'), illegal);
    await assert.rejects(gen.nextIdAsync.call({ _nextIdAtHand: () => 42n }, 'b'), illegal);
    await assert.rejects(ha.nextIdAsync.call(sf), illegal);
    await assert.rejects(sf.nextIdAsync.call(gen), illegal);
    assert.ok((await gen.nextIdAsync.call(gen, 'b')) >= 5_000_000n, 'a genuine this still works');
  } finally {
    await gen.close();
    await sf.close();
  }
});

test('a rejected nextIdAsync\'s stack starts at the caller, not in leafid', async () => {
  // Review of issue 31: the fast path called the stack-taking wrapper, so its frame
  // (index.js) topped every rejection's stack.
  const gen = await SegmentGenerator.connect('memory:');
  const sf = await SnowflakeGenerator.connect('fixed:737', { cacheDir: tmpdir() });
  await gen.createTag('a');
  const h = gen.tag('a');
  const topFrame = (e) => e.stack.split('\n')[1];
  const atCaller = (e) => {
    assert.match(topFrame(e), /async_at_hand\.test\.js/, e.stack);
    return true;
  };
  await assert.rejects(gen.nextIdAsync('missing'), atCaller);
  await assert.rejects(gen.nextIdAsync(1), atCaller);
  await gen.close();
  await sf.close();
  await assert.rejects(h.nextIdAsync(), atCaller);
  await assert.rejects(sf.nextIdAsync(), atCaller);
});
