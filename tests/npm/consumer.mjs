// An ES module consumer of the installed npm tarballs: named and default imports both
// give the native classes.
import assert from 'node:assert/strict';
import leafid, { SegmentGenerator, SnowflakeGenerator, decode } from 'leafid';

assert.equal(leafid.SegmentGenerator, SegmentGenerator);
const sf = await SnowflakeGenerator.connect({ registry: 'fixed:7' });
assert.equal(decode(sf.nextId()).workerId, 7);
await sf.close();
