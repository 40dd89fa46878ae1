// Issue 31: leafid ids as primary keys through Drizzle ($defaultFn), TypeORM
// (@BeforeInsert) and Prisma (a client extension), the recipes of docs/frameworks-node.md,
// on PostgreSQL and MySQL: 4 forked processes insert 10 000 rows, single and bulk
// inserts, with no duplicate key, and every row's id is one leafid issued, from the
// tag's ranges. Each case uses a database of its own, dropped afterwards.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { fork, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const mysql = require('mysql2/promise');
const pg = require('pg');
const leafid = require('../..');
const { env, ROOT } = require('./helpers');

const WORKERS = 4;
const STEP = 2_000;

/** A database of the test's own on the shared server, and queries on it. */
class Database {
  constructor(serverUrl) {
    this.server = new URL(serverUrl);
    this.mysql = this.server.protocol === 'mysql:';
    this.name = `leafid_node_orm_${process.pid}_${process.hrtime.bigint()}`;
    const u = new URL(serverUrl);
    u.pathname = `/${this.name}`;
    this.url = u.href;
  }

  async admin(sql) {
    const u = new URL(this.server);
    u.pathname = this.mysql ? '/' : '/postgres';
    await this.run(u.href, sql);
  }

  async query(sql) {
    return this.run(this.url, sql);
  }

  async run(url, sql) {
    if (this.mysql) {
      const conn = await mysql.createConnection({ uri: url, supportBigNumbers: true, bigNumberStrings: true });
      try {
        return (await conn.query(sql))[0];
      } finally {
        await conn.end();
      }
    }
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      return (await client.query(sql)).rows;
    } finally {
      await client.end();
    }
  }

  async drop() {
    // A worker's session may still be closing: PostgreSQL refuses to drop a database
    // with a session on it unless forced (13+).
    await this.admin(`drop database if exists ${this.name}${this.mysql ? '' : ' with (force)'}`);
  }
}

/**
 * A Prisma client generated for the database's provider into a directory of this run
 * (under node_modules, so it resolves @prisma/client's runtime). `prisma generate` needs
 * no engine, but the CLI downloads the schema engine first unless
 * PRISMA_SCHEMA_ENGINE_BINARY names one: any file does, since generate never runs it.
 */
function generatePrisma(provider) {
  const dir = path.join(ROOT, 'node_modules', '.cache', `leafid-prisma-${process.pid}-${provider}`);
  fs.mkdirSync(dir, { recursive: true });
  const schema = path.join(dir, 'schema.prisma');
  fs.writeFileSync(schema, [
    `generator client {\n  provider = "prisma-client-js"\n  output = ${JSON.stringify(path.join(dir, 'client'))}\n}`,
    `datasource db {\n  provider = "${provider}"\n}`,
    'model Order {\n  id    BigInt @id\n  total Int\n  @@map("orders")\n}\n',
  ].join('\n'));
  execFileSync(process.execPath, [require.resolve('prisma/build/index.js'), 'generate', '--schema', schema], {
    cwd: dir,
    env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: process.execPath, CHECKPOINT_DISABLE: '1', PRISMA_HIDE_UPDATE_MESSAGE: '1' },
    stdio: 'pipe',
    timeout: 120_000,
  });
  return dir;
}

/** Runs the 4 workers; resolves with each one's ids (bigints), or rejects with an error's stack. */
function runWorkers(framework, url, clientDir) {
  const worker = path.join(__dirname, 'orm_workers.js');
  return Promise.all(Array.from({ length: WORKERS }, () => new Promise((resolve, reject) => {
    let result;
    const child = fork(worker, [framework, url, clientDir ?? ''], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    child.on('message', (m) => { result = m; });
    child.on('error', reject);
    child.on('exit', (code) => {
      if (result?.error) reject(new Error(`worker failed:\n${result.error}`));
      else if (code !== 0 || !Array.isArray(result)) reject(new Error(`worker exited with ${code}`));
      else resolve(result.map(BigInt));
    });
  })));
}

for (const framework of ['drizzle', 'typeorm', 'prisma']) {
  for (const [dbName, server] of [['postgres', 'LEAFID_PG_URL'], ['mysql', 'LEAFID_MYSQL_URL']]) {
    test(`${framework} on ${dbName}: 4 processes insert 10 000 rows with leafid ids and no duplicate key`, { timeout: 240_000 }, async () => {
      const db = new Database(env(server));
      let clientDir;
      await db.admin(`create database ${db.name}`);
      try {
        await db.query('create table orders (id bigint primary key, total int not null)');
        const gen = await leafid.SegmentGenerator.connect(db.url, { createTable: true });
        await gen.createTag('order', { start: 1, step: STEP });
        await gen.close();
        if (framework === 'prisma') clientDir = generatePrisma(db.mysql ? 'mysql' : 'postgresql');

        // A duplicate key (or any error) in a worker rejects with its stack.
        const perWorker = await runWorkers(framework, db.url, clientDir);
        const issued = perWorker.flat();
        assert.equal(issued.length, 10_000);
        assert.equal(new Set(issued).size, 10_000, 'no id issued twice');

        const rows = (await db.query('select id from orders')).map((r) => BigInt(r.id));
        const sort = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
        assert.deepEqual(rows.sort(sort), issued.sort(sort), "the rows' ids are the ids leafid issued");
        // From the tag's ranges: the tag starts at 1 and leaf_alloc's max_id is the end
        // of the last range handed out (ranges are [max_id - step, max_id)).
        const [{ max_id: maxId }] = await db.query("select max_id from leaf_alloc where biz_tag = 'order'");
        assert.ok(rows[0] >= 1n && rows.at(-1) < BigInt(maxId));
      } finally {
        await db.drop();
        if (clientDir) fs.rmSync(clientDir, { recursive: true, force: true });
      }
    });
  }
}
