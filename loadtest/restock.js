// Admin restock during a spike: shoppers drain one item while the admin adds stock in
// steps. At the end stock_total is the initial stock plus every restock, and held units +
// stock_left == stock_total (restocks raced purchases without losing or inventing a unit).
import http from 'k6/http';
import { check, sleep } from 'k6';
import { ADMIN, BASE, SMOKE, runId, dur, login, putItem, buy, bearer, record, checkStock, thresholds, payThresholds } from './lib.js';

const USERS = SMOKE ? 100 : 2000;
const STOCK = SMOKE ? 20 : 200;
const DELTA = SMOKE ? 10 : 50;
const RESTOCKS = SMOKE ? 3 : 10;

export const options = {
  setupTimeout: '120s',
  teardownTimeout: '120s',
  scenarios: {
    shoppers: {
      executor: 'constant-vus',
      vus: SMOKE ? 30 : 800,
      duration: dur('30s', '4s'),
      exec: 'shop',
    },
    admin: {
      executor: 'shared-iterations',
      vus: 1,
      iterations: RESTOCKS,
      startTime: dur('2s', '500ms'),
      exec: 'restock',
    },
  },
  thresholds: thresholds(Object.assign(payThresholds(), {
    'checks{check:restock applied}': ['rate==1'],
  })),
};

export function setup() {
  const run = runId();
  const item = `restock-${run}`;
  putItem(item, { name: 'Restocked', category: 'phones', price_cents: 29900, stock: STOCK, per_user_limit: 2 });
  return { item, tokens: login(`restock-${run}-u`, USERS) };
}

export function shop(data) {
  buy(data.item, data.tokens[(__VU * 7919 + __ITER) % data.tokens.length], 0.6, 0.1);
  sleep(0.05);
}

export function restock(data) {
  const res = http.post(`${BASE}/api/admin/items/${data.item}/stock`, JSON.stringify({ delta: DELTA }), bearer(ADMIN));
  record(res, [200], 'restock');
  check(res, { 'restock applied': (r) => r.status === 200 });
  sleep(SMOKE ? 0.5 : 2);
}

export function teardown(data) {
  checkStock(data.item, data.tokens, STOCK + DELTA * RESTOCKS);
}
