// The issue-21 surface under `tsc --noEmit --strict` (types.test.js): LeafError is a
// class (instanceof narrows), isLeafError a type guard, both generators connect with
// (url, options?), stats() ids are bigints, unknown options are type errors.
import { SegmentGenerator, SnowflakeGenerator, LeafError, isLeafError, jsonReplacer, type LeafErrorCode, type TagStats } from 'leafid';

export async function surface(): Promise<bigint> {
  const gen = await SegmentGenerator.connect('memory:', { waitTimeoutMs: 10 });
  try {
    gen.nextId('missing');
  } catch (e: unknown) {
    if (e instanceof LeafError) {
      const code: LeafErrorCode = e.code;
      const name: 'LeafError' = e.name;
      console.log(code, name);
    }
    if (isLeafError(e)) console.log(e.code);
  }
  const stats: TagStats[] = gen.stats();
  const value: bigint = stats[0].segments[0].value + BigInt(stats[0].step + stats[0].minStep);
  const refills: number = stats[0].refills;
  // Ids in JSON (issue 31): the replacer, and stats' own JSON form.
  const body: string = JSON.stringify({ id: value }, jsonReplacer);
  const max: string = stats[0].segments[0].toJSON().max;
  console.log(body, max);
  const sf = await SnowflakeGenerator.connect('fixed:7', { cacheDir: '/tmp', lookaheadMs: 65_000 });
  const older = await SnowflakeGenerator.connect({ registry: 'fixed:8' });
  // @ts-expect-error: a misspelt option is refused, as plain JS refuses it.
  await SegmentGenerator.connect('memory:', { waitTimoutMs: 10 });
  // @ts-expect-error: the registry is the url argument of the (url, options) form.
  await SnowflakeGenerator.connect('fixed:7', { registry: 'fixed:7' });
  const made = new LeafError('by hand', 'LEAF_CLOSED');
  console.log(made.code, refills);
  await Promise.all([gen.close(), sf.close(), older.close()]);
  return value + sf.nextId();
}
