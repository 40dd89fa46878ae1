// The Node examples of README.md, checked with `tsc --noEmit --strict` by
// readme.test.js.
import { SegmentGenerator, SnowflakeGenerator, decode, metricsText, type LeafError } from 'leafid';

export async function segmentExample(url: string): Promise<bigint[]> {
  const gen = await SegmentGenerator.connect(url, { createTable: true, tags: ['order'] });
  await gen.createTag('order', { start: 1, step: 1000, description: 'order ids', existOk: true });
  await gen.createTag('order', { start: 1 }).catch((e: LeafError) => {
    if (e.code !== 'LEAF_TAG_EXISTS') throw e;
  });
  const order = gen.tag('order'); // a handle: no lookup per call
  const first: bigint = order.nextId();
  const batch: BigInt64Array = gen.nextIds('order', 100);
  const forJson: string = order.nextIdString();
  console.log(forJson);
  const late: bigint = await gen.nextIdAsync('order');
  const more: BigInt64Array = await order.nextIdsAsync(10);
  await gen.close();
  return [first, ...batch, late, ...more];
}

export async function snowflakeExample(lockDir: string): Promise<number> {
  const sf = await SnowflakeGenerator.connect({ registry: `local://${lockDir}` });
  const parts = decode(await sf.nextIdAsync());
  const released: boolean = await sf.close();
  console.log(released);
  return parts.workerId;
}

export function metricsExample(): { contentType: string; body: string } {
  // Express: app.get('/metrics', (req, res) => res.type(contentType).send(metricsText()));
  const body: string = metricsText();
  return { contentType: 'application/openmetrics-text; version=1.0.0; charset=utf-8', body };
}
