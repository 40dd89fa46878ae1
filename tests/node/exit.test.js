'use strict';
// After close() nothing keeps the event loop alive: a child process that connects,
// issues ids and closes exits by itself (no process.exit). The timeout only detects
// a hang; it asserts nothing about speed.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, env, tmpdir: tempDir, uniqueTag } = require('./helpers');

function runChild(body) {
  const script = `const leafid = require(${JSON.stringify(ROOT)});\n(async () => {\n${body}\n})().then(() => console.log('done'));`;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 30000 });
  assert.equal(r.signal, null, `the child did not exit by itself (killed by ${r.signal}); stderr: ${r.stderr}`);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), 'done');
}

test('the process exits by itself after a SQLite segment generator is closed', () => {
  runChild(`
    const gen = await leafid.SegmentGenerator.connect('sqlite://${path.join(tempDir(), 'ids.db')}');
    await gen.createTag('t', { start: 1, step: 10 });
    for (let i = 0; i < 100; i++) await gen.nextIdAsync('t');
    await gen.close();`);
});

test('the process exits by itself after a MySQL segment generator is closed', () => {
  const url = env('LEAFID_MYSQL_URL');
  const tag = uniqueTag('node-exit');
  runChild(`
    const gen = await leafid.SegmentGenerator.connect(${JSON.stringify(url)}, { createTable: true });
    await gen.createTag(${JSON.stringify(tag)}, { start: 1, step: 10 });
    await gen.nextIdsAsync(${JSON.stringify(tag)}, 25);
    await gen.close();`);
});

test('the process exits by itself after a snowflake generator (local registry) is closed', () => {
  runChild(`
    const gen = await leafid.SnowflakeGenerator.connect({ registry: 'local://${tempDir()}', cacheDir: '${tempDir()}' });
    gen.nextIds(1000);
    await gen.close();`);
});

test('the process exits by itself after a snowflake generator (fixed registry) is closed', () => {
  runChild(`
    const gen = await leafid.SnowflakeGenerator.connect({ registry: 'fixed:949', cacheDir: '${tempDir()}' });
    gen.nextId();
    await gen.close();`);
});
