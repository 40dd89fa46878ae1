// A `cluster` worker of one_holder.test.js, started from the options every worker
// shares (env LEAFID_REGISTRY, LEAFID_CACHE_DIR), as a service's workers would be. It
// reports how `connect` went, keeps its generator (its claim) until the primary says
// go, then, if live, issues `count` ids, closes and sends them back (decimal strings).
'use strict';
const path = require('node:path');
const { SnowflakeGenerator } = require(path.join(__dirname, '..', '..'));

async function main() {
  // Listening before connect: the go cannot arrive before this worker reported, but
  // the listener costs nothing and rules the race out.
  const go = new Promise((resolve) => process.once('message', resolve));
  let sf;
  try {
    sf = await SnowflakeGenerator.connect({
      registry: process.env.LEAFID_REGISTRY,
      cacheDir: process.env.LEAFID_CACHE_DIR,
    });
  } catch (e) {
    process.send({ pid: process.pid, code: e.code, message: e.message });
    await go;
    process.disconnect();
    return;
  }
  process.send({ pid: process.pid, workerId: sf.workerId });
  const { count } = await go;
  const ids = Array.from(sf.nextIds(count), String);
  await sf.close();
  process.send({ ids }, () => process.disconnect());
}

main();
