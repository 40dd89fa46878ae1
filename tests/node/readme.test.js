// The README's TypeScript examples pass `tsc --noEmit --strict`, and `import` works.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const root = path.join(__dirname, '..', '..');

test('README examples type-check under tsc --strict', () => {
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  const res = spawnSync(process.execPath, [tsc, '-p', path.join(__dirname, 'tsconfig.json')], { encoding: 'utf8' });
  assert.equal(res.status, 0, res.stdout + res.stderr);
});

test('import from an ES module works', () => {
  const code = `import { SegmentGenerator, decode } from 'leafid'; import leafid from 'leafid';
    if (typeof SegmentGenerator.connect !== 'function' || typeof decode !== 'function' || !leafid.SnowflakeGenerator) process.exit(1);`;
  const res = spawnSync(process.execPath, ['--input-type=module', '-e', code], { cwd: root, encoding: 'utf8' });
  assert.equal(res.status, 0, res.stderr);
});
