// Waiting room: SHOPPERS shoppers (10,000; SMOKE=1: 2,000; -e SHOPPERS=n to choose) log in and
// join an item's line before its sale starts, poll as the api tells them (after poll_after_ms,
// sending the ticket's token so polls are answered from memory), and buy with their pass when
// admitted, then pay. At the end: the whole stock sold, one unit to each of STOCK admitted
// shoppers; every other shopper was told sold_out; no shopper's place ever grew; and the stock
// adds up (checkStock).
//   k6 run -e BASE_URL=... -e ADMIN_TOKEN=... [-e SMOKE=1] [-e SHOPPERS=10000] loadtest/queue.js
// The api must allow dev login without login rate limits (scripts/k6.sh starts it so).
//
// Shoppers are not VUs: each of QUEUE_VUS VUs runs its share of the shoppers at once
// (http.asyncRequest and timers), so 10,000 waiting shoppers are 10,000 pending promises rather
// than 10,000 JavaScript runtimes (each with its own copy of setup's data) on a small machine.
import http from 'k6/http';
import { check } from 'k6';
import { Counter, Rate } from 'k6/metrics';
import { SMOKE, BASE, SIM, runId, login, putItem, record, thresholds, checkStock } from './lib.js';

const SHOPPERS = Number(__ENV.SHOPPERS || (SMOKE ? 2000 : 10000));
const VUS = Math.min(SHOPPERS, Number(__ENV.QUEUE_VUS || (SMOKE ? 20 : 100)));
const STOCK = Math.max(1, Math.floor(SHOPPERS / 10));
const RATE = 200; // admissions a second
// From setup to the sale's start: every shopper logs in and joins within the first half of it
// (3 ms a shopper at least: 10,000 shoppers' logins and joins take seconds on a small machine).
const LEAD_MS = __ENV.LEAD_S ? 1000 * Number(__ENV.LEAD_S) : Math.max(SMOKE ? 10000 : 30000, 3 * SHOPPERS);

const passes = new Counter('queue_passes');
const bought = new Counter('queue_bought');
const toldSoldOut = new Counter('queue_told_sold_out');
const positionGrew = new Rate('queue_position_grew');

export const options = {
  setupTimeout: '60s',
  teardownTimeout: '300s',
  scenarios: {
    line: {
      executor: 'per-vu-iterations',
      vus: VUS,
      iterations: 1,
      maxDuration: SMOKE ? '120s' : '600s',
    },
  },
  thresholds: thresholds({
    // The smoke shares a small machine with whatever else runs: its bound only catches polls that
    // hang; the full run holds polls to two seconds (the api's own handling stays far under that:
    // what a loaded 2-core machine adds is queueing for the CPU, shared with k6 itself).
    'http_req_duration{name:queue_poll}': [SMOKE ? 'p(99)<5000' : 'p(99)<2000'],
    queue_passes: [`count==${STOCK}`], // passes never outnumber the units (max_active ≤ stock_left)
    queue_bought: [`count==${STOCK}`], // the whole stock sells, each unit to an admitted shopper
    queue_told_sold_out: [`count==${SHOPPERS - STOCK}`], // and everyone else stops waiting
    queue_position_grew: ['rate==0'],
  }),
};

export function setup() {
  const run = runId();
  const item = `line-${run}`;
  const starts = new Date(Math.ceil((Date.now() + LEAD_MS) / 1000) * 1000);
  putItem(item, {
    name: 'Queued item', category: 'phones', price_cents: 49900, stock: STOCK, per_user_limit: 1,
    starts_at: starts.toISOString().replace('.000Z', 'Z'),
    queue: { admit_per_second: RATE, max_active: RATE * 2, pass_ttl_seconds: 30 },
  });
  return { item, users: `line-${run}-u`, startsMS: starts.getTime() };
}

const wait = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function params(token, name, extra) {
  return {
    headers: Object.assign({ 'Content-Type': 'application/json', Authorization: `Bearer ${token}` }, extra || {}),
    tags: { name },
  };
}

// shopper is one shopper's whole visit: arrive at a random moment before the start, log in,
// join, wait as told, buy with the pass and pay.
async function shopper(user, data) {
  await wait(Math.random() * Math.max(0, data.startsMS - Date.now() - LEAD_MS / 2));
  let res = await http.asyncRequest('POST', `${BASE}/api/login`, JSON.stringify({ user }),
    { headers: { 'Content-Type': 'application/json' }, tags: { name: 'login' } });
  if (!record(res, [200], 'login')) return;
  const token = res.json('token');
  const line = `${BASE}/api/items/${data.item}/queue`;
  res = await http.asyncRequest('POST', line, null, params(token, 'queue_join'));
  if (!record(res, [200], 'queue_join')) return;
  let t = res.json('ticket');
  check(t, { 'joined before the start: waiting, no place yet': (x) => x.state === 'waiting' && x.position === null });
  let place = Infinity;
  while (t.state === 'waiting') {
    await wait(t.poll_after_ms === null ? 1000 : t.poll_after_ms); // null only in final states
    res = await http.asyncRequest('GET', line, null, params(token, 'queue_poll', { 'Queue-Ticket': t.token }));
    if (!record(res, [200], 'queue_poll')) return;
    t = res.json('ticket');
    if (t.state === 'waiting' && t.position !== null) {
      positionGrew.add(t.position > place);
      place = t.position;
    }
  }
  if (t.state === 'sold_out') {
    toldSoldOut.add(1);
    return;
  }
  if (!check(t, { 'a shopper who stops waiting is admitted (with a pass) or told sold_out': (x) => x.state === 'admitted' && !!x.pass })) {
    console.warn(`${user}: ticket ${JSON.stringify(t)}`);
    return;
  }
  passes.add(1);
  res = await http.asyncRequest('POST', `${BASE}/api/items/${data.item}/purchase`, '{"quantity":1}',
    params(token, 'purchase', { 'Queue-Pass': t.pass }));
  if (!record(res, [201], 'purchase')) return;
  bought.add(1);
  // Pay, so nothing stays reserved and the line can tell the others sold_out: through the
  // payment simulator when SIM is set (checkout, then paid on the session's hosted page; its webhook
  // makes the order paid), else with POST /pay (a shop that settles outside).
  const id = res.json('order.id');
  if (!SIM) {
    res = await http.asyncRequest('POST', `${BASE}/api/orders/${id}/pay`, null, params(token, 'pay'));
    record(res, [200], 'pay');
    return;
  }
  res = await http.asyncRequest('POST', `${BASE}/api/orders/${id}/checkout`, null, params(token, 'checkout'));
  if (!record(res, [200], 'checkout')) return;
  const url = res.json('payment.checkout_url');
  res = await http.asyncRequest('GET', url, null, { tags: { name: 'sim_page' } });
  const m = res.status === 200 ? /name="session_token" value="([^"]+)"/.exec(res.body) : null;
  if (!record(res, [200], 'sim page') || !m) return;
  res = await http.asyncRequest('POST', url, { session_token: m[1], payment_method: 'pm_card_visa' },
    { redirects: 0, tags: { name: 'sim_pay' } });
  record(res, [303], 'sim pay');
}

export default async function (data) {
  const mine = [];
  for (let i = __VU - 1; i < SHOPPERS; i += VUS) mine.push(shopper(`${data.users}${i}`, data));
  await Promise.all(mine);
}

export function teardown(data) {
  checkStock(data.item, login(data.users, SHOPPERS), STOCK);
}
