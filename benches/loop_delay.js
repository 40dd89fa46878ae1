// Event-loop delay while a small workload calls `nextId` every 2 ms through each fault
// of issue 12: the store (MariaDB) blackholed or refused, the snowflake registry
// (`mysql`, `zookeeper`) blackholed, and garbage collection of a snowflake generator
// whose registry is blackholed. Servers are reached through a loopback proxy
// (tests/node/proxy.js) that forwards, refuses or blackholes.
//
//   source .services/env (or scripts/services.sh)   # LEAFID_MYSQL_URL, LEAFID_ZK
//   npm install && npm run build                    # builds leafid (release)
//   node benches/loop_delay.js                      # LEAFID_MODULE=dir to measure another build,
//                                                   # LEAFID_SCENARIO=text to run only matching rows
//
// Each scenario runs in its own child process (a hung loop cannot hang the run; past
// LEAFID_FAULT_LIMIT_MS it is killed and reported as hung); the proxy runs in the parent,
// so a child whose loop is blocked cannot stall its own proxy. Each prints one row:
// max and p99 of `perf_hooks.monitorEventLoopDelay` (1 ms resolution) from the start of
// the fault to the end of the recovery, and how many `nextId` calls returned or threw.
'use strict';
const { execFileSync, spawn } = require('node:child_process');
const os = require('node:os');
const path = require('node:path');
const fs = require('node:fs');
const { monitorEventLoopDelay } = require('node:perf_hooks');
const { Proxy, throughProxy, hostPort } = require('../tests/node/proxy');

const MODULE = path.resolve(process.env.LEAFID_MODULE || path.join(__dirname, '..'));
const FAULT_MS = Number(process.env.LEAFID_FAULT_MS || 8000);
const RECOVER_MS = 3000;
const LIMIT_MS = Number(process.env.LEAFID_FAULT_LIMIT_MS || 60000);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const unique = (name) => `bench_${name}_${process.pid}_${Date.now()}`;

// Each scenario: the server its proxy fronts, and the workload run in the child.
const mysqlTarget = () => hostPort(process.env.LEAFID_MYSQL_URL);
const zkTarget = () => process.env.LEAFID_ZK.split(':');
const SCENARIOS = {
  'none (floor: the same workload, no fault)': [mysqlTarget, (port) => segment(port, 'forward')],
  'store blackholed (segment, MySQL)': [mysqlTarget, (port) => segment(port, 'blackhole')],
  'store refused (segment, MySQL)': [mysqlTarget, (port) => segment(port, 'refuse')],
  'registry blackholed (snowflake, mysql)': [mysqlTarget, (port) => snowflake('mysql', port)],
  'registry blackholed (snowflake, zookeeper)': [zkTarget, (port) => snowflake('zookeeper', port)],
  'GC of a generator, registry blackholed (zookeeper)': [zkTarget, (port) => collected(port)],
};

// Asks the parent to switch the proxy to `mode` ('blackhole', 'refuse', 'forward').
function proxy(mode) {
  return new Promise((resolve) => {
    process.once('message', resolve);
    process.send({ mode });
  });
}

// Calls `next` every 2 ms through the fault; returns the loop-delay figures.
async function measure(next, fault, recover) {
  let ok = 0;
  let failed = 0;
  const timer = setInterval(() => {
    try {
      next();
      ok++;
    } catch {
      failed++;
    }
  }, 2);
  await sleep(500);
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  await fault();
  await sleep(FAULT_MS);
  await recover();
  await sleep(RECOVER_MS);
  h.disable();
  clearInterval(timer);
  return { maxMs: h.max / 1e6, p99Ms: h.percentile(99) / 1e6, ok, failed };
}

async function segment(port, fault) {
  const { SegmentGenerator } = require(MODULE);
  const url = throughProxy(process.env.LEAFID_MYSQL_URL, { port });
  const gen = await SegmentGenerator.connect(url, { createTable: true });
  const tag = unique('seg');
  // A small step: the buffered segments run out early in the fault.
  await gen.createTag(tag, { step: 50 });
  await (gen.nextIdAsync ? gen.nextIdAsync(tag) : sleep(200));
  const out = await measure(() => gen.nextId(tag), () => proxy(fault), () => proxy('forward'));
  gen.close();
  return out;
}

// The registry URL of `kind` through the proxy on `port`, with an identity of this run.
function registryUrl(kind, port) {
  const identity = 20000 + (process.pid % 20000);
  if (kind === 'mysql') {
    const url = throughProxy(process.env.LEAFID_MYSQL_URL, { port });
    return `${url}${url.includes('?') ? '&' : '?'}port=${identity}&ip=10.9.${process.pid % 250}.1`;
  }
  return `zookeeper://127.0.0.1:${port}/${unique('sf')}?port=${identity}`;
}

async function snowflake(kind, port) {
  const { SnowflakeGenerator } = require(MODULE);
  const cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), 'leafid-loop-'));
  const sf = await SnowflakeGenerator.connect({ registry: registryUrl(kind, port), cacheDir, heartbeatMs: 1000 });
  return measure(() => sf.nextId(), () => proxy('blackhole'), () => proxy('forward'));
}

async function collected(port) {
  const { SnowflakeGenerator } = require(MODULE);
  const cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), 'leafid-loop-'));
  let sf = await SnowflakeGenerator.connect({ registry: registryUrl('zookeeper', port), cacheDir, heartbeatMs: 1000 });
  const keep = await SnowflakeGenerator.connect({ registry: `fixed:${950 + (process.pid % 40)}`, cacheDir });
  return measure(() => keep.nextId(), async () => {
    await proxy('blackhole');
    sf = null; // eslint-disable-line no-unused-vars
    for (let i = 0; i < 5; i++) {
      global.gc();
      await sleep(100);
    }
  }, () => proxy('forward'));
}

async function runChild(name) {
  const p = await new Proxy(...SCENARIOS[name][0]()).start();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--expose-gc', __filename, name, String(p.port)],
      { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
    child.on('message', async ({ mode }) => {
      await p[mode]();
      child.connected && child.send({ done: mode });
    });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    const kill = setTimeout(() => child.kill('SIGKILL'), LIMIT_MS);
    child.on('exit', async (code, signal) => {
      clearTimeout(kill);
      await p.close();
      try {
        resolve(JSON.parse(out));
      } catch {
        resolve(signal === 'SIGKILL' ? { hung: true } : { exitCode: code });
      }
    });
  });
}

async function main() {
  const name = process.argv[2];
  if (name) {
    const result = await SCENARIOS[name][1](Number(process.argv[3]));
    process.stdout.write(JSON.stringify(result));
    process.exit(0);
  }
  const commit = (() => {
    try {
      return execFileSync('git', ['-C', MODULE, 'rev-parse', '--short', 'HEAD'], { stdio: 'pipe' }).toString().trim();
    } catch {
      return 'not a git checkout';
    }
  })();
  console.log(`node ${process.version}, ${os.cpus().length} cores, module ${MODULE} (${commit}), fault ${FAULT_MS} ms + recovery ${RECOVER_MS} ms, nextId every 2 ms\n`);
  console.log('| fault | max loop delay (ms) | p99 (ms) | nextId ok | nextId threw |');
  console.log('|---|---|---|---|---|');
  const only = process.env.LEAFID_SCENARIO || '';
  for (const scenario of Object.keys(SCENARIOS).filter((name) => name.includes(only))) {
    const r = await runChild(scenario);
    if (r.hung) {
      console.log(`| ${scenario} | hung > ${LIMIT_MS} (killed) | – | – | – |`);
    } else if (r.exitCode !== undefined) {
      console.log(`| ${scenario} | failed (exit ${r.exitCode}, see stderr) | – | – | – |`);
    } else {
      console.log(`| ${scenario} | ${r.maxMs.toFixed(1)} | ${r.p99Ms.toFixed(1)} | ${r.ok} | ${r.failed} |`);
    }
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
