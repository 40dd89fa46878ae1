// What an `await` of an async twin costs when the id is at hand (issue 31), against the
// synchronous call and a bare `await` of a resolved promise, in one async function and
// one run:
//
//   npm install && npm run build               # repository root: builds leafid (release)
//   node benches/async_at_hand.js
//
// Each figure: ns per call over a loop of N calls, best of 5 repeats. Markdown to stdout.
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const leafid = require(path.join(__dirname, '..'));

const N = 100_000;
const REPEATS = 5;
let sink;

async function perAwait(make) {
  let best = Infinity;
  for (let r = 0; r < REPEATS; r++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < N; i++) sink = await make();
    best = Math.min(best, Number(process.hrtime.bigint() - start) / N);
  }
  return best;
}

function perCall(fn) {
  let best = Infinity;
  for (let r = 0; r < REPEATS; r++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < N; i++) sink = fn();
    best = Math.min(best, Number(process.hrtime.bigint() - start) / N);
  }
  return best;
}

async function main() {
  const resolved = Promise.resolve(1n);
  const rows = [
    ['floor: `await` of one resolved promise', await perAwait(() => resolved)],
    ['`await Promise.resolve(id)`', await perAwait(() => Promise.resolve(1n))],
  ];
  const gen = await leafid.SegmentGenerator.connect('memory:');
  await gen.createTag('bench', { step: 10_000_000 });
  const handle = gen.tag('bench');
  await handle.nextIdAsync();
  rows.push(
    ['segment `handle.nextId()` (sync)', perCall(() => handle.nextId())],
    ['segment `await handle.nextIdAsync()`', await perAwait(() => handle.nextIdAsync())],
    ['segment `await gen.nextIdAsync(tag)`', await perAwait(() => gen.nextIdAsync('bench'))],
  );
  await gen.close();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leafid-bench-'));
  const sf = await leafid.SnowflakeGenerator.connect('fixed:734', { cacheDir: dir });
  await sf.nextIdAsync();
  rows.push(
    ['snowflake `sf.nextId()` (sync)', perCall(() => sf.nextId())],
    ['snowflake `await sf.nextIdAsync()`', await perAwait(() => sf.nextIdAsync())],
  );
  await sf.close();
  fs.rmSync(dir, { recursive: true, force: true });
  const floor = rows[0][1];
  console.log(`Node ${process.version}, N = ${N}, best of ${REPEATS}\n`);
  console.log('| what | per call | vs floor |\n|---|---|---|');
  for (const [name, ns] of rows) {
    console.log(`| ${name} | ${(ns / 1000).toFixed(3)} µs | ${(ns / floor).toFixed(1)}× |`);
  }
}

main();
