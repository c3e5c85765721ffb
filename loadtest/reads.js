// Read-heavy mix during a sale: every open shopper page polls the catalogue and the boards
// about once a second; these come from the api's in-process snapshots.
import http from 'k6/http';
import { check, sleep } from 'k6';
import { BASE, SMOKE, runId, dur, putItem, record, thresholds, latency } from './lib.js';

export const options = {
  scenarios: {
    pages: {
      executor: 'constant-vus',
      vus: SMOKE ? 20 : 500,
      duration: dur('60s', '4s'),
    },
  },
  thresholds: thresholds(latency({
    'http_req_duration{name:items}': ['p(95)<100'],
    'http_req_duration{name:item}': ['p(95)<100'],
    'http_req_duration{name:board}': ['p(95)<200'],
  })),
};

export function setup() {
  const run = runId();
  const ids = [];
  for (let i = 0; i < 10; i++) {
    ids.push(`reads-${run}-${i}`);
    putItem(ids[i], { name: `Reads ${i}`, category: i % 2 ? 'phones' : 'laptops', price_cents: 999, stock: 100, per_user_limit: 1 });
  }
  return { ids };
}

export default function (data) {
  const list = http.get(`${BASE}/api/items`, { tags: { name: 'items' } });
  record(list, [200], 'items');
  check(list, { 'catalogue lists items': (r) => r.status === 200 && r.json('items').length >= 10 });
  record(http.get(`${BASE}/api/items/${data.ids[__ITER % 10]}`, { tags: { name: 'item' } }), [200], 'item');
  record(http.get(`${BASE}/api/leaderboards/best-sellers?limit=10`, { tags: { name: 'board' } }), [200], 'board');
  record(http.get(`${BASE}/api/leaderboards/top-rated?limit=10&category=phones`, { tags: { name: 'board' } }), [200], 'board');
  sleep(SMOKE ? 0.2 : 1);
}
