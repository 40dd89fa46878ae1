// ES module entry: the same exports as index.js.
import leafid from './index.js';

export const { SegmentGenerator, TagHandle, SnowflakeGenerator, LeafError, isLeafError, jsonReplacer, decode,
  leafLayout, LEAF_EPOCH, jsSafeLayout, IdCipher, encodeBase62, decodeBase62, metricsText } = leafid;
export default leafid;
