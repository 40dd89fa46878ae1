// A CommonJS TypeScript consumer (`tsc --strict`, module node16): the `require` types.
import leafid = require('leafid');
import type { DecodedId } from 'leafid';

export async function firstId(): Promise<bigint> {
  const gen = await leafid.SegmentGenerator.connect('memory:');
  await gen.createTag('ts', { start: 1, existOk: true }).catch((e: unknown) => {
    if (!leafid.isLeafError(e)) throw e;
    console.log(e.code);
  });
  const parts: DecodedId = leafid.decode(gen.tag('ts').nextId());
  await gen.close();
  return BigInt(parts.sequence);
}
