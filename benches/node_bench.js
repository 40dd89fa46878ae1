// leafid from Node against a bigint counter (the floor: what creating one BigInt costs)
// and the id generators Node services install today, all in one run:
//
//   npm install && npm run build               # repository root: builds leafid (release)
//   (cd benches && npm install)                # the peers, bench-only dependencies
//   node benches/node_bench.js                 # LEAFID_BENCH_MS=1000 per figure
//
// Each candidate runs in its own tight loop whose last result is kept, so no call can be
// optimised away; a figure is the median of 5 rounds after a warm-up. Markdown goes to
// stdout (pasted into benches/README.md).
'use strict';
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const leafid = require(path.join(__dirname, '..'));
const peer = (name) => require(require.resolve(name, { paths: [__dirname] }));

const ROUND_MS = Number(process.env.LEAFID_BENCH_MS || 1000) / 5;
let sink;

// ns per call: median of 5 rounds of ROUND_MS each.
function perCall(fn) {
  for (let i = 0; i < 200_000; i++) sink = fn();
  const rounds = [];
  for (let r = 0; r < 5; r++) {
    let n = 0;
    const start = process.hrtime.bigint();
    const until = start + BigInt(Math.round(ROUND_MS * 1e6));
    let now = start;
    while (now < until) {
      for (let i = 0; i < 10_000; i++) sink = fn();
      n += 10_000;
      now = process.hrtime.bigint();
    }
    rounds.push(Number(now - start) / n);
  }
  return rounds.sort((a, b) => a - b)[2];
}

// ns per id of a batch call returning `size` ids: median of 5 rounds.
function perIdInBatch(fn, size) {
  for (let i = 0; i < 3; i++) sink = fn(size);
  const rounds = [];
  for (let r = 0; r < 5; r++) {
    let n = 0;
    const start = process.hrtime.bigint();
    const until = start + BigInt(Math.round(ROUND_MS * 1e6));
    let now = start;
    do {
      sink = fn(size);
      if (sink.length !== size) throw new Error('short batch');
      n += size;
      now = process.hrtime.bigint();
    } while (now < until);
    rounds.push(Number(now - start) / n);
  }
  return rounds.sort((a, b) => a - b)[2];
}

// 1..=n as a BigInt64Array, built once per size.
const idArrays = new Map();
function manyIds(n) {
  if (!idArrays.has(n)) {
    const a = new BigInt64Array(n);
    for (let i = 0; i < n; i++) a[i] = BigInt(i + 1);
    idArrays.set(n, a);
  }
  return idArrays.get(n);
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leafid-bench-'));
  // A step large enough that the loops measure the hot path, not refills.
  const seg = await leafid.SegmentGenerator.connect(`sqlite://${dir}/ids.db`, { maxStep: 1_000_000_000 });
  await seg.createTag('bench', { start: 1, step: 500_000_000 });
  const handle = seg.tag('bench');
  // Leaf's layout allows 4096 ids per ms, so a loop faster than ~244 ns per id waits
  // for the next millisecond: that row measures the layout. The 41 + 1 + 21 layout
  // (2 M ids per ms) shows the call itself.
  const sf = await leafid.SnowflakeGenerator.connect({ registry: 'fixed:1', cacheDir: dir });
  // A worker id has one holder per host: the second generator takes another id.
  const wide = await leafid.SnowflakeGenerator.connect({
    registry: 'fixed:0',
    cacheDir: `${dir}/wide`,
    layout: { timestampBits: 41, workerBits: 1, sequenceBits: 21, epochMs: leafid.LEAF_EPOCH },
  });

  const { v7: uuidv7 } = peer('uuid');
  const { Snowflake: Sapphire } = peer('@sapphire/snowflake');
  const sapphire = new Sapphire(new Date('2020-01-01T00:00:00Z'));
  const { Snowflake: NodejsSnowflake } = peer('nodejs-snowflake');
  const nodejsSnowflake = new NodejsSnowflake({ instance_id: 1 });
  const FlakeId = peer('flake-idgen');
  const flake = new FlakeId({ id: 1 });

  // Opaque and string ids (issue 15): goal ≤ 2× crypto.randomUUID() per id, and
  // nextIdString within 2× of nextId.
  const cipher = new leafid.IdCipher(Buffer.from([...Array(16).keys()]));
  const opaque = cipher.encrypt(123456789n);
  const b62 = leafid.encodeBase62(123456789n);
  let plain = 0n;

  let counter = 0n;
  const rows = [
    ['floor: bigint counter (`c += 1n`)', () => (counter += 1n)],
    ['leafid segment `handle.nextId()`', () => handle.nextId()],
    ["leafid segment `gen.nextId('bench')`", () => seg.nextId('bench')],
    ['leafid snowflake `sf.nextId()` (41+1+21)', () => wide.nextId()],
    ['leafid snowflake `sf.nextId()` (Leaf 41+10+12, ≤ 4096/ms)', () => sf.nextId()],
    ['leafid segment `handle.nextIdString()`', () => handle.nextIdString()],
    ['leafid snowflake `sf.nextIdString()` (41+1+21)', () => wide.nextIdString()],
    ['floor: `String(bigint)` of an id', () => String(2124926727518965824n + (counter += 1n))],
    ['leafid `cipher.encrypt(id)` (FF1/AES-128)', () => cipher.encrypt((plain += 1n))],
    ['leafid `cipher.decrypt(id)` (FF1/AES-128)', () => cipher.decrypt(opaque)],
    ['leafid `encodeBase62(id)`', () => leafid.encodeBase62((plain += 1n))],
    ['leafid `decodeBase62(s)`', () => leafid.decodeBase62(b62)],
    ['`crypto.randomUUID()`', () => crypto.randomUUID()],
    ['`uuid` v7()', () => uuidv7()],
    ['`@sapphire/snowflake` generate()', () => sapphire.generate()],
    ['`nodejs-snowflake` getUniqueID()', () => nodejsSnowflake.getUniqueID()],
    // Throws past 4096 ids per ms; spinning to the next ms is what a caller must do.
    ['`flake-idgen` next() (≤ 4096/ms)', () => {
      for (;;) {
        try {
          return flake.next();
        } catch {
          // sequence spent for this millisecond
        }
      }
    }],
  ];
  const results = rows.map(([name, fn]) => [name, perCall(fn)]);
  const floor = results[0][1];
  const leaf = results[1][1];

  const out = [];
  out.push(`node ${process.version}, ${os.cpus()[0].model}, ${os.cpus().length} cores, ${ROUND_MS * 5} ms per figure`);
  out.push('');
  out.push('| call | ns per id | ids/s | vs floor | ÷ `handle.nextId()` |');
  out.push('|---|---|---|---|---|');
  for (const [name, ns] of results) {
    out.push(`| ${name} | ${ns.toFixed(1)} | ${(1e3 / ns).toFixed(1)} M | ${(ns / floor).toFixed(2)}× | ${(ns / leaf).toFixed(2)}× |`);
  }

  const batches = [
    ['leafid segment `handle.nextIds(1_000_000)`', (n) => handle.nextIds(n)],
    ["leafid segment `gen.nextIds('bench', 1_000_000)`", (n) => seg.nextIds('bench', n)],
    ['leafid snowflake `sf.nextIds(1_000_000)` (41+1+21)', (n) => wide.nextIds(n)],
    ['leafid `cipher.encryptMany(BigInt64Array(1_000_000))`', (n) => cipher.encryptMany(manyIds(n))],
  ];
  out.push('');
  out.push('| batch | ns per id | ids/s |');
  out.push('|---|---|---|');
  for (const [name, fn] of batches) {
    const ns = perIdInBatch(fn, 1_000_000);
    out.push(`| ${name} | ${ns.toFixed(2)} | ${(1e3 / ns).toFixed(0)} M |`);
  }
  process.stdout.write(out.join('\n') + '\n');

  await Promise.all([seg.close(), sf.close(), wide.close()]);
  fs.rmSync(dir, { recursive: true, force: true });
  if (sink === undefined) throw new Error('no result');
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
