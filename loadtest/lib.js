// Shared helpers of the k6 scenarios: configuration from the environment, shopper tokens
// minted through POST /api/login, admin calls, and the end-of-run invariants checked through
// the API (no oversell, no lost stock).
import http from 'k6/http';
import { check, fail, sleep } from 'k6';
import { Rate, Counter, Trend } from 'k6/metrics';

export const BASE = __ENV.BASE_URL || 'http://127.0.0.1:8080';
export const ADMIN = __ENV.ADMIN_TOKEN || '';
export const SMOKE = __ENV.SMOKE === '1';
// FAULTS=1 while faults are injected (Redis or Kafka stopped): 503 unavailable is then allowed.
export const FAULTS = __ENV.FAULTS === '1';
// runId names this run's items and users. Each VU evaluates the script on its own, so
// scenarios call it once in setup() and pass the result to the VUs in setup's data.
export function runId() {
  return __ENV.RUN_ID || `${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`;
}

// A 5xx other than an allowed 503 is a bug; the thresholds want none.
export const serverErrors = new Rate('unexpected_5xx');
// Replies whose status the contract does not allow for the call.
export const badStatus = new Rate('unexpected_status');
export const purchased = new Counter('purchased_units');
// Paying through the payment simulator (SIM_URL: the api runs with FLASHSALE_PAYMENT_PROVIDER=sim
// and its simulator there): POST checkout's latency, and from the reservation's 201 to the
// order read back paid (checkout, the card confirmed on the simulator, its webhook to the api).
export const SIM = __ENV.SIM_URL || '';
export const checkoutMs = new Trend('checkout_ms', true);
export const reservationToPaidMs = new Trend('reservation_to_paid_ms', true);
export const paidUnits = new Counter('paid_units');

const json = { headers: { 'Content-Type': 'application/json' } };

export function bearer(token, extra) {
  return { headers: Object.assign({ 'Content-Type': 'application/json', Authorization: `Bearer ${token}` }, extra || {}) };
}

// record checks one reply against the statuses the contract allows for the call.
export function record(res, allowed, name) {
  const s = res.status;
  serverErrors.add(s >= 500 && !(FAULTS && s === 503));
  const ok = allowed.includes(s);
  badStatus.add(!ok);
  if (!ok) {
    // Status 0: no reply at all (refused, reset or timed out); k6 has already logged why.
    console.warn(s === 0 ? `${name}: no reply: ${res.error}` : `${name}: unexpected ${s} ${String(res.body).slice(0, 200)}`);
  }
  return ok;
}

// Common thresholds: no unexpected status, no 5xx, every check passed; extra adds a
// scenario's own (its latency targets go through latency()).
export function thresholds(extra) {
  return Object.assign({
    unexpected_5xx: ['rate==0'],
    unexpected_status: ['rate==0'],
    checks: ['rate==1'],
  }, extra || {});
}

// latency returns a scenario's latency thresholds for a full run (SMOKE=0), where they are the
// rehearsal's targets. A smoke (SMOKE=1, part of make test) runs seconds on a machine that may
// be busy with other tests: there a latency figure says how busy the machine is, not whether
// the api works, so the smoke keeps only the correctness thresholds unless SMOKE_LATENCY=1.
export function latency(t) {
  return SMOKE && __ENV.SMOKE_LATENCY !== '1' ? {} : t;
}

// payThresholds are the thresholds of scenarios that pay: checkout answers fast, and a
// reservation is paid within seconds of the shopper paying (with the simulator only).
export function payThresholds() {
  return SIM ? latency({ checkout_ms: ['p(95)<1000'], reservation_to_paid_ms: ['p(95)<5000'] }) : {};
}

// paySession pays a Checkout Session on the simulator's hosted page with pm_card_visa, as a
// shopper's browser would: read the page, post its form (answered 303 to the shop).
export function paySession(url) {
  const page = http.get(url, { tags: { name: 'sim_page' } });
  const m = page.status === 200 ? /name="session_token" value="([^"]+)"/.exec(page.body) : null;
  if (!record(page, [200], 'sim page') || !m) return false;
  const sent = http.post(url, { session_token: m[1], payment_method: 'pm_card_visa' }, { redirects: 0, tags: { name: 'sim_pay' } });
  return record(sent, [303], 'sim pay');
}

// pay pays an order: through the payment simulator when SIM is set (checkout, pay on the
// session's hosted page as the shopper would, then the order read back until the webhook has
// made it paid), else with POST /pay (a shop that settles outside).
function pay(id, token, reservedAt) {
  if (!SIM) {
    const p = http.post(`${BASE}/api/orders/${id}/pay`, null, Object.assign(bearer(token), { tags: { name: 'pay' } }));
    record(p, [200, 409, 429], 'pay');
    return;
  }
  const c = http.post(`${BASE}/api/orders/${id}/checkout`, null, Object.assign(bearer(token), { tags: { name: 'checkout' } }));
  if (!record(c, [200, 409, 429], 'checkout') || c.status !== 200) {
    return;
  }
  checkoutMs.add(c.timings.duration);
  if (!paySession(c.json('payment.checkout_url'))) {
    return;
  }
  // Order reads are limited per shopper (FLASHSALE_LIMIT_READS, 10/s): poll at 5/s, and a 429
  // only means wait.
  for (let i = 0; i < 100; i++) {
    const g = http.get(`${BASE}/api/orders/${id}`, Object.assign(bearer(token), { tags: { name: 'order' } }));
    record(g, [200, 429], 'order');
    if (g.status === 429) {
      sleep(0.2);
      continue;
    }
    const status = g.status === 200 ? g.json('order.status') : '';
    if (status === 'paid') {
      reservationToPaidMs.add(Date.now() - reservedAt);
      paidUnits.add(1);
      return;
    }
    if (status !== 'reserved') {
      check(status, { 'a confirmed payment pays its reservation': () => false });
      return;
    }
    sleep(0.2);
  }
  check(id, { 'order paid within 20 s of its payment': () => false });
}

// duration scales a scenario length: SMOKE runs seconds.
export function dur(full, smoke) {
  return SMOKE ? smoke : full;
}

// login mints tokens for n users named prefix0..prefix(n-1), in batches.
export function login(prefix, n) {
  const tokens = [];
  for (let i = 0; i < n; i += 100) {
    const reqs = [];
    for (let j = i; j < Math.min(n, i + 100); j++) {
      reqs.push(['POST', `${BASE}/api/login`, JSON.stringify({ user: `${prefix}${j}` }), json]);
    }
    for (const res of http.batch(reqs)) {
      if (res.status !== 200) {
        const hint = res.status === 404
          ? 'dev login is off: set FLASHSALE_DEV_LOGIN=true for load tests'
          : 'set FLASHSALE_LIMIT_LOGIN_IP=off for load tests';
        fail(`login: ${res.status} ${res.body} (${hint})`);
      }
      tokens.push(res.json('token'));
    }
  }
  return tokens;
}

// putItem creates (or updates) an item as the admin.
export function putItem(id, body) {
  const res = http.put(`${BASE}/api/admin/items/${id}`, JSON.stringify(body), bearer(ADMIN));
  if (res.status !== 200 && res.status !== 201) {
    fail(`PUT item ${id}: ${res.status} ${res.body}`);
  }
  return res.json('item');
}

export function getItem(id) {
  const res = http.get(`${BASE}/api/items/${id}`);
  if (res.status !== 200) {
    fail(`GET item ${id}: ${res.status} ${res.body}`);
  }
  return res.json('item');
}

// checkStock verifies, through the API, that an item sold no more than it had: stock_left is
// never negative, and the units every shopper holds (reserved or paid orders) plus stock_left
// equal stock_total exactly (nothing oversold, nothing lost). tokens are every buyer's token.
export function checkStock(itemId, tokens, expectTotal) {
  // Item reads come from the api's snapshot, at most a second old: let it catch up first.
  sleep(1.5);
  const item = getItem(itemId);
  let held = 0;
  for (let i = 0; i < tokens.length; i += 100) {
    const reqs = tokens.slice(i, i + 100).map((t) => ['GET', `${BASE}/api/orders`, null, bearer(t)]);
    for (const res of http.batch(reqs)) {
      if (res.status !== 200) {
        fail(`GET /api/orders: ${res.status} ${res.body}`);
      }
      for (const o of res.json('orders')) {
        if (o.item_id === itemId && (o.status === 'reserved' || o.status === 'paid')) {
          held += o.quantity;
        }
      }
    }
  }
  const ok = check(item, {
    [`${itemId}: stock_left >= 0`]: (it) => it.stock_left >= 0,
    [`${itemId}: held units <= stock_total`]: (it) => held <= it.stock_total,
    [`${itemId}: held + stock_left == stock_total`]: (it) => held + it.stock_left === it.stock_total,
    [`${itemId}: stock_total as loaded`]: (it) => expectTotal === undefined || it.stock_total === expectTotal,
  });
  console.log(`${itemId}: stock_total=${item.stock_total} stock_left=${item.stock_left} held=${held} status=${item.status}`);
  if (!ok) {
    fail(`invariants broken for ${itemId}`);
  }
}

// buy runs one shopper's purchase and, by chance, pays or cancels it.
export function buy(itemId, token, payShare, cancelShare) {
  const key = `${__VU}-${__ITER}-${Math.random().toString(36).slice(2)}`;
  const res = http.post(`${BASE}/api/items/${itemId}/purchase`, '{"quantity":1}',
    Object.assign(bearer(token, { 'Idempotency-Key': key }), { tags: { name: 'purchase' } }));
  record(res, [200, 201, 409, 429], 'purchase');
  if (res.status !== 201) {
    return;
  }
  purchased.add(1);
  const reservedAt = Date.now();
  const id = res.json('order.id');
  const r = Math.random();
  if (r < payShare) {
    pay(id, token, reservedAt);
  } else if (r < payShare + cancelShare) {
    const c = http.post(`${BASE}/api/orders/${id}/cancel`, null, Object.assign(bearer(token), { tags: { name: 'cancel' } }));
    record(c, [200, 409, 429], 'cancel');
  }
}
