'use strict';
// Issue 30 from Node: what the snowflake calls return, and how long they take, while the
// registry is out of reach. A loopback proxy (tests/node/proxy.js) stands between the
// generator and the real ZooKeeper or MariaDB (a `?pool=` registry) and blackholes or
// refuses. Settings are short so the bound comes quickly: a heartbeat of 500 ms and a
// `lookaheadMs` of 4000, so an outage of 2.5 s (longer than the 1.6-2 s after which
// issuing stopped before issue 30) is ridden through and a longer one meets the bound.
//
// Timing asserts are hang-catchers only: a call during a short outage returns within 1 s
// (before issue 30 `nextIdAsync` waited 10 s, the core's MAX_ASYNC_WAIT), `nextId` past
// the bound throws within 1 s (it never waits on I/O), `nextIdAsync` past the bound
// rejects within 30 s (the core bounds it at 10 s; a hang would not end), ids are back
// within 30 s of the heal. The measured figures are logged.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const { ROOT, env, tmpdir, uniqueTag, assertUnique } = require('./helpers');
const { Proxy, throughProxy, hostPort } = require('./proxy');

const { SnowflakeGenerator } = require(ROOT);

const HEARTBEAT_MS = 500;
const LOOKAHEAD_MS = 4000;
// Small, so a fresh identity's lead (lookahead + maxSkew + 1 s) is short to wait out.
const MAX_SKEW_MS = 1000;
const OUTAGE_MS = 2500;
// A call from memory takes microseconds; one that waited for the registry took 10 s.
const AT_ONCE_MS = 1000;
// Past the bound an awaited call fails within the core's 10 s; only a hang outlasts this.
const HUNG_MS = 30_000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const options = () => ({ cacheDir: tmpdir(), heartbeatMs: HEARTBEAT_MS, lookaheadMs: LOOKAHEAD_MS, maxSkewMs: MAX_SKEW_MS });

/**
 * A `zookeeper://` identity whose recorded bound is in the past, behind a proxy: a holder
 * on it issues at the real clock (a new identity's ids lead the clock by lookahead +
 * maxSkew + 1 s and would leave no room to ride an outage through).
 */
async function settledZooKeeper() {
  const [host, port] = env('LEAFID_ZK').split(':');
  const proxy = await new Proxy(host, port).start();
  const url = `zookeeper://127.0.0.1:${proxy.port}/${uniqueTag('outage')}?port=8001`;
  try {
    const first = await SnowflakeGenerator.connect(url, options());
    await first.nextIdAsync();
    assert.equal(await first.close(), true);
  } catch (e) {
    await proxy.close();
    throw e;
  }
  await sleep(LOOKAHEAD_MS + MAX_SKEW_MS + 1000 + 200); // the bound written at close is past
  return { proxy, url };
}

/** A `mysql://…?pool=` pool of one id whose last bound is long past, behind a proxy. */
async function settledPool() {
  const mysql = env('LEAFID_MYSQL_URL');
  const proxy = await new Proxy(...hostPort(mysql)).start();
  const pool = uniqueTag('outage');
  const via = throughProxy(mysql, proxy);
  const url = `${via}${via.includes('?') ? '&' : '?'}pool=${pool}&pool_size=1`;
  try {
    await (await SnowflakeGenerator.connect(url, options())).close();
    const u = new URL(mysql);
    execFileSync('mysql', ['-h', u.hostname, '-P', u.port || '3306', '-u', decodeURIComponent(u.username),
      u.pathname.slice(1), '-e', `UPDATE leafid_worker_pool SET bound_ms = 1 WHERE pool = '${pool}'`],
    { env: { ...process.env, MYSQL_PWD: decodeURIComponent(u.password) }, timeout: HUNG_MS });
  } catch (e) {
    await proxy.close();
    throw e;
  }
  return { proxy, url };
}

/** Every call kind in turn for `spanMs`; appends the ids; returns the slowest call's ms. */
async function issueThrough(sf, spanMs, ids) {
  let slowest = 0;
  const end = performance.now() + spanMs;
  while (performance.now() < end) {
    for (const call of [() => [sf.nextId()], () => sf.nextIds(16), async () => [await sf.nextIdAsync()]]) {
      const started = performance.now();
      ids.push(...(await call()));
      slowest = Math.max(slowest, performance.now() - started);
    }
    await sleep(5);
  }
  return slowest;
}

/** Milliseconds the Promise took to settle, and its value or rejection. */
async function timed(promise) {
  const started = performance.now();
  const result = await promise.catch((e) => e);
  return [performance.now() - started, result];
}

/** Runs the outages on a settled holder of `url`; asserts and returns the figures. */
async function outageFigures(name, { proxy, url }) {
  const sf = await SnowflakeGenerator.connect(url, options());
  const ids = [];
  const figures = [];
  try {
    // One outage shorter than the lookahead: silent (blackholed) for its first half,
    // refusing for its second.
    await issueThrough(sf, 1000, ids); // the heartbeat has persisted a bound meanwhile
    proxy.blackhole();
    let slowest = await issueThrough(sf, OUTAGE_MS / 2, ids);
    await proxy.refuse();
    slowest = Math.max(slowest, await issueThrough(sf, OUTAGE_MS / 2, ids));
    await proxy.forward();
    figures.push(`blackholed then refused for ${OUTAGE_MS} ms: slowest call ${slowest.toFixed(2)} ms`);
    assert.ok(slowest < AT_ONCE_MS, `${name}: a call took ${slowest} ms during an outage of ${OUTAGE_MS} ms`);
    await issueThrough(sf, 1500, ids);

    // Past the bound: ids come until about a lookahead into the outage (less up to a
    // heartbeat), then nextId throws at once and the awaited calls reject, bounded.
    proxy.blackhole();
    const cut = performance.now();
    let thrown;
    let lastOk = 0;
    let throwTook = 0;
    while (!thrown) {
      const started = performance.now();
      try {
        ids.push(sf.nextId());
        lastOk = performance.now() - cut;
        assert.ok(lastOk < HUNG_MS, `${name}: issued far past the lookahead`);
      } catch (e) {
        thrown = e;
        throwTook = performance.now() - started;
      }
      await sleep(5);
    }
    assert.equal(thrown.code, 'LEAF_REGISTRY_UNAVAILABLE', `${name}: ${thrown}`);
    assert.ok(throwTook < AT_ONCE_MS, `${name}: nextId took ${throwTook} ms to throw`);
    const [[single, one], [batch, many]] = await Promise.all([timed(sf.nextIdAsync()), timed(sf.nextIdsAsync(3))]);
    for (const [call, took, result] of [['nextIdAsync', single, one], ['nextIdsAsync', batch, many]]) {
      assert.equal(result.code, 'LEAF_REGISTRY_UNAVAILABLE', `${name}: ${call} gave ${result}`);
      assert.ok(took < HUNG_MS, `${name}: ${call} took ${took} ms past the bound`);
    }
    figures.push(`last id ${(lastOk / 1000).toFixed(2)} s into a blackhole; then nextId threw in ${throwTook.toFixed(2)} ms, `
      + `nextIdAsync rejected after ${(single / 1000).toFixed(2)} s, nextIdsAsync after ${(batch / 1000).toFixed(2)} s`);

    await proxy.forward();
    const healed = performance.now();
    for (;;) {
      try {
        ids.push(sf.nextId());
        break;
      } catch (e) {
        assert.ok(performance.now() - healed < HUNG_MS, `${name}: no id ${HUNG_MS} ms after the heal: ${e}`);
        await sleep(5);
      }
    }
    figures.push(`ids back ${((performance.now() - healed) / 1000).toFixed(2)} s after the heal`);
    ids.push(...(await sf.nextIdsAsync(16)));
    for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], `${name}: id ${ids[i]} after ${ids[i - 1]}`);
    assertUnique(assert, ids);
    return figures;
  } finally {
    await sf.close();
    await proxy.close();
  }
}

test('snowflake calls issue through a short registry outage at memory speed; past the lookahead nextId throws at once and nextIdAsync rejects bounded; ids come back after the heal', { timeout: 180_000 }, async (t) => {
  // Both registries at once: most of the test is waiting (the outages, the core's 10 s
  // bound past the lookahead), and the two share nothing.
  // allSettled: a failing run must not leave the other's generator and proxy open.
  const runs = await Promise.allSettled([
    settledZooKeeper().then((s) => outageFigures('zookeeper', s)),
    settledPool().then((s) => outageFigures('mysql pool', s)),
  ]);
  for (const [name, run] of [['zookeeper', runs[0]], ['mysql pool', runs[1]]]) {
    if (run.status === 'rejected') throw run.reason;
    t.diagnostic(`${name}: ${run.value.join('; ')}`);
  }
});

test('on zookeeper:// a generator connected after a close during an outage waits for ZooKeeper', { timeout: 120_000 }, async () => {
  // Issue 30 goal 4, from Node: a close out of touch with ZooKeeper hands nothing over
  // in the cache file on zookeeper://, because a Java Leaf server may start on the
  // identity meanwhile and only ZooKeeper shows it (a review measured 303 530 ids issued
  // twice when a restart issued from the cache file beside one). `connect` rejects at
  // once instead of issuing, and connects once ZooKeeper answers, above every id before.
  // (Handovers are made on postgres://?port=, which no foreign server shares.)
  const { proxy, url } = await settledZooKeeper();
  const opts = options(); // one cache directory for both generators
  try {
    const first = await SnowflakeGenerator.connect(url, opts);
    const before = [...(await first.nextIdsAsync(100))];
    await proxy.refuse();
    await sleep(3 * HEARTBEAT_MS); // a heartbeat's renew has failed: out of touch
    before.push(...(await first.nextIdsAsync(100)));
    await first.close();
    await assert.rejects(SnowflakeGenerator.connect(url, opts), (e) => e.code === 'LEAF_REGISTRY_UNAVAILABLE');
    await proxy.forward();
    // In one process the closed generator's ZooKeeper claim carries this live pid: it
    // is taken once its session expires (6 s), not at once as a dead process's.
    const deadline = performance.now() + HUNG_MS;
    let second;
    for (;;) {
      try {
        second = await SnowflakeGenerator.connect(url, opts);
        break;
      } catch (e) {
        assert.equal(e.code, 'LEAF_WORKER_ID_IN_USE', String(e));
        assert.ok(performance.now() < deadline, 'the identity never came back');
        await sleep(500);
      }
    }
    const highest = before.reduce((a, b) => (a > b ? a : b));
    const ids = [...(await second.nextIdsAsync(100))];
    assert.ok(ids.every((id) => id > highest), 'an id at or below one issued before');
    await second.close();
  } finally {
    await proxy.close();
  }
});
