// Node worker of the cross-language runs; the same command line as the Rust worker
// (core/examples/issue_ids.rs):
//   node worker.js segment URL TAG SECONDS OUT
//   node worker.js snowflake REGISTRY_URL SECONDS OUT
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { SegmentGenerator, SnowflakeGenerator } = require(path.join(__dirname, '..', '..'));

async function main() {
  const args = process.argv.slice(2);
  let next, seconds, out, gen;
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
      next = () => gen.nextId();
    }
  } catch (e) {
    console.log(JSON.stringify({ ids: 0, errors: 1, first_error: `${e.code}: ${e.message}` }));
    return 1;
  }
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
  gen.close();
  console.log(JSON.stringify({ ids, errors, first_error: firstError }));
  return 0;
}

main().then((code) => {
  process.exitCode = code;
});
