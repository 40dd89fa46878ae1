// worker_threads and cluster: every thread or worker its own generator (napi objects
// cannot cross threads), all on one store or lock directory; not one duplicate.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { Worker } = require('node:worker_threads');
const { spawn } = require('node:child_process');
const leafid = require('../..');
const { tmpdir, mysqlUrl, uniqueTag } = require('./helpers');

const PACKAGE = require.resolve('../..');

function runThread(kind, target, n, cacheDir) {
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    const leafid = require(${JSON.stringify(PACKAGE)});
    (async () => {
      const { kind, target, n, cacheDir } = workerData;
      let next, gen;
      if (kind === 'segment') {
        const [url, tag] = target.split('#');
        gen = await leafid.SegmentGenerator.connect(url);
        const h = gen.tag(tag);
        // nextId never waits: past a spent segment, wait for the refill off the loop.
        next = async () => {
          try { return h.nextId(); } catch (e) {
            if (e.code !== 'LEAF_SEGMENTS_EXHAUSTED') throw e;
            return h.nextIdAsync();
          }
        };
      } else {
        gen = await leafid.SnowflakeGenerator.connect({ registry: target, cacheDir });
        next = () => gen.nextId();
      }
      const ids = new BigInt64Array(n);
      for (let i = 0; i < n; i++) ids[i] = await next();
      await gen.close();
      parentPort.postMessage(ids);
    })();`;
  return new Promise((resolve, reject) => {
    const w = new Worker(code, { eval: true, workerData: { kind, target, n, cacheDir } });
    w.once('message', resolve);
    w.once('error', reject);
  });
}

function assertUnique(batches, total) {
  const all = new Set();
  for (const ids of batches) {
    for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], 'increasing per thread');
    for (const id of ids) all.add(id);
  }
  assert.equal(all.size, total);
}

test('worker_threads on one MySQL tag never share an id', async () => {
  const url = mysqlUrl();
  const tag = uniqueTag('threads');
  const gen = await leafid.SegmentGenerator.connect(url, { createTable: true });
  await gen.createTag(tag, { step: 200 });
  await gen.close();
  const batches = await Promise.all([0, 1, 2, 3].map(() => runThread('segment', `${url}#${tag}`, 20000)));
  assertUnique(batches, 80000);
});

test('worker_threads with the local registry each hold their own worker id', async () => {
  const d = tmpdir();
  const batches = await Promise.all([0, 1, 2, 3].map((i) => runThread('snowflake', `local://${d}/locks`, 20000, `${d}/c${i}`)));
  assertUnique(batches, 80000);
});

test('cluster workers never share an id', async () => {
  const d = tmpdir();
  const url = `sqlite://${d}/ids.db`;
  const gen = await leafid.SegmentGenerator.connect(url);
  await gen.createTag('c', { step: 300 });
  await gen.close();
  const code = `
    const cluster = require('node:cluster');
    const leafid = require(${JSON.stringify(PACKAGE)});
    if (cluster.isPrimary) {
      const out = [];
      for (let i = 0; i < 4; i++) cluster.fork().on('message', (m) => { out.push(m); if (out.length === 4) { for (const w of Object.values(cluster.workers)) w.kill(); process.stdout.write(JSON.stringify(out)); } });
    } else {
      (async () => {
        const seg = await leafid.SegmentGenerator.connect(${JSON.stringify(url)});
        const sf = await leafid.SnowflakeGenerator.connect({ registry: 'local://${d}/locks', cacheDir: '${d}/w' + process.pid });
        const h = seg.tag('c');
        const ids = [];
        // nextId never waits: past a spent segment, wait for the refill off the loop.
        const next = async () => { try { return h.nextId(); } catch (e) { if (e.code !== 'LEAF_SEGMENTS_EXHAUSTED') throw e; return h.nextIdAsync(); } };
        for (let i = 0; i < 10000; i++) { ids.push(String(await next())); ids.push(String(sf.nextId())); }
        process.send(ids);
      })();
    }`;
  // cluster.fork() re-runs the main script, so the program lives in a file.
  const script = path.join(d, 'cluster.js');
  require('node:fs').writeFileSync(script, code);
  const child = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout.on('data', (b) => { stdout += b; });
  const exit = await new Promise((resolve) => child.on('exit', resolve));
  assert.equal(exit, 0);
  const batches = JSON.parse(stdout);
  const all = new Set(batches.flat());
  assert.equal(all.size, 4 * 20000);
});
