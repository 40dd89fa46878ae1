// SegmentGenerator and TagHandle from Node.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const leafid = require('../..');
const { tmpdir, mysqlUrl, uniqueTag, orWait } = require('./helpers');

test('ids start at the tag start and are bigints', async () => {
  const gen = await leafid.SegmentGenerator.connect(`sqlite://${tmpdir()}/ids.db`);
  await gen.createTag('order', { start: 100, step: 1000, description: 'orders' });
  const h = gen.tag('order');
  assert.equal(h.tag, 'order');
  assert.equal(h.nextId(), 100n);
  assert.equal(gen.nextId('order'), 101n);
  assert.deepEqual([...gen.nextIds('order', 3)], [102n, 103n, 104n]);
  assert.ok(h.nextIds(20) instanceof BigInt64Array);
  assert.equal(h.nextIdString(), '125');
  assert.equal(gen.nextIdString('order'), '126');
  assert.deepEqual(gen.tags(), ['order']);
  const [s] = gen.stats();
  assert.equal(s.tag, 'order');
  assert.equal(s.initialized, true);
  assert.equal(s.segments.length, 2);
  await gen.close();
});

test('errors carry stable codes', async () => {
  const gen = await leafid.SegmentGenerator.connect(`sqlite://${tmpdir()}/ids.db`);
  assert.throws(() => gen.nextId('missing'), (e) => e instanceof Error && e.code === 'LEAF_TAG_NOT_FOUND' && /createTag\(/.test(e.message));
  assert.throws(() => gen.nextId(''), { code: 'LEAF_INVALID_TAG' });
  assert.throws(() => gen.tag('x'.repeat(129)), { code: 'LEAF_INVALID_TAG' });
  await gen.createTag('dup');
  await assert.rejects(gen.createTag('dup'), { code: 'LEAF_TAG_EXISTS' });
  await assert.rejects(gen.createTag('bad', { step: 0 }), { code: 'LEAF_INVALID_CONFIG' });
  await assert.rejects(leafid.SegmentGenerator.connect('oracle://x'), { code: 'LEAF_INVALID_URL' });
  await assert.rejects(leafid.SegmentGenerator.connect('mysql://root:x@127.0.0.1:1/leafid'), { code: 'LEAF_STORE_UNAVAILABLE' });
  const h = gen.tag('dup');
  await gen.close();
  assert.throws(() => h.nextId(), { code: 'LEAF_CLOSED' });
});

test('a missing MySQL table names the option that creates it, createTable: true', async () => {
  const base = mysqlUrl().replace(/\/[^/]*$/, '');
  await assert.rejects(leafid.SegmentGenerator.connect(`${base}/mysql`), (e) => {
    assert.equal(e.code, 'LEAF_TABLE_MISSING');
    // Issue 31: Node's way, not the core's Rust builder or the Python keyword.
    assert.match(e.message, /createTable: true/);
    assert.doesNotMatch(e.message, /create_table|SegmentOptions/);
    return true;
  });
});

test('refresh picks up a tag created by another generator', async () => {
  const url = `sqlite://${tmpdir()}/ids.db`;
  const a = await leafid.SegmentGenerator.connect(url);
  const b = await leafid.SegmentGenerator.connect(url);
  await a.createTag('new');
  // Before the refresh, b's first nextId may already find the tag (the core looks a
  // cache miss up in the store, issue 12), so only the state after it is asserted.
  await b.refresh();
  assert.ok((await b.nextIdAsync('new')) > 0n);
  await a.close();
  await b.close();
});

test('MySQL: two generators never share an id', async () => {
  const url = mysqlUrl();
  const tag = uniqueTag('mysql');
  const a = await leafid.SegmentGenerator.connect(url, { createTable: true });
  await a.createTag(tag, { step: 100 });
  const b = await leafid.SegmentGenerator.connect(url);
  const ha = a.tag(tag);
  const hb = b.tag(tag);
  const seen = new Set();
  for (let i = 0; i < 20000; i++) {
    for (const id of [await orWait(() => ha.nextId(), () => ha.nextIdAsync()), await orWait(() => hb.nextId(), () => hb.nextIdAsync())]) {
      assert.ok(!seen.has(id), `duplicate ${id}`);
      seen.add(id);
    }
  }
  await a.close();
  await b.close();
});

test('MySQL: thread chunks never share an id, within or across generators', async () => {
  const url = mysqlUrl();
  const tag = uniqueTag('chunk');
  const a = await leafid.SegmentGenerator.connect(url, { createTable: true, threadChunk: 64 });
  await a.createTag(tag, { step: 100 });
  const b = await leafid.SegmentGenerator.connect(url, { threadChunk: 64 });
  const seen = new Set();
  for (const gen of [a, b]) {
    const h = gen.tag(tag);
    let last = 0n;
    for (let i = 0; i < 5000; i++) {
      const id = await orWait(() => h.nextId(), () => h.nextIdAsync());
      assert.ok(id > last, `${id} after ${last}`);
      last = id;
      assert.ok(!seen.has(id), `duplicate ${id}`);
      seen.add(id);
    }
  }
  await assert.rejects(leafid.SegmentGenerator.connect('memory:', { threadChunk: 4097 }), (e) => {
    assert.equal(e.code, 'LEAF_INVALID_CONFIG');
    assert.match(e.message, /threadChunk 4097 out of range/, 'named as Node spells it');
    return true;
  });
  await a.close();
  await b.close();
});

test('a tag of 512 UTF-8 bytes is never taken for its prefix on the fast path', async () => {
  // Found by review: the fast path's 512-byte buffer cut "😀" x 128 to "😀" x 127 and
  // issued that tag's ids.
  const gen = await leafid.SegmentGenerator.connect('memory:');
  const short = '😀'.repeat(127);
  const long = '😀'.repeat(128);
  await gen.createTag(short, { start: 1, step: 10 });
  await gen.createTag(long, { start: 1_000_000, step: 10 });
  assert.ok(gen.nextId(long) >= 1_000_000n);
  assert.ok(gen.nextIdString(long).length >= 7);
  assert.ok(gen.nextIds(long, 2)[0] >= 1_000_000n);
  assert.ok(gen.nextId(short) < 1_000_000n);
  assert.throws(() => gen.nextId('😀'.repeat(200)), { code: 'LEAF_INVALID_TAG' });
  await gen.close();
});
