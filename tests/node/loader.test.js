'use strict';
// Where no binary loads, the error says so in leafid's words (issue 21): a platform with
// no prebuilt package (macOS, Alpine, ARM today) is named with the list of those that
// have one and how to build from source, instead of napi's generated message (which
// blames npm and names a `leafid-wasm32-wasi` package that does not exist). The missing
// binary is simulated: the loader is copied to a directory without one, and the
// platform is overridden before it runs.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, tmpdir } = require('./helpers');

/** What `require('leafid')` throws on `platform`/`arch` with no binary at hand. */
function loadWithout(platform, arch) {
  const dir = path.join(tmpdir(), 'bindings-node');
  fs.mkdirSync(dir);
  for (const f of ['index.js', 'binding.js']) fs.copyFileSync(path.join(ROOT, 'bindings-node', f), path.join(dir, f));
  const preload = path.join(dir, '..', 'platform.js');
  fs.writeFileSync(
    preload,
    (platform ? `Object.defineProperty(process, 'platform', { value: ${JSON.stringify(platform)} });\n` : '') +
      (arch ? `Object.defineProperty(process, 'arch', { value: ${JSON.stringify(arch)} });\n` : ''),
  );
  const script = `try { require(${JSON.stringify(dir)}); console.log('{}'); }
    catch (e) { console.log(JSON.stringify({ message: e.message, code: e.code, platform: e.platform, cause: String(e.cause) })); }`;
  const env = { ...process.env };
  delete env.NAPI_RS_NATIVE_LIBRARY_PATH;
  const res = spawnSync(process.execPath, ['-r', preload, '-e', script], { cwd: dir, env, encoding: 'utf8' });
  assert.equal(res.status, 0, res.stderr);
  return JSON.parse(res.stdout);
}

function assertLeafidWords(e) {
  assert.equal(e.code, 'ERR_LEAFID_NO_BINARY', JSON.stringify(e));
  assert.ok(!e.message.includes('wasm32-wasi'), e.message);
  assert.ok(!/npm has a bug/.test(e.message), e.message);
  assert.ok(e.message.includes('cargo'), `says how to build from source: ${e.message}`);
  assert.ok(e.message.includes('linux-x64-gnu'), `lists the prebuilt platforms: ${e.message}`);
  assert.match(e.cause, /Cannot find native binding/, 'napi\'s error is kept as the cause');
}

for (const [platform, arch, name] of [
  ['darwin', 'arm64', 'darwin-arm64'],
  ['darwin', 'x64', 'darwin-x64'],
  ['linux', 'arm64', 'linux-arm64-gnu'],
  ['win32', 'x64', 'win32-x64-msvc'],
]) {
  test(`${name}: no prebuilt binary for this platform yet, named, with what to do`, () => {
    const e = loadWithout(platform, arch);
    assertLeafidWords(e);
    assert.equal(e.platform, name);
    assert.ok(e.message.includes(`no prebuilt binary for this platform (${name})`), e.message);
  });
}

test('a prebuilt platform whose package is missing: reinstall, naming the package', () => {
  const e = loadWithout(null, null);
  assertLeafidWords(e);
  assert.equal(e.platform, 'linux-x64-gnu');
  assert.ok(e.message.includes('leafid-linux-x64-gnu'), e.message);
  assert.ok(e.message.includes('--omit=optional'), e.message);
});

test("index.js's prebuilt list is what scripts/build-npm.sh packs", () => {
  const script = fs.readFileSync(path.join(ROOT, 'scripts', 'build-npm.sh'), 'utf8');
  const packed = [...script.matchAll(/cp -r bindings-node\/npm\/(\S+) /g)].map((m) => m[1]).sort();
  const index = fs.readFileSync(path.join(ROOT, 'bindings-node', 'index.js'), 'utf8');
  const listed = JSON.parse(index.match(/const PREBUILT = (\[[^\]]*\]);/)[1].replace(/'/g, '"')).sort();
  assert.deepEqual(listed, packed);
});
