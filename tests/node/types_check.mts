// The ES module view of the issue-21 surface (types.test.js): the same names, and the
// default export carries them.
import leafid, { LeafError, isLeafError, SnowflakeGenerator } from 'leafid';

const sf = await SnowflakeGenerator.connect('fixed:7', { lookaheadMs: 65_000 });
const e: unknown = await sf.close().catch((err: unknown) => err);
if (e instanceof leafid.LeafError || isLeafError(e)) console.log(e.code);
console.log(LeafError === leafid.LeafError, leafid.isLeafError(e));
