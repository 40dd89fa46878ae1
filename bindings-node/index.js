// leafid for Node: the public exports, taken from the native module.
//
// binding.js is napi-rs's generated loader: it picks this platform's build
// (`leafid.<platform>.node` beside it in a checkout, else the `leafid-<platform>`
// package, glibc or musl on Linux). This file only names what is public: the loader
// also exports napi's internal names (`JsIdCipher`…, undefined at run time), and
// these names are the ones index.d.ts declares.
'use strict';
const native = require('./binding.js');

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
