// SnowflakeGenerator, decode and layouts from Node.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const leafid = require('../..');
const { tmpdir } = require('./helpers');

test('ids increase and decode to this worker', async () => {
  const d = tmpdir();
  const sf = await leafid.SnowflakeGenerator.connect({ registry: `local://${d}/locks`, cacheDir: d });
  const ids = [...sf.nextIds(5000), sf.nextId()];
  for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1]);
  const parts = leafid.decode(ids[0]);
  assert.equal(parts.workerId, sf.workerId);
  assert.ok(parts.timestampMs > Date.UTC(2026, 0, 1));
  assert.deepEqual(sf.layout, leafid.leafLayout());
  assert.equal(leafid.LEAF_EPOCH, 1288834974657);
  assert.match(sf.nextIdString(), /^\d+$/);
  await sf.close();
  assert.throws(() => sf.nextId(), { code: 'LEAF_CLOSED' });
});

test('fixed worker id with a custom layout; bad configuration is refused', async () => {
  const d = tmpdir();
  const layout = { timestampBits: 41, workerBits: 5, sequenceBits: 17, epochMs: leafid.LEAF_EPOCH };
  const sf = await leafid.SnowflakeGenerator.connect({ registry: 'fixed:7', layout, cacheDir: d });
  assert.equal(leafid.decode(sf.nextId(), layout).workerId, 7);
  await sf.close();
  await assert.rejects(leafid.SnowflakeGenerator.connect({ registry: 'fixed:5000', cacheDir: d }), { code: 'LEAF_WORKER_ID_OUT_OF_RANGE' });
  await assert.rejects(leafid.SnowflakeGenerator.connect({ registry: 'etcd://x', cacheDir: d }), { code: 'LEAF_INVALID_URL' });
  await assert.rejects(
    leafid.SnowflakeGenerator.connect({ registry: 'fixed:1', cacheDir: d, layout: { ...layout, sequenceBits: 1 } }),
    { code: 'LEAF_INVALID_CONFIG' },
  );
});

function holdWorker(registry, cacheDir) {
  const code = `
    const leafid = require(${JSON.stringify(require.resolve('../..'))});
    leafid.SnowflakeGenerator.connect({ registry: ${JSON.stringify(registry)}, cacheDir: ${JSON.stringify(cacheDir)} })
      .then((sf) => { console.log(sf.workerId); process.stdin.on('data', () => {}); process.stdin.on('end', () => sf.close()); });`;
  const child = spawn(process.execPath, ['-e', code], { stdio: ['pipe', 'pipe', 'inherit'] });
  const id = new Promise((resolve) => child.stdout.once('data', (b) => resolve(Number(String(b).trim()))));
  return { child, id };
}

test('close() releases the local worker id for another process', async () => {
  const d = tmpdir();
  const registry = `local://${d}/locks`;
  const first = await leafid.SnowflakeGenerator.connect({ registry, cacheDir: `${d}/a` });
  const other = holdWorker(registry, `${d}/b`);
  assert.notEqual(await other.id, first.workerId);
  const mine = first.workerId;
  await first.close();
  const third = holdWorker(registry, `${d}/c`);
  assert.equal(await third.id, mine);
  other.child.stdin.end();
  third.child.stdin.end();
});

test('the process exits by itself after close()', async () => {
  const d = tmpdir();
  const code = `
    const leafid = require(${JSON.stringify(require.resolve('../..'))});
    (async () => {
      const gen = await leafid.SegmentGenerator.connect('sqlite://${d}/ids.db');
      await gen.createTag('t');
      gen.nextId('t');
      const sf = await leafid.SnowflakeGenerator.connect({ registry: 'local://${d}/locks', cacheDir: '${d}' });
      sf.nextId();
      await await gen.close(); await sf.close();
    })();`;
  const child = spawn(process.execPath, ['-e', code], { stdio: 'inherit' });
  const exited = await Promise.race([
    new Promise((resolve) => child.on('exit', (c) => resolve(c))),
    new Promise((resolve) => setTimeout(() => resolve('hung'), 15000)),
  ]);
  if (exited === 'hung') child.kill('SIGKILL');
  assert.equal(exited, 0);
});
