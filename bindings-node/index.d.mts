// Type definitions of leafid for ES modules (`import … from 'leafid'`): the same
// declarations as index.d.ts, which documents them, plus the default export index.mjs
// has. A file of its own so TypeScript sees an ES module where Node loads index.mjs,
// not CommonJS types "masquerading" as ESM.
import * as leafid from './index.js';

export * from './index.js';
export default leafid;
