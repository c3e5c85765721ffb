// Waiting room: 10,000 shoppers join an item's line before its sale starts, poll as the api
// tells them (poll_after_ms, sending the ticket's token so polls are answered from memory),
// and buy with their pass when admitted. At the end: every unit sold went to an admitted
// shopper, nobody bought twice, and the stock adds up.
//   k6 run -e BASE_URL=... -e ADMIN_TOKEN=... loadtest/queue.js     (SMOKE=1: seconds, 200 shoppers)
import http from 'k6/http';
import { check, sleep } from 'k6';
import { Counter } from 'k6/metrics';
import { SMOKE, BASE, runId, login, putItem, bearer, record, thresholds, checkStock } from './lib.js';

const USERS = SMOKE ? 200 : 10000;
const STOCK = SMOKE ? 50 : 1000;
const RATE = SMOKE ? 100 : 200;
const admittedPasses = new Counter('queue_passes');
const bought = new Counter('queue_bought');

export const options = {
  setupTimeout: '300s',
  teardownTimeout: '120s',
  scenarios: {
    line: {
      executor: 'per-vu-iterations',
      vus: SMOKE ? 200 : 10000,
      iterations: 1,
      maxDuration: SMOKE ? '60s' : '300s',
    },
  },
  thresholds: thresholds({
    'http_req_duration{name:queue_poll}': [SMOKE ? 'p(99)<2000' : 'p(99)<300'],
    queue_bought: [`count==${STOCK}`], // the whole stock sells, each unit to an admitted shopper
  }),
};

export function setup() {
  const run = runId();
  const item = `line-${run}`;
  const tokens = login(`line-${run}-u`, USERS);
  const starts = new Date(Math.ceil((Date.now() + (SMOKE ? 8000 : 60000)) / 1000) * 1000);
  putItem(item, {
    name: 'Queued item', category: 'phones', price_cents: 49900, stock: STOCK, per_user_limit: 1,
    starts_at: starts.toISOString().replace('.000Z', 'Z'),
    queue: { admit_per_second: RATE, max_active: RATE * 2, pass_ttl_seconds: 30 },
  });
  return { tokens, item };
}

export default function (data) {
  const token = data.tokens[(__VU - 1) % data.tokens.length];
  const path = `${BASE}/api/items/${data.item}/queue`;
  let res = http.post(path, null, { headers: bearer(token), tags: { name: 'queue_join' } });
  record(res, [200], 'queue_join');
  if (res.status !== 200) return;
  let t = res.json('ticket');
  for (let i = 0; i < 2000 && t.state === 'waiting'; i++) {
    sleep(Math.max(t.poll_after_ms, 200) / 1000);
    res = http.get(path, { headers: bearer(token, { 'Queue-Ticket': t.token }), tags: { name: 'queue_poll' } });
    record(res, [200], 'queue_poll');
    if (res.status !== 200) return;
    t = res.json('ticket');
  }
  if (t.state !== 'admitted') {
    check(t, { 'a shopper left waiting is told sold_out': (x) => x.state === 'sold_out' });
    return;
  }
  admittedPasses.add(1);
  res = http.post(`${BASE}/api/items/${data.item}/purchase`, '{"quantity":1}',
    { headers: bearer(token, { 'Queue-Pass': t.pass, 'Content-Type': 'application/json' }), tags: { name: 'purchase' } });
  record(res, [201, 409], 'purchase');
  if (res.status === 201) {
    bought.add(1);
    // Pay, so nothing stays reserved and the line can be told sold_out.
    const o = res.json('order');
    http.post(`${BASE}/api/orders/${o.id}/pay`, null, { headers: bearer(token), tags: { name: 'pay' } });
  }
}

export function teardown(data) {
  checkStock(data.item, data.tokens, STOCK);
}
