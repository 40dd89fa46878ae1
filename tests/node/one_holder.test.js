'use strict';
// A worker id has at most one live holder (issue 10): four `cluster` workers started from
// ONE snowflake config either get distinct worker ids, where the registry can give them
// (`local://`), or all but one reject with `LEAF_WORKER_ID_IN_USE` (`zookeeper://`,
// `mysql://`, `fixed:`). Never do two of them issue under the same worker id.
//
// Every worker reports how its `connect` went and keeps its claim until all four have
// reported; only then do the live ones issue. So each claimant tried while the others
// held, and the outcome does not depend on timing.
const test = require('node:test');
const assert = require('node:assert/strict');
const cluster = require('node:cluster');
const path = require('node:path');
const { ROOT, env, tmpdir, uniqueTag } = require('./helpers');

const { SnowflakeGenerator, decode } = require(ROOT);

const WORKERS = 4;
const IDS_PER_WORKER = 20000;

/** Forks one cluster worker per cache dir on `registry`; resolves with their outcomes
 * once every live one has issued and closed. */
async function claimAtOnce(registry, cacheDirs) {
  cluster.setupPrimary({ exec: path.join(__dirname, 'cluster_claimant.js') });
  const workers = cacheDirs.map((dir) => cluster.fork({ LEAFID_REGISTRY: registry, LEAFID_CACHE_DIR: dir }));
  const exited = workers.map((w) => new Promise((resolve) => w.once('exit', (code, signal) => resolve({ code, signal }))));
  const nextMessage = (w, i) =>
    Promise.race([
      new Promise((resolve) => w.once('message', resolve)),
      exited[i].then(({ code, signal }) => {
        throw new Error(`cluster worker ${w.process.pid} exited (${code ?? signal}) without reporting`);
      }),
    ]);
  try {
    const outcomes = await Promise.all(workers.map(nextMessage));
    // Go, all at once: the live ones issue side by side.
    const issued = workers.map((w, i) => (outcomes[i].workerId === undefined ? null : nextMessage(w, i)));
    for (const w of workers) w.send({ count: IDS_PER_WORKER });
    for (const [i, p] of issued.entries()) if (p) outcomes[i].ids = (await p).ids.map(BigInt);
    for (const [i, e] of exited.entries()) assert.equal((await e).code, 0, `worker ${workers[i].process.pid} failed`);
    return outcomes;
  } finally {
    for (const w of workers) if (!w.isDead()) w.kill('SIGKILL');
  }
}

function cacheDirs(shared) {
  if (shared) return Array(WORKERS).fill(tmpdir());
  return Array.from({ length: WORKERS }, () => tmpdir());
}

function assertNoDuplicates(outcomes) {
  const seen = new Set();
  let n = 0;
  for (const o of outcomes.filter((o) => o.ids)) {
    assert.equal(o.ids.length, IDS_PER_WORKER);
    for (const id of o.ids) {
      assert.equal(decode(id).workerId, o.workerId, 'every id carries its issuer\'s worker id');
      seen.add(id);
      n++;
    }
  }
  assert.equal(seen.size, n, `${n - seen.size} duplicate ids`);
}

/** Exactly one worker issues; each other one rejected with LEAF_WORKER_ID_IN_USE, whose
 * message names the identity (matches the RegExp `identity`), the holder where known
 * (its pid) and what to do. */
function assertOneLiveHolder(outcomes, identity) {
  const live = outcomes.filter((o) => o.workerId !== undefined);
  assert.equal(live.length, 1, `live holders of one identity: ${JSON.stringify(outcomes.map(({ ids, ...o }) => o))}`);
  for (const o of outcomes.filter((o) => o.workerId === undefined)) {
    assert.equal(o.code, 'LEAF_WORKER_ID_IN_USE', o.message);
    assert.match(o.message, identity, 'names the identity');
    // A claimant that comes between the holder's lock and its note of who it is learns
    // no pid; one that names a pid names the live holder's.
    const named = [...o.message.matchAll(/\bpid (\d+)/g)].map((m) => Number(m[1]));
    assert.ok(named.every((pid) => pid === live[0].pid), `names pids ${named}, the holder is ${live[0].pid}: ${o.message}`);
    assert.ok(o.message.includes('in use by'), o.message);
    assert.match(o.message, /zookeeper-recycle|local:\/\//, 'says which registry gives each process its own id');
  }
  assertNoDuplicates(outcomes);
}

for (const shared of [false, true]) {
  const dirs = shared ? 'one cache dir' : 'own cache dirs';

  test(`local registry: cluster workers of one config get distinct worker ids (${dirs})`, { timeout: 180000 }, async () => {
    const outcomes = await claimAtOnce(`local://${tmpdir()}/locks`, cacheDirs(shared));
    assert.deepEqual(outcomes.filter((o) => o.code), [], 'every worker is live');
    assert.equal(new Set(outcomes.map((o) => o.workerId)).size, WORKERS);
    assertNoDuplicates(outcomes);
  });

  test(`zookeeper registry: one identity, one live holder among cluster workers (${dirs})`, { timeout: 180000 }, async () => {
    // uniqueTag joins with `_`: zookeeper:// refuses a '-' in the name.
    const registry = `zookeeper://${env('LEAFID_ZK')}/${uniqueTag('holder')}?port=8080&ip=127.0.0.1`;
    assertOneLiveHolder(await claimAtOnce(registry, cacheDirs(shared)), /127\.0\.0\.1:8080/);
  });

  test(`mysql registry: one identity, one live holder among cluster workers (${dirs})`, { timeout: 180000 }, async () => {
    // A fixed identity per variant (rows of leaf_workerid_alloc are never reused, so a
    // fresh one per run would fill the table); no other test claims these ports.
    const port = shared ? 18092 : 18091;
    const url = env('LEAFID_MYSQL_URL');
    const registry = `${url}${url.includes('?') ? '&' : '?'}port=${port}&ip=127.0.0.1`;
    assertOneLiveHolder(await claimAtOnce(registry, cacheDirs(shared)), new RegExp(`127\\.0\\.0\\.1:${port}`));
  });

  test(`fixed worker id: one live holder among cluster workers (${dirs})`, { timeout: 180000 }, async () => {
    // An id no other test file uses: node --test may run files side by side, and the
    // holder of a fixed id is one per host.
    // The core writes the identity its own way (`fixed:71`, `fixed/71`): the word and the id.
    assertOneLiveHolder(await claimAtOnce('fixed:71', cacheDirs(shared)), /\bfixed\W71\b/);
  });
}

for (const shared of [false, true]) {
  test(`fixed worker id: a second generator in one process rejects with LEAF_WORKER_ID_IN_USE (${shared ? 'one cache dir' : 'own cache dirs'})`, async () => {
    const [firstDir, secondDir] = cacheDirs(shared);
    const first = await SnowflakeGenerator.connect({ registry: 'fixed:72', cacheDir: firstDir });
    try {
      await assert.rejects(SnowflakeGenerator.connect({ registry: 'fixed:72', cacheDir: secondDir }), (e) => {
        assert.equal(e.code, 'LEAF_WORKER_ID_IN_USE', e.message);
        assert.match(e.message, /\bfixed\W72\b/);
        return true;
      });
      assert.equal(decode(first.nextId()).workerId, 72, 'the first keeps issuing under its id');
    } finally {
      await first.close();
    }
    // close() lets the id go: the next generator of the config takes it.
    const again = await SnowflakeGenerator.connect({ registry: 'fixed:72', cacheDir: secondDir });
    assert.equal(decode(again.nextId()).workerId, 72);
    await again.close();
  });
}
