// An ES module consumer of the installed npm tarballs: named and default imports both
// give the native classes.
import assert from 'node:assert/strict';
import leafid, { SegmentGenerator, SnowflakeGenerator, LeafError, decode } from 'leafid';

assert.equal(leafid.SegmentGenerator, SegmentGenerator);
assert.equal(leafid.LeafError, LeafError);
const sf = await SnowflakeGenerator.connect('fixed:7');
assert.equal(decode(sf.nextId()).workerId, 7);
await sf.close();
