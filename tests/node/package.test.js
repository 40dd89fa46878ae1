// The npm packaging: one platform package per napi target, named and versioned as the
// loader (bindings-node/binding.js) requires them, and no install script (npm 11 skips
// dependencies' install scripts; ours compiled with cargo inside node_modules).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { ROOT } = require('./helpers');

const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
const npmDir = path.join(ROOT, 'bindings-node', 'npm');
const loader = fs.readFileSync(path.join(ROOT, 'bindings-node', 'binding.js'), 'utf8');

test('leafid has no install script', () => {
  const scripts = Object.keys(pkg.scripts || {});
  assert.deepEqual(scripts.filter((s) => /^(pre|post)?install$/.test(s)), []);
});

test('every platform package is named, versioned and shipped as the loader requires it', () => {
  const platforms = fs.readdirSync(npmDir).sort();
  assert.equal(platforms.length, pkg.napi.targets.length, 'one bindings-node/npm/* per napi target');
  for (const platform of platforms) {
    const p = JSON.parse(fs.readFileSync(path.join(npmDir, platform, 'package.json'), 'utf8'));
    const binary = `leafid.${platform}.node`;
    assert.equal(p.name, `leafid-${platform}`);
    assert.equal(p.version, pkg.version, `${p.name}: run \`npx napi version\` after a version bump`);
    assert.equal(p.main, binary);
    assert.deepEqual(p.files, [binary]);
    assert.ok(p.os.length === 1 && p.cpu.length === 1, `${p.name} names its os and cpu`);
    assert.ok(loader.includes(`require('${p.name}')`), `binding.js loads ${p.name}`);
    assert.ok(loader.includes(`require('./${binary}')`), `binding.js loads ./${binary}`);
  }
});

test('the package exports types for require and for import', () => {
  const entry = pkg.exports['.'];
  for (const [condition, types] of [['require', 'index.d.ts'], ['import', 'index.d.mts']]) {
    assert.equal(entry[condition].types, `./bindings-node/${types}`);
    assert.ok(pkg.files.includes(`bindings-node/${types}`), `${types} is packed`);
  }
});
