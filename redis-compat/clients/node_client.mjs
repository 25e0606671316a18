// Client matrix, Node.js: node-redis v5 (RESP2 and RESP3), node-redis v4 (RESP2: it parses
// the SCAN cursor into a JavaScript number, exact only below 2^53) and ioredis (RESP2).
// Usage: node node_client.mjs <port> <node-redis|node-redis4|ioredis> <2|3>. Exits 0 when every check
// passed; prints the failing step otherwise.
import assert from 'node:assert/strict';

const [port, lib, proto] = [Number(process.argv[2]), process.argv[3], Number(process.argv[4])];
const p = `${lib}-resp${proto}:`;
// DMKV_BIG keys named big:* are in the pool (loaded by clients.py): a full SCAN of them
// through the library's own iterator must return exactly that many distinct keys.
const big = Number(process.env.DMKV_BIG || 0);
const LIMIT = 2 ** 53;

async function nodeRedis() {
  const { createClient } = await import('redis');
  const c = createClient({ url: `redis://127.0.0.1:${port}`, RESP: proto });
  c.on('error', (e) => { console.error('client error', e); process.exit(1); });
  await c.connect();
  assert.equal(await c.ping(), 'PONG');
  assert.equal(await c.set(`${p}k`, 'v'), 'OK');
  assert.equal(await c.get(`${p}k`), 'v');
  assert.equal(await c.get(`${p}missing`), null);
  const pipe = await c.multi().set(`${p}a`, '1').incr(`${p}a`).get(`${p}a`).exec();
  assert.deepEqual(pipe, ['OK', 2, '2']);
  const batch = c.multi();
  for (let i = 0; i < 50; i++) batch.set(`${p}s${i}`, `${i}`);
  await batch.execAsPipeline();
  const seen = new Set();
  for await (const keys of c.scanIterator({ MATCH: `${p}s*`, COUNT: 20 }))
    for (const k of keys) seen.add(k);
  assert.equal(seen.size, 50);
  if (big) {
    const all = new Set();
    for await (const keys of c.scanIterator({ MATCH: 'big:*', COUNT: 1000 }))
      for (const k of keys) all.add(k);
    assert.equal(all.size, big);
    let cursor = '0';
    do { // the cursors themselves: decimal strings below 2^53
      const r = await c.scan(cursor, { MATCH: 'big:*', COUNT: 1000 });
      cursor = String(r.cursor);
      assert.ok(/^[0-9]+$/.test(cursor) && BigInt(cursor) < BigInt(LIMIT), `cursor ${cursor}`);
    } while (cursor !== '0');
  }
  assert.equal(await c.set(`${p}e`, 'x', { EX: 100 }), 'OK');
  const ttl = await c.ttl(`${p}e`);
  assert.ok(ttl > 90 && ttl <= 100, `ttl ${ttl}`);
  assert.equal(await c.pExpire(`${p}e`, 50), 1);
  await new Promise((r) => setTimeout(r, 120));
  assert.equal(await c.get(`${p}e`), null);
  await c.watch(`${p}w`);
  const tx = await c.multi().set(`${p}w`, 'tx').exec();
  assert.deepEqual(tx, ['OK']);
  const info = await c.info('server');
  assert.match(info, /redis_version:/);
  await c.quit();
}

async function nodeRedis4() {
  const { createClient } = await import('redis4');
  const c = createClient({ url: `redis://127.0.0.1:${port}` });
  c.on('error', (e) => { console.error('client error', e); process.exit(1); });
  await c.connect();
  assert.equal(await c.set(`${p}k`, 'v'), 'OK');
  assert.equal(await c.get(`${p}k`), 'v');
  const batch = c.multi();
  for (let i = 0; i < 300; i++) batch.set(`${p}s${i}`, `${i}`);
  await batch.execAsPipeline();
  const seen = new Set();
  for await (const k of c.scanIterator({ MATCH: `${p}s*`, COUNT: 20 })) seen.add(k);
  assert.equal(seen.size, 300);
  if (big) { // v4 keeps the cursor as a JavaScript number: exact only below 2^53
    const all = new Set();
    for await (const k of c.scanIterator({ MATCH: 'big:*', COUNT: 1000 })) all.add(k);
    assert.equal(all.size, big);
  }
  await c.quit();
}

async function ioRedis() {
  const { default: Redis } = await import('ioredis');
  const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1 });
  await c.connect();
  assert.equal(await c.ping(), 'PONG');
  assert.equal(await c.set(`${p}k`, 'v'), 'OK');
  assert.equal(await c.get(`${p}k`), 'v');
  const res = await c.pipeline().set(`${p}a`, '1').incr(`${p}a`).get(`${p}a`).exec();
  assert.deepEqual(res, [[null, 'OK'], [null, 2], [null, '2']]);
  const tx = await c.multi().set(`${p}b`, 'x').get(`${p}b`).exec();
  assert.deepEqual(tx, [[null, 'OK'], [null, 'x']]);
  const pl = c.pipeline();
  for (let i = 0; i < 50; i++) pl.set(`${p}s${i}`, `${i}`);
  await pl.exec();
  const seen = new Set();
  await new Promise((resolve, reject) => {
    const s = c.scanStream({ match: `${p}s*`, count: 20 });
    s.on('data', (keys) => keys.forEach((k) => seen.add(k)));
    s.on('end', resolve);
    s.on('error', reject);
  });
  assert.equal(seen.size, 50);
  if (big) {
    const all = new Set();
    await new Promise((resolve, reject) => {
      const s = c.scanStream({ match: 'big:*', count: 1000 });
      s.on('data', (keys) => keys.forEach((k) => all.add(k)));
      s.on('end', resolve);
      s.on('error', reject);
    });
    assert.equal(all.size, big);
  }
  assert.equal(await c.set(`${p}e`, 'x', 'PX', 50), 'OK');
  await new Promise((r) => setTimeout(r, 120));
  assert.equal(await c.get(`${p}e`), null);
  await c.quit();
}

try {
  const run = { 'node-redis': nodeRedis, 'node-redis4': nodeRedis4, ioredis: ioRedis }[lib];
  await run();
  console.log(`${lib} RESP${proto}: ok`);
} catch (e) {
  console.error(`${lib} RESP${proto}: FAILED`, e);
  process.exit(1);
}
