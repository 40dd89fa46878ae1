// A CommonJS consumer of the installed npm tarballs (scripts/dist.sh runs it in a fresh
// project): `require('leafid')` loads the platform package's binary and issues ids.
'use strict';
const assert = require('node:assert/strict');
const leafid = require('leafid');

(async () => {
  const gen = await leafid.SegmentGenerator.connect('memory:');
  await gen.createTag('cjs', { start: 1, step: 10 });
  assert.equal(gen.tag('cjs').nextId(), 1n);
  await gen.close();
  assert.equal(leafid.decodeBase62(leafid.encodeBase62(42n)), 42n);
  // Core errors are LeafErrors, at run time.
  await assert.rejects(leafid.SegmentGenerator.connect('oracle://x'), (e) => e instanceof leafid.LeafError && leafid.isLeafError(e));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
