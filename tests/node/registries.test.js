'use strict';
// Snowflake registries from Node, against the real ZooKeeper and MariaDB: the binding
// passes the registry URL through and the ids carry the worker id the registry gave.
const test = require('node:test');
const assert = require('node:assert/strict');
const { ROOT, env, tmpdir, uniqueTag, assertUnique, skipIfNotBuilt } = require('./helpers');

const { SnowflakeGenerator, decode } = require(ROOT);

async function issuesUnderItsWorkerId(t, registry) {
  let a;
  let b;
  try {
    a = await SnowflakeGenerator.connect({ registry: `${registry}`.replace('PORT', '8001'), cacheDir: tmpdir() });
  } catch (e) {
    if (skipIfNotBuilt(t, e)) return;
    throw e;
  }
  b = await SnowflakeGenerator.connect({ registry: `${registry}`.replace('PORT', '8002'), cacheDir: tmpdir() });
  assert.notEqual(a.workerId, b.workerId, 'two identities hold two worker ids');
  const ids = [a.nextIds(5000), b.nextIds(5000)];
  assert.equal(decode(ids[0][0]).workerId, a.workerId);
  assert.equal(decode(ids[1][0]).workerId, b.workerId);
  assertUnique(assert, ...ids);
  await a.close();
  await b.close();
}

test('zookeeper registry (Leaf forever nodes): two ports, two worker ids, no shared id', async (t) => {
  await issuesUnderItsWorkerId(t, `zookeeper://${env('LEAFID_ZK')}/${uniqueTag('leaf')}?port=PORT`);
});

test('zookeeper-recycle registry: two generators lease two worker ids', async (t) => {
  await issuesUnderItsWorkerId(t, `zookeeper-recycle://${env('LEAFID_ZK')}/${uniqueTag('pool')}?port=PORT`);
});

test('mysql registry (leaf_workerid_alloc): two ports, two worker ids, no shared id', async (t) => {
  const url = env('LEAFID_MYSQL_URL');
  await issuesUnderItsWorkerId(t, `${url}${url.includes('?') ? '&' : '?'}port=PORT&ip=10.${process.pid % 250}.0.1`);
});

test('zookeeper registry: the same identity gets the same worker id back after close', async () => {
  const registry = `zookeeper://${env('LEAFID_ZK')}/${uniqueTag('again')}?port=8003`;
  const a = await SnowflakeGenerator.connect({ registry, cacheDir: tmpdir() });
  const first = a.workerId;
  const last = a.nextId();
  await a.close();
  const b = await SnowflakeGenerator.connect({ registry, cacheDir: tmpdir() });
  assert.equal(b.workerId, first);
  assert.ok(b.nextId() > last);
  await b.close();
});
