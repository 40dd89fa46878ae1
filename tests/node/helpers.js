// Shared helpers of the Node tests: temp dirs, service URLs, unique tag names.
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

function tmpdir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'leafid-node-'));
}

function mysqlUrl() {
  const url = process.env.LEAFID_MYSQL_URL;
  if (!url) throw new Error('LEAFID_MYSQL_URL is not set: run `eval "$(scripts/services.sh start)"`');
  return url;
}

function uniqueTag(name) {
  return `node-${name}-${process.pid}-${process.hrtime.bigint()}`;
}

module.exports = { tmpdir, mysqlUrl, uniqueTag };
