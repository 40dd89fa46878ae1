// An ES module TypeScript consumer (`tsc --strict`, module node16): the `import` types,
// named and default.
import leafid, { SnowflakeGenerator, LeafError, type DecodedId, type LeafErrorCode } from 'leafid';

const sf = await SnowflakeGenerator.connect('fixed:7', { maxSkewMs: 5000 });
const parts: DecodedId = leafid.decode(await sf.nextIdAsync());
const code: LeafErrorCode = 'LEAF_TAG_NOT_FOUND';
const failed: unknown = await leafid.SegmentGenerator.connect('postgres://x').catch((e: unknown) => e);
if (failed instanceof LeafError) console.log(failed.code);
console.log(parts.workerId, code, await sf.close());
