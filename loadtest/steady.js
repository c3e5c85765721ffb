// Steady browse + buy mix: most shoppers read the catalogue and an item page, some buy
// one of several items, most buyers pay. Invariants per item at the end.
import http from 'k6/http';
import { sleep } from 'k6';
import { BASE, SMOKE, runId, dur, login, putItem, buy, record, checkStock, thresholds, payThresholds, latency } from './lib.js';

const USERS = SMOKE ? 50 : 1000;
const ITEMS = 5;
const STOCK = SMOKE ? 30 : 300;

export const options = {
  setupTimeout: '120s',
  teardownTimeout: '120s',
  scenarios: {
    shoppers: {
      executor: 'constant-arrival-rate',
      rate: SMOKE ? 100 : 1000,
      timeUnit: '1s',
      duration: dur('60s', '4s'),
      preAllocatedVUs: SMOKE ? 20 : 200,
      maxVUs: SMOKE ? 50 : 1000,
    },
  },
  thresholds: thresholds(Object.assign(payThresholds(), latency({
    'http_req_duration{name:items}': ['p(95)<200'],
    'http_req_duration{name:item}': ['p(95)<200'],
    'http_req_duration{name:purchase}': ['p(95)<500'],
  }))),
};

export function setup() {
  const run = runId();
  const items = [];
  for (let i = 0; i < ITEMS; i++) {
    items.push(`steady-${run}-${i}`);
    putItem(items[i], { name: `Steady ${i}`, category: 'audio', price_cents: 1999 + i, stock: STOCK, per_user_limit: 3 });
  }
  return { items, tokens: login(`steady-${run}-u`, USERS) };
}

export default function (data) {
  const list = http.get(`${BASE}/api/items`, { tags: { name: 'items' } });
  record(list, [200], 'items');
  const id = data.items[Math.floor(Math.random() * ITEMS)];
  record(http.get(`${BASE}/api/items/${id}`, { tags: { name: 'item' } }), [200], 'item');
  if (Math.random() < 0.3) {
    buy(id, data.tokens[Math.floor(Math.random() * data.tokens.length)], 0.8, 0.1);
  }
  sleep(0.1);
}

export function teardown(data) {
  for (const id of data.items) {
    checkStock(id, data.tokens, STOCK);
  }
}
