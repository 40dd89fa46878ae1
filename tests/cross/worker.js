// Node worker of the cross-language runs; the same command line as the Rust worker
// (core/examples/issue_ids.rs):
//   node worker.js segment URL TAG SECONDS OUT
//   node worker.js snowflake REGISTRY_URL SECONDS OUT
// and the same summary line and LEAFID_START_BARRIER handshake. With
// LEAFID_CLUSTER_WORKERS=K it is a `cluster` primary that forks K workers of this same
// script and command line, as a service started from one config would; worker i writes
// OUT.i and prints its own summary line.
'use strict';
const cluster = require('node:cluster');
const fs = require('node:fs');
const path = require('node:path');
const { SegmentGenerator, SnowflakeGenerator } = require(path.join(__dirname, '..', '..'));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// LEAFID_START_BARRIER: reports this worker's claim as made, then (when it holds a
// generator) waits for the runner's go.
async function barrier(wait) {
  const dir = process.env.LEAFID_START_BARRIER;
  if (!dir) return;
  fs.writeFileSync(path.join(dir, `${process.pid}.ready`), '');
  while (wait && !fs.existsSync(path.join(dir, 'go'))) await sleep(2);
}

async function main() {
  const args = process.argv.slice(2);
  const index = process.env.LEAFID_CLUSTER_INDEX;
  if (index !== undefined) args[args.length - 1] += `.${index}`;
  let next, seconds, out, gen;
  let workerId = null;
  out = args[args.length - 1];
  try {
    if (args[0] === 'segment') {
      [, , , seconds, out] = args;
      gen = await SegmentGenerator.connect(args[1]);
      const h = gen.tag(args[2]);
      next = () => h.nextId();
    } else {
      [, , seconds, out] = args;
      const options = { registry: args[1] };
      if (process.env.LEAFID_CACHE_DIR) options.cacheDir = process.env.LEAFID_CACHE_DIR;
      gen = await SnowflakeGenerator.connect(options);
      workerId = gen.workerId;
      next = () => gen.nextId();
    }
  } catch (e) {
    await barrier(false);
    console.log(JSON.stringify({ ids: 0, errors: 1, first_error: `${e.code}: ${e.message}`, worker_id: null, out }));
    return 1;
  }
  await barrier(true);
  const rate = Number(process.env.LEAFID_WORKER_RATE || 50000);
  const file = fs.openSync(out, 'w');
  const errLog = fs.openSync(`${out}.err`, 'w');
  let ids = 0;
  let errors = 0;
  let firstError = '';
  const start = Date.now();
  const deadline = start + Number(seconds) * 1000;
  while (Date.now() < deadline) {
    if (ids > (rate * (Date.now() - start)) / 1000) {
      await new Promise((r) => setTimeout(r, 1));
      continue;
    }
    const lines = [];
    for (let i = 0; i < 64; i++) {
      try {
        lines.push(next().toString());
      } catch (e) {
        errors++;
        // hrtime is CLOCK_MONOTONIC, shared by every process on the host.
        fs.writeSync(errLog, `${process.hrtime.bigint() / 1000000n} ${e.code}\n`);
        if (!firstError) firstError = `${e.code}: ${e.message}`;
        await new Promise((r) => setTimeout(r, 5));
        break;
      }
    }
    ids += lines.length;
    if (lines.length) fs.writeSync(file, lines.join('\n') + '\n');
  }
  fs.closeSync(file);
  fs.closeSync(errLog);
  await gen.close();
  console.log(JSON.stringify({ ids, errors, first_error: firstError, worker_id: workerId, out }));
  return 0;
}

// The primary exits 0 when every worker did.
function primary(workers) {
  let failed = 0;
  let left = workers;
  for (let i = 0; i < workers; i++) {
    cluster.fork({ LEAFID_CLUSTER_INDEX: String(i) }).on('exit', (code) => {
      if (code !== 0) failed++;
      if (--left === 0) process.exitCode = failed ? 1 : 0;
    });
  }
}

const workers = Number(process.env.LEAFID_CLUSTER_WORKERS || 0);
if (workers > 0 && cluster.isPrimary) {
  primary(workers);
} else {
  main().then((code) => {
    process.exitCode = code;
    // A cluster worker's channel to its primary keeps it alive: let go of it.
    if (cluster.isWorker) process.disconnect();
  });
}
