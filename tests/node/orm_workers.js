// Forked by tests/node/frameworks.test.js: one worker process that inserts 2 500 rows
// into `orders` through one ORM (half one by one through the ORM's id default or hook,
// half in bulk inserts whose ids are reserved first with nextIdsAsync), then sends the
// ids leafid gave it to the parent and exits.
//
//   node orm_workers.js drizzle|typeorm|prisma LEAF_URL [PRISMA_CLIENT_DIR]
'use strict';
const leafid = require('../..');

const ROWS = 2_500; // half one by one, half in 5 bulk inserts
const BULK = ROWS / 10;

// The recipe of docs/frameworks-node.md: one generator per process, its handle's first
// segment loaded at start-up, so the synchronous default has an id at hand. `issued`
// records what leafid gave, to compare with the table.
const issued = [];
let order;
function orderId() {
  const id = order.nextId();
  issued.push(id);
  return id;
}
async function reserve(n) {
  const ids = await order.nextIdsAsync(n);
  issued.push(...ids);
  return ids;
}

function mysqlOptions(url) {
  const u = new URL(url);
  return {
    host: u.hostname, port: Number(u.port), user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password), database: u.pathname.slice(1),
  };
}

async function drizzle(url) {
  if (url.startsWith('mysql:')) {
    const mysql = require('mysql2/promise');
    const { drizzle } = require('drizzle-orm/mysql2');
    const { mysqlTable, bigint, int } = require('drizzle-orm/mysql-core');
    const orders = mysqlTable('orders', {
      id: bigint('id', { mode: 'bigint' }).primaryKey().$defaultFn(orderId),
      total: int('total').notNull(),
    });
    const pool = mysql.createPool({ ...mysqlOptions(url), connectionLimit: 2 });
    await insertAll(drizzle(pool), orders);
    await pool.end();
  } else {
    const { Pool } = require('pg');
    const { drizzle } = require('drizzle-orm/node-postgres');
    const { pgTable, bigint, integer } = require('drizzle-orm/pg-core');
    const orders = pgTable('orders', {
      id: bigint('id', { mode: 'bigint' }).primaryKey().$defaultFn(orderId),
      total: integer('total').notNull(),
    });
    const pool = new Pool({ connectionString: url, max: 2 });
    await insertAll(drizzle(pool), orders);
    await pool.end();
  }

  async function insertAll(db, orders) {
    for (let n = 0; n < ROWS / 2; n++) await db.insert(orders).values({ total: n });
    for (let b = 0; b < 5; b++) {
      const rows = Array.from({ length: BULK }, (_, n) => ({ total: n }));
      const ids = await reserve(rows.length);
      await db.insert(orders).values(rows.map((row, i) => ({ ...row, id: ids[i] })));
    }
  }
}

async function typeorm(url) {
  require('reflect-metadata');
  const { DataSource, Entity, PrimaryColumn, Column, BeforeInsert } = require('typeorm');
  // In TypeScript: @Entity('orders') class Order { @PrimaryColumn('bigint') id; ...
  // @BeforeInsert() assignId() { this.id ??= orderId(); } }; here the same decorators,
  // applied by hand.
  class Order {
    assignId() {
      this.id ??= orderId();
    }
  }
  PrimaryColumn('bigint')(Order.prototype, 'id');
  Column('int')(Order.prototype, 'total');
  BeforeInsert()(Order.prototype, 'assignId');
  Entity('orders')(Order);

  const db = url.startsWith('mysql:')
    ? new DataSource({ type: 'mysql', url, poolSize: 2, entities: [Order] })
    : new DataSource({ type: 'postgres', url, poolSize: 2, entities: [Order] });
  await db.initialize();
  const repo = db.getRepository(Order);
  // save() runs @BeforeInsert: one id per row from the synchronous default.
  for (let n = 0; n < ROWS / 2; n++) await repo.save(repo.create({ total: n }));
  for (let b = 0; b < 5; b++) {
    const ids = await reserve(BULK);
    const rows = Array.from(ids, (id, n) => repo.create({ id, total: n }));
    // save() keeps an id given (the hook assigns only a missing one); insert() runs no
    // hook at all.
    if (b % 2 === 0) await repo.save(rows);
    else await repo.insert(rows);
  }
  await db.destroy();
}

async function prisma(url, clientDir) {
  const { PrismaClient } = require(`${clientDir}/client`);
  const adapter = url.startsWith('mysql:')
    ? new (require('@prisma/adapter-mariadb').PrismaMariaDb)({ ...mysqlOptions(url), connectionLimit: 2 })
    : new (require('@prisma/adapter-pg').PrismaPg)({ connectionString: url, max: 2 });
  const base = new PrismaClient({ adapter });
  // The client extension of docs/frameworks-node.md: create takes one id from the
  // synchronous call, createMany reserves its rows' ids with the waiting one.
  const client = base.$extends({
    query: {
      order: {
        async create({ args, query }) {
          args.data = { ...args.data, id: args.data.id ?? orderId() };
          return query(args);
        },
        async createMany({ args, query }) {
          const rows = [args.data].flat();
          const ids = await reserve(rows.length);
          args.data = rows.map((row, i) => ({ ...row, id: row.id ?? ids[i] }));
          return query(args);
        },
      },
    },
  });
  for (let n = 0; n < ROWS / 2; n++) await client.order.create({ data: { total: n } });
  for (let b = 0; b < 5; b++) {
    await client.order.createMany({ data: Array.from({ length: BULK }, (_, n) => ({ total: n })) });
  }
  await base.$disconnect();
}

async function main() {
  const [framework, url, clientDir] = process.argv.slice(2);
  const gen = await leafid.SegmentGenerator.connect(url, { waitTimeoutMs: 10_000 });
  order = gen.tag('order');
  await order.nextIdAsync(); // at start-up: the first segment is loaded (one id skipped)
  await { drizzle, typeorm, prisma }[framework](url, clientDir);
  await gen.close();
  process.send(issued.map(String), () => process.exit(0));
}

main().catch((e) => {
  // The parent reports the stack; a duplicate key shows here as the driver's error.
  process.send({ error: e.stack ?? String(e) }, () => process.exit(1));
});
