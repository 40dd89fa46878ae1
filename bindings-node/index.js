// leafid for Node: the native module's classes and functions, as they are.
'use strict';
const native = require('./leafid.node');

module.exports = {
  SegmentGenerator: native.SegmentGenerator,
  TagHandle: native.TagHandle,
  SnowflakeGenerator: native.SnowflakeGenerator,
  decode: native.decode,
  leafLayout: native.leafLayout,
  jsSafeLayout: native.jsSafeLayout,
  IdCipher: native.IdCipher,
  encodeBase62: native.encodeBase62,
  decodeBase62: native.decodeBase62,
  metricsText: native.metricsText,
  LEAF_EPOCH: native.LEAF_EPOCH,
};
