// Builds the native module with cargo (release) and copies it next to index.js.
// Run by `npm install` at the repository root; needs only Rust and Node.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const target = process.env.CARGO_TARGET_DIR || path.join(root, 'target');
execFileSync('cargo', ['build', '--release', '-p', 'leafid-node'], { cwd: root, stdio: 'inherit' });
const names = { linux: 'libleafid_node.so', darwin: 'libleafid_node.dylib', win32: 'leafid_node.dll' };
const built = path.join(target, 'release', names[process.platform]);
fs.copyFileSync(built, path.join(__dirname, 'leafid.node'));
