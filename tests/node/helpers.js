// Shared helpers of the Node tests: temp dirs, service URLs, unique tag names.
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

function tmpdir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'leafid-node-'));
}

function mysqlUrl() {
  const url = process.env.LEAFID_MYSQL_URL;
  if (!url) throw new Error('LEAFID_MYSQL_URL is not set: run `eval "$(scripts/services.sh start)"`');
  return url;
}

// Joined with `_`, not `-`: the result is also used as a `zookeeper://` name, which
// refuses a `-` (Java Leaf splits node names on it).
function uniqueTag(name) {
  return `node_${name}_${process.pid}_${process.hrtime.bigint()}`;
}

module.exports = { tmpdir, mysqlUrl, uniqueTag };

/** A service variable from the environment, or a clear failure (never a silent pass). */
function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run \`eval "$(scripts/services.sh start)"\``);
  return v;
}

/** Asserts every id of the lists (bigints) appears once; returns how many there were. */
function assertUnique(assert, ...lists) {
  const seen = new Set();
  let n = 0;
  for (const list of lists) {
    for (const id of list) {
      assert.equal(typeof id, 'bigint');
      seen.add(id);
      n++;
    }
  }
  assert.equal(seen.size, n, `${n - seen.size} duplicate ids`);
  return n;
}

/** Skips a registry test while the core lacks that registry (reported as skipped). */
function skipIfNotBuilt(t, err) {
  if (err && err.code === 'LEAF_INVALID_CONFIG' && /not part of this build yet/.test(err.message)) {
    t.skip(`core: ${err.message}`);
    return true;
  }
  return false;
}

/**
 * `sync()` (a `nextId`), or when no id is at hand (`LEAF_SEGMENTS_EXHAUSTED`: a refill is
 * under way) the awaited `wait()` (its `nextIdAsync` twin): how a caller issues through
 * refills without ever blocking the event loop.
 */
async function orWait(sync, wait) {
  try {
    return sync();
  } catch (e) {
    if (e.code !== 'LEAF_SEGMENTS_EXHAUSTED') throw e;
    return wait();
  }
}

module.exports.ROOT = path.resolve(__dirname, '..', '..');
module.exports.orWait = orWait;
module.exports.env = env;
module.exports.assertUnique = assertUnique;
module.exports.skipIfNotBuilt = skipIfNotBuilt;
