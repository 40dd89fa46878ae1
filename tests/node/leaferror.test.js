'use strict';
// Every error of the core is a `LeafError` (exported at run time, CJS and ESM) whose
// stack names the caller's file: a synchronous call's, and a Promise's rejection too
// (re-made where the caller awaits, issue 21), so an uncaught one in a `cluster` worker
// says where it came from.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, tmpdir } = require('./helpers');

const leafid = require(ROOT);
const { SegmentGenerator, SnowflakeGenerator, LeafError, isLeafError } = leafid;

/** A LeafError with `code` whose stack names this file. */
function leafErrorHere(code) {
  return (e) => {
    assert.ok(e instanceof LeafError, `a LeafError: ${e && e.stack}`);
    assert.ok(e instanceof Error);
    assert.equal(e.name, 'LeafError');
    assert.equal(e.code, code);
    assert.ok(isLeafError(e));
    assert.ok(e.stack.startsWith(`LeafError: ${e.message}`), e.stack);
    assert.ok(e.stack.includes(__filename), `the stack names the caller's file:\n${e.stack}`);
    return true;
  };
}

test('LeafError and isLeafError are exported at run time, CJS and ESM', () => {
  assert.equal(typeof LeafError, 'function');
  assert.equal(typeof isLeafError, 'function');
  const e = new LeafError('made by hand', 'LEAF_CLOSED');
  assert.ok(e instanceof Error && isLeafError(e));
  assert.equal(e.name, 'LeafError');
  assert.equal(e.code, 'LEAF_CLOSED');
  assert.equal(isLeafError(new Error('x')), false);
  assert.equal(isLeafError(Object.assign(new Error('x'), { code: 'LEAF_CLOSED' })), false);
  assert.equal(isLeafError('LEAF_CLOSED'), false);
  const code = `import leafid, { LeafError, isLeafError } from 'leafid';
    if (LeafError !== leafid.LeafError || typeof isLeafError !== 'function') process.exit(1);
    try { await leafid.SegmentGenerator.connect('oracle://x'); process.exit(2); }
    catch (e) { if (!(e instanceof LeafError) || !isLeafError(e)) process.exit(3); }`;
  const res = spawnSync(process.execPath, ['--input-type=module', '-e', code], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(res.status, 0, res.stderr);
});

test('synchronous calls throw a LeafError with the caller on the stack', async () => {
  const gen = await SegmentGenerator.connect('memory:');
  await gen.createTag('t', { step: 10 });
  assert.throws(() => gen.nextId('missing'), leafErrorHere('LEAF_TAG_NOT_FOUND'));
  assert.throws(() => gen.nextIds('missing', 2), leafErrorHere('LEAF_TAG_NOT_FOUND'));
  assert.throws(() => gen.nextIdString(''), leafErrorHere('LEAF_INVALID_TAG'));
  assert.throws(() => gen.tag('missing'), leafErrorHere('LEAF_TAG_NOT_FOUND'));
  const h = gen.tag('t');
  await gen.close();
  assert.throws(() => h.nextId(), leafErrorHere('LEAF_CLOSED'));
  assert.throws(() => h.nextIds(3), leafErrorHere('LEAF_CLOSED'));
});

test('a rejected Promise carries a LeafError whose stack names the awaiting caller', async () => {
  await assert.rejects(SegmentGenerator.connect('oracle://x/y'), leafErrorHere('LEAF_INVALID_URL'));
  await assert.rejects(
    SegmentGenerator.connect('mysql://root:x@127.0.0.1:1/leafid'),
    leafErrorHere('LEAF_STORE_UNAVAILABLE'),
  );
  await assert.rejects(SnowflakeGenerator.connect({ registry: 'etcd://x' }), leafErrorHere('LEAF_INVALID_URL'));
  const gen = await SegmentGenerator.connect('memory:');
  await gen.createTag('t');
  await assert.rejects(gen.createTag('t'), leafErrorHere('LEAF_TAG_EXISTS'));
  await assert.rejects(gen.nextIdAsync(''), leafErrorHere('LEAF_INVALID_TAG'));
  await assert.rejects(gen.nextIdsAsync('missing', 2), leafErrorHere('LEAF_TAG_NOT_FOUND'));
  const h = gen.tag('t');
  await gen.close();
  await assert.rejects(gen.refresh(), leafErrorHere('LEAF_CLOSED'));
  await assert.rejects(h.nextIdAsync(), leafErrorHere('LEAF_CLOSED'));
  const sf = await SnowflakeGenerator.connect({ registry: 'fixed:57', cacheDir: tmpdir() });
  await sf.close();
  await assert.rejects(sf.nextIdsAsync(2), leafErrorHere('LEAF_CLOSED'));
});

test('a rejection taken with .then, never awaited, names the calling function too', async () => {
  // Issue 31: V8 links only an awaiting caller's frames to a rejection; the frames are
  // taken at the call instead, so a `.then` chain's error says where the call was.
  const gen = await SegmentGenerator.connect('memory:');
  await gen.createTag('t');
  const seen = [];
  function callsWithThen(call) {
    return new Promise((resolve) => call().then(() => resolve(null), (e) => resolve(e)));
  }
  seen.push(await callsWithThen(() => gen.createTag('t')));
  seen.push(await callsWithThen(() => gen.nextIdsAsync('missing', 2)));
  seen.push(await callsWithThen(() => SegmentGenerator.connect('oracle://x/y')));
  await gen.close();
  seen.push(await callsWithThen(() => gen.nextIdAsync('t')));
  for (const e of seen) {
    assert.ok(leafErrorHere(e && e.code)(e));
    assert.match(e.stack, /at callsWithThen /, e.stack);
  }
});

test('a rejected argument check keeps its Node class and code, with the caller on the stack', async () => {
  const gen = await SegmentGenerator.connect('memory:');
  await assert.rejects(gen.nextIdsAsync('t', -1), (e) => {
    assert.ok(e instanceof RangeError && !isLeafError(e));
    assert.equal(e.code, 'ERR_OUT_OF_RANGE');
    assert.ok(e.stack.includes(__filename), e.stack);
    return true;
  });
  await assert.rejects(SegmentGenerator.connect(42), (e) => {
    assert.ok(e instanceof TypeError && !(e instanceof LeafError));
    assert.equal(e.code, 'ERR_INVALID_ARG_TYPE');
    assert.ok(e.stack.includes(__filename), e.stack);
    return true;
  });
  await gen.close();
});

test('an uncaught LEAF_WORKER_ID_IN_USE in a cluster worker names its call site', () => {
  const dir = tmpdir();
  const script = path.join(dir, 'claim_twice.js');
  const lines = [
    "'use strict';",
    "const cluster = require('node:cluster');",
    `const { SnowflakeGenerator } = require(${JSON.stringify(ROOT)});`,
    'if (cluster.isPrimary) {',
    "  cluster.fork().on('exit', (code) => process.exit(code === 0 ? 9 : 0));",
    '} else {',
    '  async function claimTwice() {',
    `    const registry = 'fixed:58', cacheDir = ${JSON.stringify(dir)};`,
    '    const held = await SnowflakeGenerator.connect({ registry, cacheDir });',
    '    await SnowflakeGenerator.connect({ registry, cacheDir }); // the call site',
    '  }',
    '  claimTwice();',
    '}',
  ];
  fs.writeFileSync(script, lines.join('\n'));
  const line = lines.findIndex((l) => l.includes('// the call site')) + 1;
  const res = spawnSync(process.execPath, [script], { encoding: 'utf8', timeout: 60000 });
  assert.equal(res.status, 0, `the worker failed: ${res.stdout}${res.stderr}`);
  assert.match(res.stderr, /LeafError: .*/);
  assert.match(res.stderr, /LEAF_WORKER_ID_IN_USE/);
  // The frames are taken at the call (`at claimTwice`), not linked by V8 at the `await`.
  assert.ok(res.stderr.includes(`at claimTwice (${script}:${line}:`), res.stderr);
});
