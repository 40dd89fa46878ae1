// The issue-21 types (LeafError, isLeafError, connect(url, options?), bigint stats,
// unknown options refused) pass `tsc --noEmit --strict`, for require and for import.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT } = require('./helpers');

test('types_check.ts and types_check.mts type-check under tsc --strict', () => {
  const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const res = spawnSync(process.execPath, [tsc, '-p', path.join(__dirname, 'tsconfig.types.json')], { encoding: 'utf8' });
  assert.equal(res.status, 0, res.stdout + res.stderr);
});
