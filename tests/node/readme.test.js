// The Node programs of README.md and docs/*.md pass `tsc --noEmit --strict`, as
// extracted: each block marked runnable (```js title=NAME.mjs, the convention of
// scripts/test-docs.sh, which runs them twice as pasted) is checked as an ES module
// (.mts) against the package's own types, so there is no copy of them to drift.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const root = path.join(__dirname, '..', '..');

/** [origin, title, code] of every runnable block of `lang` in README.md and docs/. */
function blocks(lang) {
  const pages = ['README.md', ...fs.readdirSync(path.join(root, 'docs')).filter((f) => f.endsWith('.md')).sort()
    .map((f) => path.join('docs', f))];
  const found = [];
  for (const page of pages) {
    const lines = fs.readFileSync(path.join(root, page), 'utf8').split('\n');
    for (let i = 0; i < lines.length; i++) {
      const m = /^```(\S*)\s*(.*)$/.exec(lines[i]);
      if (!m) continue;
      let j = i + 1;
      while (j < lines.length && lines[j] !== '```') j++;
      const title = /\btitle=(\S+)/.exec(m[2]);
      if (m[1] === lang && title) found.push([`${page}:${i + 1}`, title[1], lines.slice(i + 1, j).join('\n') + '\n']);
      i = j;
    }
  }
  return found;
}

test('the README has a runnable Node quick start', () => {
  const titles = blocks('js').filter(([o]) => o.startsWith('README.md')).map(([, t]) => t);
  assert.ok(titles.includes('quickstart.mjs'), titles.join(', '));
});

test('every runnable js block type-checks under tsc --strict', () => {
  // Inside the package's directory: `import 'leafid'` resolves to the package itself
  // (self-reference through its "exports"), with the types a user gets.
  fs.mkdirSync(path.join(root, 'target'), { recursive: true });
  const dir = fs.mkdtempSync(path.join(root, 'target', 'readme-check-'));
  try {
    const files = blocks('js').map(([origin, title, code], k) => {
      const name = `${k}-${path.basename(title).replace(/\.m?js$/, '')}.mts`;
      fs.writeFileSync(path.join(dir, name), `// ${origin}\n${code}`);
      return name;
    });
    assert.ok(files.length > 0);
    fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
      compilerOptions: {
        strict: true, noEmit: true, target: 'es2022', module: 'node16', moduleResolution: 'node16',
        skipLibCheck: false, types: [],
      },
      files,
    }));
    const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const res = spawnSync(process.execPath, [tsc, '-p', dir], { encoding: 'utf8' });
    assert.equal(res.status, 0, res.stdout + res.stderr);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('import from an ES module works', () => {
  const code = `import { SegmentGenerator, decode } from 'leafid'; import leafid from 'leafid';
    if (typeof SegmentGenerator.connect !== 'function' || typeof decode !== 'function' || !leafid.SnowflakeGenerator) process.exit(1);`;
  const res = spawnSync(process.execPath, ['--input-type=module', '-e', code], { cwd: root, encoding: 'utf8' });
  assert.equal(res.status, 0, res.stderr);
});
