// Spike: thousands of shoppers hit one item the second its sale starts. Each buys, some pay,
// some cancel (their stock sells again). At the end the API must show no oversell:
// held units + stock_left == stock_total, stock_left >= 0.
//   k6 run -e BASE_URL=... -e ADMIN_TOKEN=... loadtest/spike.js     (SMOKE=1: seconds)
import { sleep } from 'k6';
import { SMOKE, runId, dur, login, putItem, buy, checkStock, thresholds, payThresholds } from './lib.js';

const USERS = SMOKE ? 100 : 3000;
const STOCK = SMOKE ? 50 : 500;

export const options = {
  setupTimeout: '120s',
  teardownTimeout: '120s',
  scenarios: {
    spike: {
      executor: 'ramping-vus',
      startVUs: 0,
      stages: [
        { duration: dur('5s', '1s'), target: SMOKE ? 30 : 1000 },
        { duration: dur('30s', '3s'), target: SMOKE ? 30 : 1000 },
        { duration: dur('5s', '1s'), target: 0 },
      ],
      gracefulRampDown: '5s',
    },
  },
  thresholds: thresholds(Object.assign(payThresholds(), {
    'http_req_duration{name:purchase}': [SMOKE ? 'p(99)<2000' : 'p(99)<500'],
    purchased_units: [`count>=${STOCK}`], // the whole stock sells (cancelled units sell again)
  })),
};

export function setup() {
  const run = runId();
  const item = `spike-${run}`;
  const tokens = login(`spike-${run}-u`, USERS);
  // The sale starts in two seconds: shoppers arrive before it and hammer the start.
  const starts = new Date(Math.ceil((Date.now() + 2000) / 1000) * 1000);
  putItem(item, {
    name: 'Spike item', category: 'phones', price_cents: 49900, stock: STOCK, per_user_limit: 2,
    starts_at: starts.toISOString().replace('.000Z', 'Z'),
  });
  return { tokens, item };
}

export default function (data) {
  const t = data.tokens[(__VU * 7919 + __ITER) % data.tokens.length];
  buy(data.item, t, 0.5, 0.2);
  sleep(0.05);
}

export function teardown(data) {
  checkStock(data.item, data.tokens, STOCK);
}
