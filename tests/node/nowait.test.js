'use strict';
// Issue 12 from Node, against the real MariaDB, SQLite and ZooKeeper through a loopback
// proxy that forwards, refuses or blackholes: synchronous calls never wait on I/O (they
// throw at once while the event loop keeps turning), the `…Async` twins wait off the
// loop and resolve once the server is back, and tags are usable at once. Behaviour
// only: no timing is asserted.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const { ROOT, env, tmpdir, uniqueTag, assertUnique } = require('./helpers');
const { Proxy, throughProxy, hostPort } = require('./proxy');

const { SegmentGenerator, SnowflakeGenerator } = require(ROOT);

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A counter bumped by a 1 ms interval: it advances only while the event loop turns. */
function loopTicks() {
  const ticks = { n: 0 };
  ticks.timer = setInterval(() => { ticks.n++; }, 1);
  return ticks;
}

function assertIncreasing(ids) {
  for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], `id ${ids[i]} after ${ids[i - 1]}`);
  assertUnique(assert, ids);
}

test('a blackholed store: nextId throws LEAF_SEGMENTS_EXHAUSTED at once, nextIdAsync resolves once it is back', { timeout: 180_000 }, async () => {
  const mysql = env('LEAFID_MYSQL_URL');
  const proxy = await new Proxy(...hostPort(mysql)).start();
  const gen = await SegmentGenerator.connect(throughProxy(mysql, proxy), { waitTimeoutMs: 120_000 });
  const ticks = loopTicks();
  try {
    const tag = uniqueTag('blackhole');
    await gen.createTag(tag, { step: 10 });
    const ids = [await gen.nextIdAsync(tag)];
    proxy.blackhole();
    // At most two segments are buffered; past them nextId must throw, not wait.
    let thrown;
    for (let i = 0; i < 10_000 && !thrown; i++) {
      try {
        ids.push(gen.nextId(tag));
      } catch (e) {
        thrown = e;
      }
    }
    assert.equal(thrown?.code, 'LEAF_SEGMENTS_EXHAUSTED', `${thrown}`);
    assert.throws(() => gen.nextIds(tag, 5), { code: 'LEAF_SEGMENTS_EXHAUSTED' });
    const waiting = gen.nextIdAsync(tag);
    const before = ticks.n;
    await sleep(100);
    assert.ok(ticks.n > before, 'the event loop turns while nextIdAsync waits');
    await proxy.forward();
    ids.push(await waiting);
    for (let i = 0; i < 50; i++) ids.push(await gen.nextIdAsync(tag));
    assertIncreasing(ids);
  } finally {
    clearInterval(ticks.timer);
    await gen.close();
    await proxy.close();
  }
});

test('connect with tags: the first nextId succeeds with waitTimeoutMs 0', async () => {
  const url = `sqlite://${tmpdir()}/ids.db`;
  const a = await SegmentGenerator.connect(url);
  await a.createTag('order');
  await a.close();
  const b = await SegmentGenerator.connect(url, { tags: ['order'], waitTimeoutMs: 0 });
  assert.equal(typeof b.nextId('order'), 'bigint');
  assert.equal(typeof b.tag('order').nextId(), 'bigint');
  await b.close();
});

test('a tag created by another generator works on the first nextIdAsync', async () => {
  const url = env('LEAFID_MYSQL_URL');
  const a = await SegmentGenerator.connect(url, { createTable: true });
  const b = await SegmentGenerator.connect(url);
  try {
    const tag = uniqueTag('elsewhere');
    await a.createTag(tag, { start: 100 });
    const id = await b.nextIdAsync(tag);
    assert.ok(id >= 100n, `${id}`);
    assertUnique(assert, [id, await a.nextIdAsync(tag), await b.nextIdAsync(tag)]);
  } finally {
    await a.close();
    await b.close();
  }
});

test('a tag inserted by Leaf-style SQL works on the first nextIdAsync', async () => {
  const url = env('LEAFID_MYSQL_URL');
  const gen = await SegmentGenerator.connect(url, { createTable: true });
  try {
    const tag = uniqueTag('sql');
    const u = new URL(url);
    execFileSync('mysql', ['-h', u.hostname, '-P', u.port || '3306', '-u', decodeURIComponent(u.username),
      u.pathname.slice(1), '-e',
      `INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES ('${tag}', 1, 100, 'by SQL')`],
    { env: { ...process.env, MYSQL_PWD: decodeURIComponent(u.password) } });
    const first = await gen.nextIdAsync(tag);
    assert.equal(typeof first, 'bigint');
    assert.ok((await gen.nextIdAsync(tag)) > first);
  } finally {
    await gen.close();
  }
});

test('a zookeeper registry blackholed past the lookahead: nextId throws at once with the cause while the loop turns; nextIdAsync resolves once it is back; close() settles', { timeout: 180_000 }, async () => {
  const [host, port] = env('LEAFID_ZK').split(':');
  const proxy = await new Proxy(host, port).start();
  const registry = `zookeeper://127.0.0.1:${proxy.port}/${uniqueTag('sfhole')}?port=${20000 + (process.pid % 20000)}`;
  // A short lookahead: ids keep coming through an outage that long (issue 30), so the
  // bound, past which nextId throws, comes within seconds.
  const sf = await SnowflakeGenerator.connect({ registry, cacheDir: tmpdir(), heartbeatMs: 500, lookaheadMs: 2000 });
  const ticks = loopTicks();
  try {
    let last = await sf.nextIdAsync();
    proxy.blackhole();
    const before = ticks.n;
    let thrown;
    // Ids keep flowing while the persisted time bound allows; past it nextId must throw.
    for (let i = 0; i < 3000 && !thrown; i++) {
      try {
        const id = sf.nextId();
        assert.ok(id > last);
        last = id;
      } catch (e) {
        thrown = e;
      }
      await sleep(20);
    }
    assert.ok(thrown, 'nextId threw during the outage');
    assert.match(thrown.code, /^LEAF_(REGISTRY_UNAVAILABLE|LEASE_LOST)$/, `${thrown}`);
    assert.ok(ticks.n > before, 'the event loop kept turning during the outage');
    const waiting = sf.nextIdAsync();
    await proxy.forward();
    const id = await waiting;
    assert.ok(id > last);
    assert.ok(sf.nextId() > id);
    proxy.blackhole();
    assert.equal(typeof (await sf.close()), 'boolean', 'close() settles with a blackholed registry');
  } finally {
    clearInterval(ticks.timer);
    await sf.close();
    await proxy.close();
  }
});

test('tag() never waits: a tag missing from the cache throws LEAF_TAG_NOT_FOUND at once and is usable after the lookup', async () => {
  // Found by review: tag() used the core's waiting lookup and held the event loop.
  const dir = tmpdir();
  const gen = await SegmentGenerator.connect(`sqlite://${dir}/ids.db`);
  assert.throws(() => gen.tag('nowhere'), { code: 'LEAF_TAG_NOT_FOUND' });
  const other = await SegmentGenerator.connect(`sqlite://${dir}/ids.db`);
  await other.createTag('later', { start: 1, step: 10 });
  await gen.nextIdAsync('later'); // looks it up, waiting off the loop
  assert.equal(gen.tag('later').tag, 'later');
  await Promise.all([gen.close(), other.close()]);
});

test('a tags option that claims a huge length is a RangeError, not an abort', async () => {
  // Found by review: the array was converted by reserving its length up front.
  await assert.rejects(
    SegmentGenerator.connect('memory:', { tags: new Array(2 ** 32 - 1) }),
    { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' },
  );
});

test('createTag with existOk runs twice, and the tag has ids at hand right after either call', async () => {
  const url = `sqlite://${tmpdir()}/ids.db`;
  for (let run = 0; run < 2; run++) {
    const gen = await SegmentGenerator.connect(url, { waitTimeoutMs: 0 });
    await gen.createTag('twice', { start: 1, step: 10, existOk: true });
    assert.equal(typeof gen.tag('twice').nextId(), 'bigint'); // never waits, and need not
    await assert.rejects(gen.createTag('twice'), { code: 'LEAF_TAG_EXISTS' });
    await gen.close();
  }
});
