// An ES module TypeScript consumer (`tsc --strict`, module node16): the `import` types,
// named and default.
import leafid, { SnowflakeGenerator, type DecodedId, type LeafErrorCode } from 'leafid';

const sf = await SnowflakeGenerator.connect({ registry: 'fixed:7' });
const parts: DecodedId = leafid.decode(await sf.nextIdAsync());
const code: LeafErrorCode = 'LEAF_TAG_NOT_FOUND';
console.log(parts.workerId, code, await sf.close());
