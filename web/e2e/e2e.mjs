// End-to-end test of the shopper and admin pages in headless Chromium (Debian's chromium driven
// by playwright-core) against a real api and Redis. scripts/web-e2e.sh starts the api and sets:
//   E2E_BASE_URL     the api, e.g. http://127.0.0.1:41234
//   E2E_ADMIN_TOKEN  its FLASHSALE_ADMIN_TOKEN
//   E2E_ARTIFACTS    where screenshots (and failure screenshots) go, e.g. test-artifacts/
//   E2E_SCREENSHOTS  docs/screenshots/: refreshed when a file is missing or E2E_UPDATE_SCREENSHOTS=1
//   E2E_RESERVATION_TTL_S  the api's FLASHSALE_RESERVATION_TTL in seconds (30)
//   E2E_JWT_SECRET   its FLASHSALE_JWT_SECRET (the monitor step mints many shoppers' tokens)
//   E2E_PAY_URL, E2E_PAY_SIM_URL, E2E_PAY_SIM_KEY, E2E_PAY_TTL_S, E2E_PAY_ASYNC_S  a second api that takes payment
//                    through the payment simulator (see paymentSteps); unset: those steps are skipped
// The first api settles payment outside (FLASHSALE_PAYMENT_PROVIDER=none: Pay pays at once).
// The api must run with FLASHSALE_LIMIT_PURCHASE=1/1m:4, and FLASHSALE_LIMIT_PAY, _CANCEL and
// _RATING at 1/6s:5, so the rate-limit steps are deterministic (a refusal asks for a wait of
// seconds, not a blink).
// Steps run in order and share state; a failed step is reported and the run goes on. The last
// line is "N passed, M failed"; the exit code is 1 when anything failed.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';

const BASE = process.env.E2E_BASE_URL || 'http://127.0.0.1:8080';
const ADMIN = process.env.E2E_ADMIN_TOKEN || '';
const ARTIFACTS = process.env.E2E_ARTIFACTS || 'test-artifacts';
const SHOTS = process.env.E2E_SCREENSHOTS || '';
const UPDATE_SHOTS = process.env.E2E_UPDATE_SCREENSHOTS === '1';
const TIMEOUT = 10_000;
// The api's FLASHSALE_RESERVATION_TTL: short, so the expiry step waits little, yet long enough
// for the pay step.
const TTL_MS = 1000 * Number(process.env.E2E_RESERVATION_TTL_S || 30);

const CHROMIUM = ['/usr/lib/chromium/chromium', '/usr/bin/chromium'].find((p) => fs.existsSync(p));
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-zygote', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const run = Math.random().toString(36).slice(2, 8);
const ITEM = { id: `e2e-phone-${run}`, name: `Pocket Phone ${run}`, category: 'phones' };
const RL_ITEM = { id: `e2e-cable-${run}`, name: `USB Cable ${run}`, category: 'cables' };
const SOON_ITEM = { id: `e2e-watch-${run}`, name: `Smart Watch ${run}`, category: 'watches' };
const LOST_ITEM = { id: `e2e-case-${run}`, name: `Phone Case ${run}`, category: 'cases' };
const LIVE_ITEM = { id: `e2e-charger-${run}`, name: `Charger ${run}`, category: 'phones' };
const MON_ITEM = { id: `e2e-tablet-${run}`, name: `Tablet ${run}`, category: 'phones' };
const Q_ITEM = { id: `e2e-console-${run}`, name: `Game Console ${run}`, category: 'consoles' };
const JWT_SECRET = process.env.E2E_JWT_SECRET || '';

// shopperToken mints an HS256 token for user, as a shop's identity service sharing the secret would.
function shopperToken(user) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const body = b64({ alg: 'HS256', typ: 'JWT' }) + '.' + b64({ sub: user, exp: Math.floor(Date.now() / 1000) + 3600 });
  return body + '.' + crypto.createHmac('sha256', JWT_SECRET).update(body).digest('base64url');
}

// ---- a tiny runner ---------------------------------------------------------------------------

let passed = 0;
let failed = 0;
const failures = [];
let pages = {};

async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    failures.push(name);
    console.log(`FAIL ${name}\n     ${String(e && e.stack || e).split('\n').slice(0, 4).join('\n     ')}`);
    const slug = name.replace(/[^a-z0-9]+/gi, '-').slice(0, 60);
    for (const [who, p] of Object.entries(pages)) {
      await p.screenshot({ path: path.join(ARTIFACTS, `fail-${slug}-${who}.png`), fullPage: true }).catch(() => {});
    }
  }
}

function assert(cond, msg) { if (!cond) throw new Error(msg); }

// eventually retries fn until it stops throwing (the pages poll, so state arrives within seconds).
async function eventually(fn, what, timeout = TIMEOUT) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try { return await fn(); } catch (e) { last = e; }
    if (Date.now() > end) throw new Error(`${what}: ${last && last.message}`);
    await new Promise((r) => setTimeout(r, 150));
  }
}

async function textOf(locator) { return (await locator.innerText({ timeout: TIMEOUT })).replace(/\s+/g, ' ').trim(); }

async function expectText(locator, re, what, timeout = TIMEOUT) {
  return eventually(async () => {
    const t = await textOf(locator);
    assert(re.test(t), `${what}: got "${t}", want ${re}`);
    return t;
  }, what, timeout);
}

async function apiJSON(method, p, token, body) {
  const res = await fetch(BASE + p, {
    method,
    headers: Object.assign({ 'Content-Type': 'application/json' }, token ? { Authorization: 'Bearer ' + token } : {}),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, data: await res.json().catch(() => null) };
}

const card = (page, id) => page.locator(`article.card[data-item="${id}"]`);
const orderRows = (page, id) => page.locator(`#orders li.order[data-item="${id}"]`);
const tokenOf = (page) => page.evaluate(() => localStorage.getItem('flashsale.token'));

// saveShot screenshots a page (whole) or a locator (that element).
async function saveShot(target, name, opts = {}) {
  const file = path.join(ARTIFACTS, name);
  const whole = typeof target.goto === 'function' ? { fullPage: true } : {};
  await target.screenshot({ path: file, ...whole, ...opts });
  if (SHOTS) {
    const dest = path.join(SHOTS, name);
    if (UPDATE_SHOTS || !fs.existsSync(dest)) {
      fs.mkdirSync(SHOTS, { recursive: true });
      fs.copyFileSync(file, dest);
    }
  }
}

// ---- paying through the payment provider ----------------------------------------------------

// The second api (E2E_PAY_URL) takes payment through the payment simulator (FLASHSALE_PAYMENT_
// PROVIDER=sim, on E2E_PAY_SIM_URL) with a short reservation (E2E_PAY_TTL_S) and a slow
// pm_card_async (E2E_PAY_ASYNC_S, longer than the reservation, shorter than it plus the
// processing hold).
const PAY_BASE = process.env.E2E_PAY_URL || '';
const PAY_SIM = process.env.E2E_PAY_SIM_URL || '';
const PAY_SIM_KEY = process.env.E2E_PAY_SIM_KEY || ''; // the api's key there: its payments are visible to it only
const PAY_TTL_MS = 1000 * Number(process.env.E2E_PAY_TTL_S || 20);
const PAY_ASYNC_MS = 1000 * Number(process.env.E2E_PAY_ASYNC_S || 25);

async function paymentSteps(browser, desktop, pageErrors) {
  const PAY_ITEM = { id: `e2e-pay-${run}`, name: `Paid Gadget ${run}` };
  const ivy = await (await browser.newContext(desktop)).newPage();
  ivy.setDefaultTimeout(TIMEOUT);
  ivy.on('pageerror', (e) => pageErrors.push(`ivy: ${e.message}`));
  pages.ivy = ivy;
  const payRows = () => ivy.locator(`#orders li.order[data-item="${PAY_ITEM.id}"]`);

  // buy reserves one unit on ivy's page and answers the new order's id.
  const buy = async () => {
    const before = new Set(await payRows().evaluateAll((ns) => ns.map((n) => n.dataset.order)));
    const c = card(ivy, PAY_ITEM.id);
    await c.locator('button[type=submit]').click();
    await expectText(c.locator('.msg'), /Reserved 1 ×/, 'purchase message');
    return eventually(async () => {
      const ids = await payRows().evaluateAll((ns) => ns.map((n) => n.dataset.order));
      const id = ids.find((x) => !before.has(x));
      assert(id, 'the new order is not listed yet');
      return id;
    }, 'new order row');
  };
  const row = (id) => ivy.locator(`#orders li.order[data-order="${id}"]`);
  // pay presses the order's Pay: the shop page goes to the order's Checkout Session's hosted
  // page (the simulator's, as Stripe Checkout would be).
  const pay = async (id) => {
    await row(id).locator('button:has-text("Pay")').click();
    await ivy.waitForURL((u) => u.href.startsWith(PAY_SIM + '/c/pay/cs_'));
  };
  // payWith pays on the hosted page; a good card brings the shopper back to the shop.
  const payWith = async (card) => {
    await ivy.locator(`input[name=payment_method][value=${card}]`).check();
    await Promise.all([ivy.waitForNavigation(), ivy.locator('#pay').click()]);
  };
  let ivyToken = ''; // read on the shop page (the checkout page is another origin)
  const orderJSON = async (id) => {
    const res = await fetch(`${PAY_BASE}/api/orders/${id}`, { headers: { Authorization: 'Bearer ' + ivyToken } });
    return (await res.json()).order;
  };

  await step('payments: a shopper on a shop with a payment provider buys; Pay goes to the checkout page', async () => {
    const put = await fetch(PAY_BASE + `/api/admin/items/${PAY_ITEM.id}`, {
      method: 'PUT', headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + ADMIN },
      body: JSON.stringify({ name: PAY_ITEM.name, category: 'gadgets', price_cents: 2500, stock: 10, per_user_limit: 5 }),
    });
    assert(put.status === 201, `create: ${put.status}`);
    await ivy.goto(PAY_BASE + '/');
    await ivy.fill('#user', 'ivy-' + run);
    await ivy.press('#user', 'Enter');
    await expectText(ivy.locator('#who-name'), new RegExp('ivy-' + run), 'ivy signed in');
    ivyToken = await tokenOf(ivy);
  });

  await step('payments: buy, the hosted checkout page, pay, back on the shop page: the order turns Paid', async () => {
    const id = await buy();
    await pay(id);
    await expectText(ivy.locator('#amount'), /25\.00/, 'the amount to pay');
    await expectText(ivy.locator('#product'), new RegExp(PAY_ITEM.name), 'the item on the checkout page');
    await saveShot(ivy, 'checkout.png');
    await payWith('pm_card_visa');
    assert(ivy.url().startsWith(PAY_BASE + '/'), `back on the shop: ${ivy.url()}`);
    await expectText(row(id).locator('.badge'), /^Paid$/, 'the order is paid on the shop page', 15_000);
    await expectText(row(id).locator('.msg'), /Paid, thank you/, 'the row thanks the shopper');
    assert(!/checkout=/.test(ivy.url()), `the return query is cleaned up: ${ivy.url()}`);
  });

  await step('payments: the admin page refunds a paid order with its button; the shop page says Refunded', async () => {
    const id = await buy();
    await pay(id);
    await payWith('pm_card_visa');
    await expectText(row(id).locator('.badge'), /^Paid$/, 'paid before the refund', 15_000);
    const adm = await (await browser.newContext(desktop)).newPage();
    adm.setDefaultTimeout(TIMEOUT);
    adm.on('pageerror', (e) => pageErrors.push(`admin (payments): ${e.message}`));
    await adm.goto(PAY_BASE + '/admin');
    await adm.fill('#token', ADMIN);
    await adm.press('#token', 'Enter');
    await adm.locator('#token-set').waitFor({ state: 'visible' });
    await adm.fill('#refund-order', id);
    await adm.check('#refund-restock');
    await adm.click('#refund-go');
    await expectText(adm.locator('#refund-msg'), /refunded/, 'the admin page says the order was refunded');
    const o = await orderJSON(id);
    assert(o.status === 'refunded' && o.payment_status === 'refunded', `after the refund: ${JSON.stringify(o)}`);
    await adm.click('#refund-go'); // again: refused, it is no longer paid
    await expectText(adm.locator('#refund-msg'), /refused/, 'a second refund is refused');
    await adm.context().close();
    await ivy.reload();
    await expectText(row(id).locator('.badge'), /^Refunded$/, 'the shop page shows the order refunded', 15_000);
  });

  await step('payments: a declined card says so on the checkout page; another card then pays', async () => {
    const id = await buy();
    await pay(id);
    await payWith('pm_card_chargeDeclined');
    await expectText(ivy.locator('#result'), /declined/i, 'the checkout page says the card was declined');
    assert(await ivy.locator('#pay-form').isVisible(), 'the form stays to try another card');
    const o = await orderJSON(id);
    assert(o.status === 'reserved' && o.payment_status === 'failed', `after a decline: ${JSON.stringify(o)}`);
    await payWith('pm_card_visa');
    await expectText(row(id).locator('.badge'), /^Paid$/, 'paid with the second card', 15_000);
  });

  await step('payments: cancelling on the checkout page comes back to the shop; nothing was charged', async () => {
    const id = await buy();
    await pay(id);
    await Promise.all([ivy.waitForNavigation(), ivy.locator('#cancel').click()]);
    await expectText(row(id).locator('.msg'), /Checkout cancelled/, 'the row says the checkout was cancelled');
    await expectText(row(id).locator('.badge'), /^Reserved$/, 'still reserved');
  });

  await step('payments: a slow payment holds the reservation past its time, then pays', async () => {
    const id = await buy();
    await pay(id);
    await payWith('pm_card_async');
    await expectText(row(id).locator('.hint'), /payment processing/, 'the row shows the payment processing');
    const o = await orderJSON(id);
    await eventually(async () => assert(Date.now() > Date.parse(o.expires_at) + 1000, 'the reservation time has not run out yet'),
      'the reservation time to pass', PAY_TTL_MS + 5_000);
    assert((await orderJSON(id)).status === 'reserved', 'the order is still reserved past expires_at');
    await expectText(row(id).locator('.badge'), /^Paid$/, 'the slow payment pays the held order', PAY_ASYNC_MS + 15_000);
  });
  delete pages.ivy;
}

// ---- the scenario ----------------------------------------------------------------------------

async function main() {
  assert(CHROMIUM, 'chromium not found at /usr/lib/chromium/chromium or /usr/bin/chromium (apt-get install chromium)');
  assert(ADMIN, 'E2E_ADMIN_TOKEN is not set; run scripts/web-e2e.sh');
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS, headless: true });
  const desktop = { viewport: { width: 1280, height: 900 } };
  const phone = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };
  const admin = await (await browser.newContext(desktop)).newPage();
  const alice = await (await browser.newContext(desktop)).newPage();
  const bob = await (await browser.newContext(phone)).newPage();
  pages = { admin, alice, bob };
  const pageErrors = [];
  for (const [who, p] of Object.entries(pages)) {
    p.setDefaultTimeout(TIMEOUT);
    p.on('pageerror', (e) => { console.log(`     [${who}] page error: ${e.message}`); pageErrors.push(`${who}: ${e.message}`); });
  }

  try {
    await step('an empty shop: no empty category choice, a shop-like message, fingerprinted cached assets (desktop and phone)', async () => {
      for (const opts of [desktop, phone]) {
        const p = await (await browser.newContext(opts)).newPage();
        await p.goto(BASE + '/');
        // The message is in the page from the start (hidden): wait until the items have loaded and shown it.
        await p.locator('#items-empty').waitFor({ state: 'visible' });
        await expectText(p.locator('#items-empty'), /Nothing on sale right now/, 'empty shop message');
        assert(await p.locator('#board-cat').isHidden(), 'the "Top rated in" board shows an empty category choice');
        assert(await p.locator('#board-top').isVisible(), 'the top-rated board is hidden');
        const hint = await textOf(p.locator('#sale .hint'));
        assert(!/pushes|stream|asks the shop/i.test(hint), `engineer-speak in the shop's copy: "${hint}"`);
        const srcs = await p.evaluate(() => [...document.querySelectorAll('script[src], link[href]')].map((n) => n.getAttribute('src') || n.getAttribute('href')));
        for (const u of srcs) assert(/^\/assets\/.+\?v=[0-9a-f]{16}$/.test(u), `an asset linked without its fingerprint: ${u}`);
        assert(srcs.some((u) => u.startsWith('/assets/favicon.svg?v=')), `no favicon linked: ${srcs.join(', ')}`);
        await p.context().close();
      }
      // The shop's script: cached for good under its fingerprint, gzip to a browser.
      const page = await (await browser.newContext(desktop)).newPage();
      const [resp] = await Promise.all([page.waitForResponse((r) => r.url().includes('/assets/shop.js')), page.goto(BASE + '/')]);
      const h = await resp.allHeaders();
      assert(h['cache-control'] === 'public, max-age=31536000, immutable', `shop.js Cache-Control: ${h['cache-control']}`);
      assert(h['content-encoding'] === 'gzip' && /^W\/"[0-9a-f]{16}"$/.test(h.etag || ''), `shop.js: encoding ${h['content-encoding']}, ETag ${h.etag}`);
      await page.context().close();
    });

    await step("the shop's own sign-in hands the page a token (#token=, postMessage); with dev login off the page says where to sign in", async () => {
      for (const [opts, who] of [[desktop, `hook-d-${run}`], [phone, `hook-p-${run}`]]) {
        const p = await (await browser.newContext(opts)).newPage();
        await p.goto(BASE + '/#token=' + shopperToken(who));
        await expectText(p.locator('#who-name'), new RegExp(`^${who}$`), 'the name from the handed-in token');
        assert(!(await p.evaluate(() => location.hash)), 'the token stays in the address bar');
        assert(await p.locator('#login').isHidden(), 'the login form still shows');
        await expectText(p.locator('#orders-empty'), /No orders yet/, "the token works: the shopper's (empty) orders load");
        // A page of the same origin (the shop's sign-in) posts the next shopper's token.
        await p.click('#logout');
        await p.evaluate((t) => window.postMessage({ type: 'flashsale.token', token: t }, location.origin), shopperToken(who + '-2'));
        await expectText(p.locator('#who-name'), new RegExp(`^${who}-2$`), 'the name from the posted token');
        // With FLASHSALE_DEV_LOGIN off, POST /api/login is 404: the page says to sign in through the shop.
        await p.click('#logout');
        await p.route('**/api/login', (r) => r.fulfill({ status: 404, contentType: 'application/json',
          body: JSON.stringify({ error: { code: 'not_found', message: 'no such route' } }) }));
        await p.fill('#user', 'someone');
        await p.press('#user', 'Enter');
        await expectText(p.locator('#notice'), /Sign in through your shop account/, 'dev login off message');
        assert(!/may have been removed/.test(await textOf(p.locator('#notice'))), 'the old "Not found" message');
        await p.context().close();
      }
    });

    await step('the monitor without a token asks for one instead of showing empty charts (desktop and phone)', async () => {
      for (const opts of [desktop, phone]) {
        const p = await (await browser.newContext(opts)).newPage();
        await p.goto(BASE + '/admin/monitor');
        await expectText(p.locator('#monitor-prompt'), /Enter the admin token/, 'monitor prompt');
        assert(await p.locator('#monitor-charts').isHidden(), 'empty charts show without a token');
        await p.context().close();
      }
    });

    await step('admin page: the admin token is accepted and kept in session storage only', async () => {
      await admin.goto(BASE + '/admin');
      await admin.fill('#token', 'wrong-token');
      await admin.click('#token-form button[type=submit]');
      await expectText(admin.locator('#notice'), /refused/i, 'wrong token message');
      await admin.fill('#token', ADMIN);
      await admin.press('#token', 'Enter');
      await admin.locator('#token-set').waitFor({ state: 'visible' });
      const stored = await admin.evaluate(() => ({ s: sessionStorage.getItem('flashsale.admin-token'), l: localStorage.length }));
      assert(stored.s === ADMIN && stored.l === 0, 'token should be in sessionStorage only');
    });

    await step('admin form: validation refuses bad input and sends nothing', async () => {
      await admin.fill('#f-id', 'bad id!');
      await admin.fill('#f-price', '12.345');
      await admin.fill('#f-limit', '0');
      await admin.fill('#f-starts', '2030-01-02T10:00:00');
      await admin.fill('#f-ends', '2030-01-01T10:00:00');
      await admin.click('#item-save');
      await expectText(admin.locator('#item-msg'), /fix the marked fields/i, 'form error summary');
      for (const f of ['id', 'name', 'price', 'limit', 'ends']) {
        assert(await admin.getAttribute('#f-' + f, 'aria-invalid') === 'true', `#f-${f} should be marked invalid`);
        assert((await textOf(admin.locator(`#f-${f}-err`))).length > 0, `#f-${f} should explain the problem`);
      }
      assert(await admin.evaluate(() => document.activeElement.id) === 'f-id', 'focus should move to the first bad field');
    });

    await step('admin form: an end date in the past is refused (form and API, with a clear 400)', async () => {
      await admin.click('#item-new');
      await admin.fill('#f-id', `e2e-late-${run}`);
      await admin.fill('#f-name', 'Too Late');
      await admin.fill('#f-price', '1.00');
      await admin.fill('#f-stock', '1');
      await admin.fill('#f-starts', '');
      const local = (d) => new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
      await admin.fill('#f-ends', local(new Date(Date.now() - 3600_000)));
      let puts = 0;
      const count = (req) => { if (req.method() === 'PUT') puts++; };
      admin.on('request', count);
      await admin.click('#item-save');
      await expectText(admin.locator('#f-ends-err'), /in the past/, 'the end date is refused');
      assert(await admin.getAttribute('#f-ends', 'aria-invalid') === 'true', '#f-ends marked invalid');
      admin.off('request', count);
      assert(puts === 0, `the form sent ${puts} PUT`);
      await saveShot(admin.locator('#item-form'), 'admin-past-end.png');
      const r = await admin.evaluate(async ([tok, id]) => {
        const res = await fetch('/api/admin/items/' + id, { method: 'PUT', headers: { Authorization: 'Bearer ' + tok, 'Content-Type': 'application/json' },
          body: JSON.stringify({ name: 'Too Late', price_cents: 100, stock: 1, per_user_limit: 1, ends_at: new Date(Date.now() - 3600_000).toISOString() }) });
        return { status: res.status, body: await res.json() };
      }, [ADMIN, `e2e-late-${run}`]);
      assert(r.status === 400 && r.body.error.code === 'invalid_request' && /ends_at is in the past/.test(r.body.error.message),
        `API: ${r.status} ${JSON.stringify(r.body)}`);
      await admin.click('#item-new');
    });

    await step('admin creates an item with stock 3 through the form', async () => {
      await admin.click('#item-new');
      await admin.fill('#f-id', ITEM.id);
      await admin.fill('#f-name', ITEM.name);
      await admin.fill('#f-category', ITEM.category);
      await admin.fill('#f-price', '199.99');
      await admin.fill('#f-stock', '3');
      await admin.fill('#f-limit', '2');
      await admin.click('#item-save');
      await expectText(admin.locator('#item-msg'), new RegExp(`Created ${ITEM.name}.*3 in stock`), 'create message');
      const r = await apiJSON('GET', `/api/items/${ITEM.id}`);
      assert(r.status === 200 && r.data.item.stock_total === 3 && r.data.item.price_cents === 19999 && r.data.item.per_user_limit === 2,
        `item as stored: ${JSON.stringify(r.data)}`);
      await expectText(admin.locator(`#catalogue tr[data-item="${ITEM.id}"]`), /3 \/ 3/, 'catalogue row');
    });

    await step('admin edits the item (name) without touching its stock', async () => {
      await admin.click(`#catalogue tr[data-item="${ITEM.id}"] button:has-text("Edit")`);
      assert(await admin.isDisabled('#f-stock'), 'stock is changed by restock, not by the edit form');
      ITEM.name = `Pocket Phone ${run} Pro`;
      await admin.fill('#f-name', ITEM.name);
      await admin.click('#item-save');
      await expectText(admin.locator('#item-msg'), /Saved/, 'save message');
      const r = await apiJSON('GET', `/api/items/${ITEM.id}`);
      assert(r.data.item.name === ITEM.name && r.data.item.stock_total === 3, `after edit: ${JSON.stringify(r.data)}`);
    });

    await step('two shoppers log in (one by keyboard only, one on a phone-width screen)', async () => {
      await alice.goto(BASE + '/');
      await alice.focus('#user');
      await alice.keyboard.type('alice-' + run);
      await alice.keyboard.press('Enter');
      await expectText(alice.locator('#who-name'), new RegExp('alice-' + run), 'alice signed in');
      await bob.goto(BASE + '/');
      await bob.fill('#user', 'bob-' + run);
      await bob.tap('#login button[type=submit]');
      await expectText(bob.locator('#who-name'), new RegExp('bob-' + run), 'bob signed in');
      for (const p of [alice, bob]) assert(await p.isHidden('#login'), 'the login form hides once signed in');
    });

    await step('a shopper stays signed in in a new tab of the shop (as on returning from the checkout page)', async () => {
      const tab = await alice.context().newPage();
      try {
        await tab.goto(BASE + '/');
        await expectText(tab.locator('#who-name'), new RegExp('alice-' + run), 'alice signed in in the new tab');
        assert(await tab.isHidden('#login'), 'the new tab shows no login form');
        await saveShot(tab, 'shop-new-tab-signed-in.png');
      } finally {
        await tab.close();
      }
    });

    await step('the item card shows name, price, a full stock bar and Live status', async () => {
      for (const p of [alice, bob]) {
        const c = card(p, ITEM.id);
        await expectText(c, /3 of 3 left/, 'stock text');
        const t = await textOf(c);
        assert(t.includes(ITEM.name) && /199\.99/.test(t) && /Live/.test(t), `card: ${t}`);
        const w = await c.locator('.bar > span').evaluate((n) => n.style.width);
        assert(w === '100%', `stock bar width ${w}`);
      }
    });

    await step('alice buys 2; her order shows in My orders with a countdown to expiry', async () => {
      const c = card(alice, ITEM.id);
      await c.locator('input[type=number]').fill('2');
      await c.locator('button[type=submit]').click();
      await expectText(c.locator('.msg'), /Reserved 2 ×/, 'purchase message');
      const row = orderRows(alice, ITEM.id).first();
      await expectText(row, /Reserved/, 'order row');
      await expectText(row.locator('.clock'), /Pay within 0:[0-3]\d/, 'expiry countdown');
    });

    await step("bob's page updates the stock bar live (no reload): 1 of 3 left", async () => {
      await expectText(card(bob, ITEM.id).locator('.stock-text'), /^1 of 3 left$/, 'bob sees the new stock');
    });

    await step('the shopper page takes stock from the stream: a change arrives with no GET /api/items', async () => {
      await eventually(async () => {
        assert(await alice.evaluate(() => document.body.dataset.live) === 'stream', 'alice is not on the stream');
      }, 'stream mode');
      let polls = 0;
      const count = (req) => { if (new URL(req.url()).pathname === '/api/items') polls++; };
      alice.on('request', count);
      const put = await apiJSON('PUT', `/api/admin/items/${LIVE_ITEM.id}`, ADMIN,
        { name: LIVE_ITEM.name, category: LIVE_ITEM.category, price_cents: 999, stock: 4, per_user_limit: 2 });
      assert(put.status === 201, `create: ${put.status}`);
      await expectText(card(alice, LIVE_ITEM.id).locator('.stock-text'), /^4 of 4 left$/, 'new item pushed');
      const adj = await apiJSON('POST', `/api/admin/items/${LIVE_ITEM.id}/stock`, ADMIN, { delta: 3 });
      assert(adj.status === 200, `restock: ${adj.status}`);
      await expectText(card(alice, LIVE_ITEM.id).locator('.stock-text'), /^7 of 7 left$/, 'restock pushed');
      alice.off('request', count);
      assert(polls === 0, `${polls} GET /api/items while streaming`);
    });

    await step('when the stream fails the page falls back to polling and still updates', async () => {
      const ctx = await browser.newContext(desktop);
      await ctx.route('**/api/items/stream', (route) => route.abort());
      const carol = await ctx.newPage();
      pages.carol = carol;
      let polls = 0;
      carol.on('request', (req) => { if (new URL(req.url()).pathname === '/api/items') polls++; });
      await carol.goto(BASE + '/');
      await expectText(card(carol, LIVE_ITEM.id).locator('.stock-text'), /^7 of 7 left$/, 'catalogue by polling');
      const adj = await apiJSON('POST', `/api/admin/items/${LIVE_ITEM.id}/stock`, ADMIN, { delta: 1 });
      assert(adj.status === 200, `restock: ${adj.status}`);
      await expectText(card(carol, LIVE_ITEM.id).locator('.stock-text'), /^8 of 8 left$/, 'restock by polling');
      assert(await carol.evaluate(() => document.body.dataset.live) === 'poll', 'carol should be polling');
      assert(polls >= 2, `only ${polls} polls`);
      await ctx.close();
      delete pages.carol;
    });

    await step('bob buys the last one', async () => {
      const c = card(bob, ITEM.id);
      await c.locator('button[type=submit]').tap();
      await expectText(c.locator('.msg'), /Reserved 1 ×/, 'purchase message');
      await expectText(orderRows(bob, ITEM.id).first(), /Reserved/, 'bob order row');
    });

    await step('a sold-out item shows a disabled "Sold out" button (desktop and phone)', async () => {
      for (const p of [bob, alice]) {
        const c = card(p, ITEM.id);
        await expectText(c.locator('.badge'), /Sold out/, 'sold-out badge');
        await expectText(c.locator('button[type=submit]'), /^Sold out$/, 'sold-out button');
        assert(await c.locator('button[type=submit]').isDisabled(), 'Buy stays enabled on a sold-out item');
      }
    });

    await step('alice pays her reservation', async () => {
      const row = orderRows(alice, ITEM.id).first();
      await row.locator('button:has-text("Pay")').click();
      await expectText(orderRows(alice, ITEM.id).first().locator('.badge'), /Paid/, 'paid badge');
    });

    await step("the card's message follows its order: no \"Pay within\" once it is paid", async () => {
      const msg = card(alice, ITEM.id).locator('.msg');
      await expectText(msg, /^Paid, thank you!/, 'the card says the order is paid');
      assert(!/Pay within/.test(await textOf(msg)), 'the card still counts down to a payment');
      await saveShot(card(alice, ITEM.id), 'shop-card-paid.png');
    });

    await step('alice rates the item 5 stars', async () => {
      const row = orderRows(alice, ITEM.id).first();
      await row.locator('.stars button[data-stars="5"]').click();
      await expectText(orderRows(alice, ITEM.id).first().locator('.msg'), /Average 5\.0 from 1 rating/, 'rating answer');
      assert(await row.locator('.stars button[data-stars="5"]').getAttribute('aria-pressed') === 'true', 'the 5th star is pressed');
    });

    await step('the leaderboards show the item (top rated, top rated in its category, best sellers)', async () => {
      await expectText(alice.locator('#lb-top'), new RegExp(ITEM.name), 'top-rated board');
      await alice.selectOption('#lb-cat', ITEM.category);
      await expectText(alice.locator('#lb-cat-list'), new RegExp(ITEM.name), 'category board');
      await expectText(alice.locator('#lb-best'), new RegExp(`${ITEM.name} 2 sold`), 'best-sellers board');
    });

    await step("bob cancels; the stock comes back on alice's page", async () => {
      const row = orderRows(bob, ITEM.id).first();
      await row.locator('button:has-text("Cancel")').tap();
      await expectText(orderRows(bob, ITEM.id).first().locator('.badge'), /Cancelled/, 'cancelled badge');
      await expectText(card(alice, ITEM.id).locator('.stock-text'), /^1 of 3 left$/, 'stock back on alice page');
      await expectText(card(alice, ITEM.id).locator('.badge'), /Live/, 'live again');
    });

    await step("the card's message follows its order: cancelled, no countdown", async () => {
      const msg = card(bob, ITEM.id).locator('.msg');
      await expectText(msg, /You cancelled this order/, 'the card says the order is cancelled');
      assert(!/Pay within/.test(await textOf(msg)), 'the card still counts down to a payment');
    });

    await step('admin restocks +5 from the catalogue table', async () => {
      const row = admin.locator(`#catalogue tr[data-item="${ITEM.id}"]`);
      await row.locator('input[type=number]').fill('5');
      await row.locator('button:has-text("Restock")').click();
      await expectText(admin.locator('#stock-msg'), /added 5; now 6 left of 8/, 'restock message');
      await expectText(card(bob, ITEM.id).locator('.stock-text'), /^6 of 8 left$/, 'bob sees the restock');
    });

    await step('a double click on Buy sends one request and creates one order', async () => {
      const tok = await tokenOf(bob);
      const before = (await apiJSON('GET', '/api/orders', tok)).data.orders.filter((o) => o.item_id === ITEM.id).length;
      let posts = 0;
      const count = (req) => { if (req.method() === 'POST' && req.url().endsWith(`/api/items/${ITEM.id}/purchase`)) posts++; };
      bob.on('request', count);
      const c = card(bob, ITEM.id);
      await c.locator('input[type=number]').fill('1');
      await c.locator('button[type=submit]').dblclick();
      await expectText(c.locator('.msg'), /Reserved 1 ×/, 'purchase message');
      await bob.waitForTimeout(1000); // a second request, if any, would have been sent by now
      bob.off('request', count);
      const after = (await apiJSON('GET', '/api/orders', tok)).data.orders.filter((o) => o.item_id === ITEM.id);
      assert(after.length === before + 1, `orders for the item: ${before} before, ${after.length} after`);
      assert(posts === 1, `purchase requests sent: ${posts}`);
      const it = (await apiJSON('GET', `/api/items/${ITEM.id}`)).data.item;
      assert(it.stock_left === 5, `stock_left ${it.stock_left}, want 5`);
    });

    await step('a purchase whose answer is lost (503) is sent again with the same key: one order', async () => {
      const put = await apiJSON('PUT', `/api/admin/items/${LOST_ITEM.id}`, ADMIN,
        { name: LOST_ITEM.name, category: LOST_ITEM.category, price_cents: 1999, stock: 3, per_user_limit: 2 });
      assert(put.status === 201, `create ${LOST_ITEM.id}: ${put.status}`);
      const c = card(bob, LOST_ITEM.id);
      await expectText(c.locator('.stock-text'), /^3 of 3 left$/, 'case card');
      const url = `**/api/items/${LOST_ITEM.id}/purchase`;
      const keys = [];
      // The first request reaches the api (the order is made) but its answer is replaced by
      // the 503 "outcome unknown" a stalled Redis gives; later ones pass through.
      await bob.route(url, async (route) => {
        keys.push(route.request().headers()['idempotency-key']);
        const real = await route.fetch();
        if (keys.length > 1) return route.fulfill({ response: real });
        return route.fulfill({ status: 503, contentType: 'application/json',
          body: JSON.stringify({ error: { code: 'unavailable', message: 'the outcome is unknown' } }) });
      });
      await c.locator('input[type=number]').fill('1');
      await c.locator('button[type=submit]').click();
      await expectText(c.locator('.msg'), /Reserved 1 ×/, 'purchase message after the retry');
      await bob.unroute(url);
      assert(keys.length === 2 && keys[0] && keys[0] === keys[1], `Idempotency-Keys sent: ${JSON.stringify(keys)}`);
      const it = (await apiJSON('GET', `/api/items/${LOST_ITEM.id}`)).data.item;
      assert(it.stock_left === 2, `stock_left ${it.stock_left}, want 2: one order, not two`);
    });

    await step('CSV import loads good lines and reports bad ones by line number', async () => {
      const starts = new Date(Date.now() + 3600_000).toISOString().replace(/\.\d{3}Z$/, 'Z');
      const csv = [
        'id,name,category,price_cents,stock,per_user_limit,starts_at,ends_at',
        `${SOON_ITEM.id},${SOON_ITEM.name},${SOON_ITEM.category},4999,10,1,${starts},`,
        `bad-price-${run},Broken,misc,abc,5,1,,`,
        `${RL_ITEM.id},${RL_ITEM.name},${RL_ITEM.category},599,100,50,,`,
        `bad-limit-${run},Broken too,misc,100,5,0,,`,
      ].join('\n') + '\n';
      await admin.fill('#csv-text', csv);
      await admin.click('#import-go');
      await expectText(admin.locator('#import-msg'), /Created 2, updated 0; 2 lines skipped/, 'import summary');
      const report = await textOf(admin.locator('#import-report tbody'));
      assert(/^3 .*price_cents/.test(report) && /5 .*per_user_limit/.test(report), `report: ${report}`);
      assert((await apiJSON('GET', `/api/items/bad-price-${run}`)).status === 404, 'a bad line must not load');
    });

    await step('an upcoming item shows a countdown to its start and cannot be bought yet', async () => {
      const c = card(bob, SOON_ITEM.id);
      await expectText(c.locator('.clock'), /Starts in (1:00:00|59:\d\d)/, 'start countdown');
      await expectText(c.locator('.badge'), /Upcoming/, 'upcoming badge');
      assert(await c.locator('button[type=submit]').isDisabled(), 'buy is disabled before the start');
    });

    await step('rate limited purchases show the retry time and hold the button', async () => {
      const c = card(bob, RL_ITEM.id);
      await expectText(c, /100 of 100 left/, 'cable card');
      let msg = '';
      for (let i = 0; i < 10 && !/wait/i.test(msg); i++) {
        await c.locator('button[type=submit]').tap();
        msg = await eventually(async () => {
          const t = await textOf(c.locator('.msg'));
          assert(t && !(await c.locator('button[type=submit]').textContent()).includes('Buying'), 'waiting for the answer');
          return t;
        }, 'purchase answer');
      }
      assert(/Too many requests\. Please wait \d+ s/.test(msg), `message: ${msg}`);
      assert(await c.locator('button[type=submit]').isDisabled(), 'buy is held while rate limited');
      assert(/Wait \d+ s/.test(await textOf(c.locator('button[type=submit]'))), 'button says how long');
    });

    await step('every error code of the contract has its own sentence', async () => {
      const out = await alice.evaluate(() => {
        const f = window.flashsale;
        return f.codes.map((code) => [code, f.describe({ status: 409, error: { code, message: 'zzz' }, retryAfter: 7 }, {})]);
      });
      for (const [code, text] of out) assert(text && !/zzz \(HTTP/.test(text), `${code} falls back to the raw message: ${text}`);
      const rl = out.find(([c]) => c === 'rate_limited')[1];
      assert(/7 s/.test(rl), `rate_limited message should carry the retry time: ${rl}`);
    });

    await step('admin sees the reconciliation report or a friendly message', async () => {
      await admin.click('#recon-load');
      await eventually(async () => {
        const msg = await textOf(admin.locator('#recon-msg')).catch(() => '');
        const out = await admin.locator('#recon-out').innerText();
        // Before any run the answer is {"run": null}: a message, never a raw "run: null".
        assert(/No reconciliation report yet/.test(msg) || /"status"/.test(out), `recon view: "${msg}" "${out}"`);
        assert(!/run"?:?\s*null/.test(out), `recon view shows a null run raw: "${out}"`);
      }, 'reconciliation view');
    });

    await step('pages are accessible: every control has a label, no horizontal scroll on a phone', async () => {
      for (const [who, p] of Object.entries(pages)) {
        const unlabeled = await p.evaluate(() => [...document.querySelectorAll('input, select, textarea, button')]
          .filter((n) => n.type !== 'hidden' && n.offsetParent !== null)
          .filter((n) => !(n.labels && n.labels.length) && !n.getAttribute('aria-label') && !n.textContent.trim())
          .map((n) => n.outerHTML.slice(0, 80)));
        assert(unlabeled.length === 0, `${who}: unlabeled controls ${unlabeled.join(', ')}`);
      }
      const phoneAdmin = await (await browser.newContext(phone)).newPage();
      pages.phoneAdmin = phoneAdmin;
      await phoneAdmin.goto(BASE + '/admin');
      for (const [who, p] of [['bob', bob], ['admin (phone)', phoneAdmin]]) {
        const over = await p.evaluate((w) => document.documentElement.scrollWidth - w, phone.viewport.width);
        assert(over <= 0, `${who}: page is ${over}px wider than the screen`);
      }
      await saveShot(phoneAdmin, 'admin-phone.png');
    });

    await step('screenshots of both pages', async () => {
      for (const p of [alice, bob, admin]) await p.evaluate(() => { window.getSelection().removeAllRanges(); window.scrollTo(0, 0); });
      await saveShot(alice, 'shop.png');
      await saveShot(bob, 'shop-phone.png');
      await saveShot(admin, 'admin.png');
    });

    await step('an unpaid reservation expires when its countdown ends and its stock returns', async () => {
      const row = () => bob.locator(`#orders li.order[data-item="${ITEM.id}"]`).first();
      await expectText(row().locator('.badge'), /Reserved/, 'the double-click order is still reserved');
      await expectText(row().locator('.badge'), /Expired/, 'expired badge', 2 * TTL_MS + TIMEOUT);
      await expectText(card(bob, ITEM.id).locator('.stock-text'), /^6 of 8 left$/, 'stock back after expiry');
    });

    await step("admin: the reconciliation panel is a table of drift by kind with the runs' history (desktop and phone)", async () => {
      const run = { id: 42, started_at: '2030-01-01T12:00:00Z', finished_at: '2030-01-01T12:00:03Z', status: 'drift', fencing_token: 7,
        report: { items: 12, orders: 340, duration_ms: 2500, unverified: [],
          drift: [{ kind: 'order_status', item_id: 'phone', order_id: 'phone.1', field: 'status', redis: 'paid', postgres: 'reserved' },
            { kind: 'order_status', item_id: 'phone', order_id: 'phone.2', field: 'status', redis: 'paid', postgres: 'reserved' },
            { kind: 'stock_counter', item_id: 'cable', field: 'stock_left', redis: '3', postgres: '4' }] } };
      const runs = [{ id: 42, started_at: run.started_at, finished_at: run.finished_at, status: 'drift', fencing_token: 7, drift: 3, unverified: 0, error: null },
        { id: 41, started_at: '2030-01-01T11:00:00Z', finished_at: '2030-01-01T11:00:02Z', status: 'ok', fencing_token: 6, drift: 0, unverified: 0, error: null }];
      const phoneAdmin = await (await browser.newContext(phone)).newPage();
      for (const p of [admin, phoneAdmin]) {
        await p.route('**/api/admin/reconciliation', (r) => r.fulfill({ contentType: 'application/json', body: JSON.stringify({ run }) }));
        await p.route('**/api/admin/reconciliation/runs?*', (r) => r.fulfill({ contentType: 'application/json', body: JSON.stringify({ runs }) }));
        if (p === phoneAdmin) {
          await p.goto(BASE + '/admin');
          await p.fill('#token', ADMIN);
          await p.press('#token', 'Enter');
          await p.locator('#token-set').waitFor({ state: 'visible' });
        }
        if (p === phoneAdmin) await p.locator('#recon-load').tap();
        else await p.click('#recon-load');
        await expectText(p.locator('table.recon tr[data-kind="order_status"]'), /Order status 2 phone \/ phone\.1/, 'order_status row');
        await expectText(p.locator('table.recon tr[data-kind="stock_counter"]'), /Stock counter 1 cable/, 'stock_counter row');
        await expectText(p.locator('#recon-out dl.summary'), /Drift found/, 'status');
        await expectText(p.locator('table.recon-history tr[data-run="41"]'), /#41 .* No drift 0 0/, 'history row');
        assert(await p.locator('table.recon-history tbody tr').count() === 2, 'history rows');
        assert(await p.locator('#recon-out pre.report').isHidden(), 'the raw JSON shows unfolded');
        const over = await p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        assert(over <= 0, `the panel is ${over}px wider than the screen`);
        await p.unroute('**/api/admin/reconciliation');
        await p.unroute('**/api/admin/reconciliation/runs?*');
      }
      await saveShot(admin.locator('#recon-h').locator('xpath=..'), 'admin-reconciliation.png');
      await phoneAdmin.context().close();
    });

    await step('admin: the sales report is a table with funnel and refusal charts; the CSV downloads (desktop and phone)', async () => {
      // The real route answers (the record may be empty, or Postgres absent: 503 with the contract's body).
      const real = await admin.evaluate(async (tok) => {
        const r = await fetch('/api/admin/reports/sales', { headers: { Authorization: 'Bearer ' + tok } });
        return { status: r.status, body: await r.json() };
      }, ADMIN);
      assert((real.status === 200 && Array.isArray(real.body.items)) || (real.status === 503 && real.body.error.code === 'unavailable'),
        `GET /api/admin/reports/sales: ${real.status} ${JSON.stringify(real.body).slice(0, 200)}`);
      const sale = (id, name, o) => Object.assign({ item_id: id, name, starts_at: '2030-01-01T12:00:00Z', ends_at: '2030-01-01T13:00:00Z',
        stock_total: 500, sold_units: 480, sell_out_seconds: 94.2, revenue_cents: 47952000, refunded_cents: 99900,
        funnel: { joined: 1800, admitted: 620, reserved: 560, paid: 478, expired: 61, cancelled: 21, refunded: 1 },
        refused: { sold_out: 3200, limit_exceeded: 41, rate_limited: 17, sale_not_started: 230, sale_ended: 12, queue_required: 9 },
        peak_purchases_per_second: 118, wait_seconds: { p50: 42.5, p99: 188 }, fairness: { fifo_inversions: 0 } }, o);
      const items = [sale('phone-x', 'Pocket Phone X'), sale('cable', 'USB Cable', { sell_out_seconds: null, sold_units: 120, stock_total: 900,
        funnel: { joined: 0, admitted: 0, reserved: 150, paid: 120, expired: 20, cancelled: 10, refunded: 0 }, wait_seconds: { p50: null, p99: null } })];
      const csv = 'item_id,name\nphone-x,Pocket Phone X\ncable,USB Cable\n';
      const phoneAdmin = await (await browser.newContext(Object.assign({ acceptDownloads: true }, phone))).newPage();
      const asked = [];
      for (const p of [admin, phoneAdmin]) {
        await p.route('**/api/admin/reports/sales*', (r) => {
          asked.push(r.request().url());
          if (/text\/csv/.test(r.request().headers().accept || '')) return r.fulfill({ contentType: 'text/csv', body: csv });
          return r.fulfill({ contentType: 'application/json', body: JSON.stringify({ items }) });
        });
        if (p === phoneAdmin) {
          await p.goto(BASE + '/admin');
          await p.fill('#token', ADMIN);
          await p.press('#token', 'Enter');
          await p.locator('#token-set').waitFor({ state: 'visible' });
        }
        await p.fill('#s-from', '2030-01-01T00:00:00');
        await p.fill('#s-item', 'bad id!');
        await p.click('#sales-load');
        await expectText(p.locator('#sales-msg'), /letters, digits/, 'a bad item id is refused before any request');
        await p.fill('#s-item', '');
        await p.click('#sales-load');
        await expectText(p.locator('#sales-table tr[data-item="phone-x"]'), /Pocket Phone X \(phone-x\).*480 \/ 500.*1 min 34 s/s, 'phone-x row');
        await expectText(p.locator('#sales-table tr[data-item="cable"]'), /–/, 'a sale that did not sell out');
        assert(/from=2030-01-01T/.test(asked[asked.length - 1]), `the window is sent: ${asked[asked.length - 1]}`);
        await eventually(async () => {
          const f = await p.locator('#c-funnel').getAttribute('data-values');
          assert(f === '1800,620,560,478,61,21,1', `funnel drawn: ${f}`);
          const r = await p.locator('#c-refused').getAttribute('data-values');
          assert(r === '3200,41,17,230,12,9', `refusals drawn: ${r}`);
          assert(await p.locator('#c-funnel canvas').count() === 1, 'the funnel is a chart');
        }, 'charts');
        await p.locator('#sales-table tr[data-item="cable"] button').click();
        await eventually(async () => {
          assert(await p.locator('#c-funnel').getAttribute('data-values') === '0,0,150,120,20,10,0', 'charts follow the chosen item');
        }, 'chosen item');
        const [download] = await Promise.all([p.waitForEvent('download'), p.click('#sales-csv')]);
        const file = await download.path();
        assert(fs.readFileSync(file, 'utf8') === csv && download.suggestedFilename() === 'sales-report.csv', 'CSV downloaded');
        const over = await p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        assert(over <= 0, `the report is ${over}px wider than the screen`);
        if (p === phoneAdmin) await saveShot(p.locator('#sales-h').locator('xpath=..'), 'admin-sales-report-phone.png');
        else {
          await p.locator('#sales-table tr[data-item="phone-x"] button').click();
          await saveShot(p.locator('#sales-h').locator('xpath=..'), 'admin-sales-report.png');
        }
        await p.unroute('**/api/admin/reports/sales*');
      }
      await phoneAdmin.context().close();
    });

    await step('admin: the new-item form lines its fields up row by row (desktop; on a phone the accessibility step checks it fits)', async () => {
      const tops = await admin.evaluate(() => {
        const rows = new Map();
        for (const f of document.querySelectorAll('#item-form .fields > .field')) {
          const r = f.getBoundingClientRect();
          const key = Math.round(r.top);
          rows.set(key, (rows.get(key) || 0) + 1);
        }
        return [...rows.values()];
      });
      // Nine fields and the waiting room: rows of four, the waiting room a row of its own.
      assert(tops.length <= 5 && tops.every((n) => n >= 1), `field rows by top: ${JSON.stringify(tops)}`);
      const firstRow = await admin.evaluate(() => [...document.querySelectorAll('#item-form .fields > .field')].slice(0, 4)
        .map((f) => Math.round(f.querySelector('input').getBoundingClientRect().top)));
      assert(new Set(firstRow).size === 1, `the first row's inputs are not aligned: ${firstRow}`);
    });

    await step('the sale monitor draws every series and its charts move during a sale (desktop and phone)', async () => {
      assert(JWT_SECRET, 'E2E_JWT_SECRET is not set; run scripts/web-e2e.sh');
      const put = await apiJSON('PUT', `/api/admin/items/${MON_ITEM.id}`, ADMIN,
        { name: MON_ITEM.name, category: MON_ITEM.category, price_cents: 30000, stock: 120, per_user_limit: 4 });
      assert(put.status === 201, `create: ${put.status}`);
      const monitor = await (await browser.newContext(desktop)).newPage();
      const phoneMon = await (await browser.newContext(phone)).newPage();
      pages.monitor = monitor;
      pages.phoneMonitor = phoneMon;
      for (const p of [monitor, phoneMon]) {
        p.on('pageerror', (e) => pageErrors.push(`monitor: ${e.message}`));
        await p.goto(BASE + '/admin/monitor');
        await p.fill('#token', ADMIN);
        await p.press('#token', 'Enter');
        await p.locator('#token-set').waitFor({ state: 'visible' });
      }
      // A sale in the background: 40 shoppers buying one unit every ~150 ms between them
      // for ~8 s: reservations, then sold_out, and rate_limited past each shopper's burst.
      let selling = true;
      const outcomes = {};
      const sale = (async () => {
        for (let i = 0; selling; i++) {
          const user = `mon-${run}-${i % 40}`;
          fetch(`${BASE}/api/items/${MON_ITEM.id}/purchase`, {
            method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + shopperToken(user) },
            body: '{"quantity":1}',
          }).then((r) => { outcomes[r.status] = (outcomes[r.status] || 0) + 1; }, () => {});
          await new Promise((r) => setTimeout(r, 40));
        }
      })();
      try {
        const fig = monitor.locator('#c-purchases');
        await eventually(async () => {
          const series = (await fig.getAttribute('data-series')) || '';
          assert(/reserved/.test(series), `purchase series: "${series}"`);
          const stock = (await monitor.locator('#c-stock').getAttribute('data-series')) || '';
          assert(stock.includes(MON_ITEM.id), `stock series: "${stock}"`);
          const last = (await monitor.locator('#c-stock').getAttribute('data-last')) || '';
          assert(!last.includes(`${MON_ITEM.id} 120`), `stock has not moved: ${last}`);
        }, 'monitor series', 20_000);
        for (const id of ['c-purchases', 'c-stock', 'c-latency', 'c-requests', 'c-expired', 'c-backlog']) {
          const f = monitor.locator('#' + id);
          assert(await f.locator('canvas').count() >= 1, `${id}: no canvas`);
          assert(Number(await f.getAttribute('data-points')) === 120, `${id}: ${await f.getAttribute('data-points')} points`);
        }
        const legend = await textOf(monitor.locator('#c-purchases .u-legend'));
        assert(/reserved/.test(legend), `legend: ${legend}`);
        const latency = (await monitor.locator('#c-latency').getAttribute('data-last')) || '';
        assert(/p50 \d/.test(latency) && /p99 \d/.test(latency), `latency: ${latency}`);
        // A Redis primary change shows on the monitor (none in this sale: 0).
        const expired = (await monitor.locator('#c-expired').getAttribute('data-last')) || '';
        assert(/Redis failovers 0/.test(expired), `failovers: ${expired}`);
        const before = await fig.screenshot();
        await monitor.waitForTimeout(3000);
        const after = await fig.screenshot();
        assert(!before.equals(after), 'the purchases chart did not move in 3 s');
        await saveShot(monitor, 'monitor.png');

        // Phone width: one column, no horizontal scroll, charts fit the screen.
        await eventually(async () => {
          const series = (await phoneMon.locator('#c-purchases').getAttribute('data-series')) || '';
          assert(/reserved/.test(series), `phone purchase series: "${series}"`);
        }, 'phone monitor series', 20_000);
        const over = await phoneMon.evaluate((w) => document.documentElement.scrollWidth - w, phone.viewport.width);
        assert(over <= 0, `monitor is ${over}px wider than a phone`);
        const widest = await phoneMon.evaluate(() => Math.max(...[...document.querySelectorAll('.chart canvas')].map((c) => c.getBoundingClientRect().right)));
        assert(widest <= phone.viewport.width, `a chart reaches ${widest}px on a ${phone.viewport.width}px screen`);
        const pBefore = await phoneMon.locator('#c-purchases').screenshot();
        await phoneMon.waitForTimeout(3000);
        const pAfter = await phoneMon.locator('#c-purchases').screenshot();
        assert(!pBefore.equals(pAfter), 'the phone chart did not move in 3 s');
        await saveShot(phoneMon, 'monitor-phone.png');
      } finally {
        selling = false;
        await sale;
      }
      assert(outcomes[201] > 0, `no purchase reserved: ${JSON.stringify(outcomes)}`);
    });

    // The waiting room: two units, one pass at a time. A first shopper (outside the pages) holds
    // the only pass; alice and bob join behind her and watch their places; when she buys, alice
    // is admitted and buys with her pass; once both orders are paid nothing can come back, and
    // bob's ticket turns sold_out.
    const QLINE = (p) => card(p, Q_ITEM.id).locator('.line-status');
    const QWAIT = 30_000; // polls are paced by poll_after_ms (1..10 s)
    const dana = `dana-${run}`;
    let danaPass = '';

    await step('the monitor is readable at 390 px: no two time-axis labels overlap', async () => {
      const p = pages.phoneMonitor;
      assert(p, 'the phone monitor of the previous step');
      assert(await p.evaluate(() => window.innerWidth) === 390, 'a 390 px wide screen');
      await eventually(async () => {
        const figs = await p.evaluate(() => [...document.querySelectorAll('figure.chart')].map((f) => {
          const ctx = document.createElement('canvas').getContext('2d');
          ctx.font = f.dataset.xfont;
          const ticks = JSON.parse(f.dataset.xticks || '[]');
          return { id: f.id, ticks: ticks.map(([x, label]) => ({ x, w: ctx.measureText(label).width, label })) };
        }));
        assert(figs.length === 6, `${figs.length} charts`);
        for (const f of figs) {
          assert(f.ticks.length >= 2, `${f.id}: ${f.ticks.length} time labels`);
          for (let i = 1; i < f.ticks.length; i++) {
            const a = f.ticks[i - 1];
            const b = f.ticks[i];
            const gap = (b.x - a.x) - (a.w + b.w) / 2;
            assert(gap >= 4, `${f.id}: "${a.label}" and "${b.label}" are ${gap.toFixed(1)} px apart`);
          }
        }
      }, 'time-axis labels apart');
      await saveShot(p, 'monitor-phone-axes.png');
    });

    await step('the monitor gives every series of its charts a colour of its own', async () => {
      const p = await (await browser.newContext(desktop)).newPage();
      await p.goto(BASE + '/admin/monitor');
      await p.fill('#token', ADMIN);
      await p.press('#token', 'Enter');
      const ids = ['c-latency', 'c-requests', 'c-expired', 'c-backlog'];
      const colours = await eventually(async () => {
        const got = await p.evaluate((ids) => ids.map((id) => document.getElementById(id).dataset.colours || ''), ids);
        assert(got.every(Boolean), `charts not drawn yet: ${JSON.stringify(got)}`);
        return got.join(',').split(',');
      }, 'monitor charts drawn');
      assert(colours.length === 8 && new Set(colours).size === 8, `series share colours: ${colours.join(' ')}`);
      await p.context().close();
    });

    await step('admin creates an item with a waiting room (1 a second, 1 pass at once) through the form', async () => {
      await admin.click('#item-new');
      await admin.fill('#f-id', Q_ITEM.id);
      await admin.fill('#f-name', Q_ITEM.name);
      await admin.fill('#f-category', Q_ITEM.category);
      await admin.fill('#f-price', '499.00');
      await admin.fill('#f-stock', '2');
      await admin.fill('#f-limit', '1');
      await admin.fill('#f-qrate', '1');
      await admin.fill('#f-qmax', '1');
      await admin.fill('#f-qttl', '120');
      await admin.click('#item-save');
      await expectText(admin.locator('#item-msg'), new RegExp(`Created ${Q_ITEM.name}`), 'create message');
      const r = await apiJSON('GET', `/api/items/${Q_ITEM.id}`);
      const q = r.data && r.data.item.queue;
      assert(q && q.admit_per_second === 1 && q.max_active === 1 && q.pass_ttl_seconds === 120, `queue as stored: ${JSON.stringify(r.data)}`);
      // A first shopper joins and is admitted: she holds the only pass.
      const j = await apiJSON('POST', `/api/items/${Q_ITEM.id}/queue`, shopperToken(dana));
      assert(j.status === 200, `dana joins: ${j.status} ${JSON.stringify(j.data)}`);
      danaPass = await eventually(async () => {
        const t = (await apiJSON('GET', `/api/items/${Q_ITEM.id}/queue`, shopperToken(dana))).data.ticket;
        assert(t.state === 'admitted' && t.pass, `dana's ticket: ${JSON.stringify(t)}`);
        return t.pass;
      }, 'dana admitted', QWAIT);
    });

    await step('admin: a waiting room with one pass out says "1 pass live"', async () => {
      await expectText(admin.locator(`#catalogue tr[data-item="${Q_ITEM.id}"]`), /1 pass live/, 'singular pass', QWAIT);
      assert(!/1 passes/.test(await textOf(admin.locator(`#catalogue tr[data-item="${Q_ITEM.id}"]`))), '"1 passes"');
    });

    await step('alice and bob join the line and see their places (1 and 2); buying needs the pass', async () => {
      const ca = card(alice, Q_ITEM.id);
      await expectText(ca.locator('button[type=submit]'), /^Join the line$/, 'join button');
      await ca.locator('button[type=submit]').click();
      await expectText(QLINE(alice), /^Your place in line: 1\./, "alice's place");
      await expectText(ca.locator('button[type=submit]'), /^In line/, 'alice waits');
      assert(await ca.locator('button[type=submit]').isDisabled(), 'buy is held while waiting');
      const cb = card(bob, Q_ITEM.id);
      await cb.locator('button[type=submit]').tap();
      await expectText(QLINE(bob), /^Your place in line: 2\./, "bob's place");
      // Without a pass the api refuses the purchase before any stock moves.
      const r = await apiJSON('POST', `/api/items/${Q_ITEM.id}/purchase`, await tokenOf(bob), { quantity: 1 });
      assert(r.status === 403 && r.data.error.code === 'queue_required', `purchase without a pass: ${r.status} ${JSON.stringify(r.data)}`);
      await expectText(admin.locator(`#catalogue tr[data-item="${Q_ITEM.id}"]`), /2 in line, 1 pass live/, 'admin sees the line', QWAIT);
      await saveShot(card(bob, Q_ITEM.id), 'waiting-room-waiting.png');
    });

    await step('the first shopper buys; alice is admitted and buys with her pass, bob moves to 1', async () => {
      const r = await fetch(`${BASE}/api/items/${Q_ITEM.id}/purchase`, {
        method: 'POST', body: '{"quantity":1}',
        headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + shopperToken(dana), 'Queue-Pass': danaPass },
      });
      assert(r.status === 201, `dana buys with her pass: ${r.status}`);
      await expectText(QLINE(alice), /^It's your turn! Buy within \d/, 'alice admitted', QWAIT);
      await expectText(QLINE(bob), /^Your place in line: 1\./, 'bob moves up', QWAIT);
      const ca = card(alice, Q_ITEM.id);
      await expectText(ca.locator('button[type=submit]'), /^Buy now$/, 'buy button');
      await saveShot(ca, 'waiting-room-admitted.png');
      let pass = '';
      const spy = (req) => { if (req.method() === 'POST' && req.url().endsWith(`/api/items/${Q_ITEM.id}/purchase`)) pass = req.headers()['queue-pass'] || ''; };
      alice.on('request', spy);
      await ca.locator('button[type=submit]').click();
      await expectText(ca.locator('.msg'), /Reserved 1 ×/, 'purchase message');
      alice.off('request', spy);
      assert(pass.length > 0, 'the purchase carried no Queue-Pass');
      await expectText(QLINE(alice), /^You bought with your turn\./, 'ticket spent');
      await expectText(ca.locator('button[type=submit]'), /^Bought$/, 'bought button');
      await expectText(QLINE(bob), /^Your place in line: 1\./, 'bob still waits while orders are unpaid');
    });

    await step('once every unit is paid nothing can come back: bob sees sold out', async () => {
      const dTok = shopperToken(dana);
      const dOrder = (await apiJSON('GET', '/api/orders', dTok)).data.orders.find((o) => o.item_id === Q_ITEM.id);
      assert(dOrder && (await apiJSON('POST', `/api/orders/${dOrder.id}/pay`, dTok)).status === 200, "dana's order is paid");
      await orderRows(alice, Q_ITEM.id).first().locator('button:has-text("Pay")').click();
      await expectText(orderRows(alice, Q_ITEM.id).first().locator('.badge'), /Paid/, 'alice paid');
      await expectText(QLINE(bob), /^Sold out: nothing left to wait for\./, 'bob told sold out', QWAIT);
      const cb = card(bob, Q_ITEM.id);
      await expectText(cb.locator('button[type=submit]'), /^Sold out$/, 'sold-out button');
      assert(await cb.locator('button[type=submit]').isDisabled(), 'nothing to buy');
      const t = (await apiJSON('GET', `/api/items/${Q_ITEM.id}/queue`, await tokenOf(bob))).data.ticket;
      assert(t.state === 'sold_out' && t.position === null && t.poll_after_ms === null, `bob's ticket: ${JSON.stringify(t)}`);
    });

    // ---- review-web: defects and checks found in review --------------------------------------

    await step('a purchase whose outcome stays unknown (503 every time) says so, and Buy again reuses its key', async () => {
      const c = card(bob, LOST_ITEM.id);
      const url = `**/api/items/${LOST_ITEM.id}/purchase`;
      const keys = [];
      await bob.route(url, (route) => {
        keys.push(route.request().headers()['idempotency-key']);
        return route.fulfill({ status: 503, contentType: 'application/json',
          body: JSON.stringify({ error: { code: 'unavailable', message: 'a backing service did not answer in time; the outcome is unknown: retry with the same Idempotency-Key, or look in GET /api/orders' } }) });
      });
      await c.locator('input[type=number]').fill('1');
      await c.locator('button[type=submit]').click();
      const msg = await eventually(async () => {
        assert(keys.length === 4 && !(await textOf(c.locator('button[type=submit]'))).includes('Buying'), `attempts so far: ${keys.length}`);
        return textOf(c.locator('.msg'));
      }, 'the retries end', 20_000);
      await bob.unroute(url);
      assert(!/nothing was changed/i.test(msg), `the page claims nothing changed although the outcome is unknown: "${msg}"`);
      assert(/cannot tell/i.test(msg), `the page should say the outcome is unknown: "${msg}"`);
      assert(new Set(keys).size === 1 && keys[0], `retries must share one key: ${JSON.stringify(keys)}`);
      let again = '';
      const spy = (req) => { if (req.method() === 'POST' && req.url().endsWith(`/api/items/${LOST_ITEM.id}/purchase`)) again = req.headers()['idempotency-key'] || ''; };
      bob.on('request', spy);
      await c.locator('button[type=submit]').click();
      await expectText(c.locator('.msg'), /Reserved 1 ×/, 'purchase message on the second press');
      bob.off('request', spy);
      assert(again === keys[0], `the second press sent key ${again}, want ${keys[0]}`);
    });

    const W_ITEM = { id: `e2e-drone-${run}`, name: `Drone ${run}`, category: 'drones' };
    const WLINE = (p) => card(p, W_ITEM.id).locator('.line-status');
    let erin = null;

    await step('the waiting room backs off and says so when polls fail, then recovers', async () => {
      const put = await apiJSON('PUT', `/api/admin/items/${W_ITEM.id}`, ADMIN,
        { name: W_ITEM.name, category: W_ITEM.category, price_cents: 5000, stock: 5, per_user_limit: 1,
          queue: { admit_per_second: 1, max_active: 1, pass_ttl_seconds: 300 } });
      assert(put.status === 201, `create: ${put.status}`);
      // gus holds the only pass, so the shoppers on the page wait behind him.
      const gus = shopperToken(`gus-${run}`);
      assert((await apiJSON('POST', `/api/items/${W_ITEM.id}/queue`, gus)).status === 200, 'gus joins');
      await eventually(async () => {
        const t = (await apiJSON('GET', `/api/items/${W_ITEM.id}/queue`, gus)).data.ticket;
        assert(t.state === 'admitted', `gus: ${JSON.stringify(t)}`);
      }, 'gus admitted', QWAIT);
      erin = await (await browser.newContext(desktop)).newPage();
      pages.erin = erin;
      erin.on('pageerror', (e) => pageErrors.push(`erin: ${e.message}`));
      await erin.goto(BASE + '/');
      await erin.fill('#user', `erin-${run}`);
      await erin.press('#user', 'Enter');
      await expectText(erin.locator('#who-name'), new RegExp(`erin-${run}`), 'erin signed in');
      const c = card(erin, W_ITEM.id);
      await c.locator('button[type=submit]').click();
      await expectText(WLINE(erin), /^Your place in line: 1\./, "erin's place");
      const polls = [];
      const url = `**/api/items/${W_ITEM.id}/queue`;
      await erin.route(url, (route) => {
        if (route.request().method() !== 'GET') return route.fallback();
        polls.push(Date.now());
        return route.abort('internetdisconnected');
      });
      await expectText(c.locator('.msg'), /can't reach the shop.*trying again in 2 s/i, 'first failed poll');
      await expectText(c.locator('.msg'), /can't reach the shop.*trying again in 4 s/i, 'second failed poll: a longer wait');
      assert(polls.length === 2, `${polls.length} polls failed, want 2`);
      await erin.unroute(url);
      await expectText(c.locator('.msg'), /^$/, 'the note goes once a poll answers', 15_000);
      await expectText(WLINE(erin), /^Your place in line: 1\./, 'erin still in line');
    });

    await step('logging out forgets the waiting-room ticket: the next shopper can join the line', async () => {
      const c = card(erin, W_ITEM.id);
      await erin.click('#logout');
      await expectText(c.locator('button[type=submit]'), /^Log in to join the line$/, 'logged-out button');
      assert(await WLINE(erin).isHidden(), `the last shopper's place still shows: ${await textOf(WLINE(erin)).catch(() => '')}`);
      await erin.fill('#user', `finn-${run}`);
      await erin.press('#user', 'Enter');
      await expectText(erin.locator('#who-name'), new RegExp(`finn-${run}`), 'finn signed in');
      await expectText(c.locator('button[type=submit]'), /^Join the line$/, "finn's button");
      await c.locator('button[type=submit]').click();
      await expectText(WLINE(erin), /^Your place in line: 2\./, "finn's own place, behind erin");
    });

    await step('an upcoming item turns live at its start without a reload', async () => {
      const SOON = { id: `e2e-lamp-${run}`, name: `Lamp ${run}` };
      const starts = new Date(Math.ceil(Date.now() / 1000) * 1000 + 4000).toISOString().replace(/\.\d{3}Z$/, 'Z');
      const put = await apiJSON('PUT', `/api/admin/items/${SOON.id}`, ADMIN,
        { name: SOON.name, category: 'lamps', price_cents: 1500, stock: 2, per_user_limit: 1, starts_at: starts });
      assert(put.status === 201 && put.data.item.status === 'upcoming', `create: ${put.status} ${JSON.stringify(put.data)}`);
      await alice.evaluate(() => { window.__noReload = 1; });
      const c = card(alice, SOON.id);
      await expectText(c.locator('.badge'), /^Live$/, 'live badge', 20_000);
      await expectText(c.locator('button[type=submit]'), /^Buy$/, 'buy button');
      assert(!(await c.locator('button[type=submit]').isDisabled()), 'buy is enabled once live');
      assert(await alice.evaluate(() => window.__noReload) === 1, 'the page was reloaded');
    });

    await step('an ended sale leaves "On sale now", and no card says "No end time." (desktop and phone)', async () => {
      const E = { id: `e2e-kettle-${run}`, name: `Kettle ${run}` };
      const ends = new Date(Math.ceil(Date.now() / 1000) * 1000 + 4000).toISOString().replace(/\.\d{3}Z$/, 'Z');
      const put = await apiJSON('PUT', `/api/admin/items/${E.id}`, ADMIN,
        { name: E.name, category: 'kitchen', price_cents: 2500, stock: 2, per_user_limit: 1, ends_at: ends });
      assert(put.status === 201, `create: ${put.status}`);
      for (const p of [alice, bob]) await expectText(card(p, E.id).locator('.clock'), /^Ends in /, 'countdown to the end');
      for (const p of [alice, bob]) await card(p, E.id).waitFor({ state: 'detached', timeout: 20_000 });
      for (const p of [alice, bob]) {
        const grid = await textOf(p.locator('#items'));
        assert(!/No end time/.test(grid), 'a card says "No end time."');
        assert(!/Sale ended|This sale has ended/.test(grid), 'an ended sale is listed under On sale now');
      }
    });

    await step('item names and categories from the admin are shown as text, never as HTML', async () => {
      const X = { id: `e2e-xss-${run}`, name: `<img src=x id=pwn-${run}>Mug`, category: `<b id=pwnc-${run}>mugs</b>` };
      const put = await apiJSON('PUT', `/api/admin/items/${X.id}`, ADMIN,
        { name: X.name, category: X.category, price_cents: 800, stock: 1, per_user_limit: 1 });
      assert(put.status === 201, `create: ${put.status}`);
      await expectText(card(alice, X.id).locator('h3'), /^<img src=x/, 'name as text on the shop');
      await expectText(admin.locator(`#catalogue tr[data-item="${X.id}"]`), /<img src=x/, 'name as text on the admin page');
      for (const p of [alice, admin]) {
        const found = await p.evaluate((r) => !!(document.getElementById('pwn-' + r) || document.getElementById('pwnc-' + r)), run);
        assert(!found, 'markup from an item name became an element');
      }
    });

    await step('admin: a negative restock withdraws units, and one below zero is refused with a reason', async () => {
      const row = admin.locator(`#catalogue tr[data-item="${LIVE_ITEM.id}"]`);
      const before = (await apiJSON('GET', `/api/items/${LIVE_ITEM.id}`)).data.item;
      await row.locator('input[type=number]').fill('-1');
      await row.locator('button:has-text("Restock")').click();
      await expectText(admin.locator('#stock-msg'), new RegExp(`withdrew 1; now ${before.stock_left - 1} left`), 'withdraw message');
      await row.locator('input[type=number]').fill('-100000');
      await row.locator('button:has-text("Restock")').click();
      await expectText(admin.locator('#stock-msg'), /Stock cannot go below zero/, 'below-zero message');
      const after = (await apiJSON('GET', `/api/items/${LIVE_ITEM.id}`)).data.item;
      assert(after.stock_left === before.stock_left - 1, `stock_left ${after.stock_left}, want ${before.stock_left - 1}`);
    });

    await step('admin archives an item: Archive asks first, then the row says Archived and the shop drops the card', async () => {
      const A = { id: `e2e-radio-${run}`, name: `Radio ${run}` };
      const put = await apiJSON('PUT', `/api/admin/items/${A.id}`, ADMIN,
        { name: A.name, category: 'radios', price_cents: 1500, stock: 4, per_user_limit: 2 });
      assert(put.status === 201, `create: ${put.status}`);
      await card(alice, A.id).waitFor({ timeout: TIMEOUT });
      const row = admin.locator(`#catalogue tr[data-item="${A.id}"]`);
      await row.locator('button:has-text("Archive")').click();
      await expectText(admin.locator('#stock-msg'), /off sale for good/, 'the archive asks first');
      assert((await apiJSON('GET', `/api/items/${A.id}`)).data.item.status === 'live', 'one click archived the item');
      await row.locator('button:has-text("Confirm archive")').click();
      await expectText(admin.locator('#stock-msg'), new RegExp(`${A.name} is archived`), 'archive message');
      await expectText(row.locator('td[data-label="Status"]'), /^Archived$/, 'the row says Archived');
      assert(await row.locator('button:has-text("Restock")').isHidden(), 'an archived row still offers Restock');
      await saveShot(row, 'admin-archived.png');
      await card(alice, A.id).waitFor({ state: 'detached', timeout: 20_000 });
      const buy = await apiJSON('POST', `/api/items/${A.id}/purchase`, shopperToken('dave'), { quantity: 1 });
      assert(buy.status === 409 && buy.data.error.code === 'sale_ended', `purchase after the archive: ${buy.status}`);
    });

    await step('item pictures: the admin sets image_url; cards show it sized and lazy, else a neutral placeholder (desktop and phone)', async () => {
      const P = { id: `e2e-camera-${run}`, name: `Camera ${run}` };
      const put = await apiJSON('PUT', `/api/admin/items/${P.id}`, ADMIN,
        { name: P.name, category: 'cameras', price_cents: 4500, stock: 3, per_user_limit: 1 });
      assert(put.status === 201, `create: ${put.status}`);
      await card(alice, P.id).waitFor({ timeout: TIMEOUT });
      assert(await card(alice, P.id).locator('.pic.placeholder').count() === 1, 'no placeholder without a picture');
      const row = admin.locator(`#catalogue tr[data-item="${P.id}"]`);
      await row.locator('button:has-text("Edit")').click();
      await admin.fill('#f-image', 'http://insecure.example/x.png');
      await admin.click('#item-save');
      await expectText(admin.locator('#f-image-err'), /https:\/\//, 'an http:// picture is refused by the form');
      await admin.fill('#f-image', '/assets/favicon.svg');
      await admin.click('#item-save');
      await expectText(admin.locator('#item-msg'), /Saved/, 'save message');
      for (const p of [alice, bob]) {
        const img = card(p, P.id).locator('.pic img');
        await eventually(async () => assert((await img.getAttribute('src')) === '/assets/favicon.svg', 'no picture yet'), 'the card shows the picture');
        assert(await img.getAttribute('loading') === 'lazy' && await img.getAttribute('width') === '320', 'the picture is not lazy and sized');
        await eventually(async () => assert(await card(p, P.id).locator('.pic').evaluate((n) => !n.classList.contains('placeholder')), 'still the placeholder'), 'the picture loaded');
      }
      await saveShot(card(alice, P.id), 'shop-card-picture.png');
    });

    await step('a keyboard shopper keeps the focus on the card after pressing Buy', async () => {
      const K = { id: `e2e-pen-${run}`, name: `Pen ${run}` };
      const put = await apiJSON('PUT', `/api/admin/items/${K.id}`, ADMIN,
        { name: K.name, category: 'pens', price_cents: 300, stock: 5, per_user_limit: 2 });
      assert(put.status === 201, `create: ${put.status}`);
      const c = card(alice, K.id);
      await expectText(c.locator('.stock-text'), /^5 of 5 left$/, 'pen card');
      await c.locator('button[type=submit]').focus();
      await alice.keyboard.press('Enter');
      await expectText(c.locator('.msg'), /Reserved 1 ×/, 'purchase message');
      await expectText(c.locator('button[type=submit]'), /^Buy$/, 'button back');
      const where = await alice.evaluate((id) => {
        const a = document.activeElement;
        return a && a.closest(`article.card[data-item="${id}"]`) ? a.tagName + ' ' + a.textContent : 'outside the card: ' + (a && a.tagName);
      }, K.id);
      assert(/^BUTTON Buy$/.test(where), `focus after the purchase: ${where}`);
    });

    // ---- web-polish: rate-limit holds and keyboard focus in My orders ----------------------
    // hana has her own page and her own limits. A refusal (429) must hold every button its
    // limit would refuse until Retry-After has passed: a press before that is refused again.
    const hanaUser = `hana-${run}`;
    let hana = null;
    let paidByHana = ''; // an order of hers that is paid, to rate
    const orderRow = (p, id) => p.locator(`#orders li.order[data-order="${id}"]`);
    const payBtn = (p, id) => orderRow(p, id).locator('button[aria-label^="Pay for"]');
    const cancelBtn = (p, id) => orderRow(p, id).locator('button[aria-label^="Cancel"]');
    const focusOf = (p) => p.evaluate(() => {
      const a = document.activeElement;
      const li = a && a.closest('li.order');
      return { tag: a ? a.tagName : '', order: li ? li.dataset.order : '', stars: (a && a.dataset.stars) || '' };
    });
    // spend uses up hana's limit on an action (a request the handler refuses still counts: the
    // limit comes first), so the page's next press of it is refused.
    const spend = async (tok, p, body) => {
      for (let i = 0; i < 20; i++) if ((await apiJSON('POST', p, tok, body)).status === 429) return;
      throw new Error(`${p}: no 429 in 20 requests`);
    };
    // reserve makes n fresh reservations for hana (each step its own: a reservation expires in
    // TTL_MS) and waits for them in her My orders.
    let lenses = 0;
    const reserve = async (n) => {
      const id = `e2e-lens-${run}-${++lenses}`;
      const put = await apiJSON('PUT', `/api/admin/items/${id}`, ADMIN,
        { name: `Lens ${run} ${lenses}`, category: 'lenses', price_cents: 2500, stock: 10, per_user_limit: n });
      assert(put.status === 201, `create: ${put.status}`);
      const tok = await tokenOf(hana);
      const ids = [];
      for (let i = 0; i < n; i++) {
        const r = await apiJSON('POST', `/api/items/${id}/purchase`, tok, { quantity: 1 });
        assert(r.status === 201, `purchase ${i + 1}: ${r.status} ${JSON.stringify(r.data)}`);
        ids.push(r.data.order.id);
      }
      // An idle page asks for its orders only now and then; orders made elsewhere show on a reload.
      await hana.reload();
      for (const o of ids) await expectText(orderRow(hana, o).locator('.badge'), /^Reserved$/, 'reserved row');
      return ids;
    };
    // pressPay presses an order's Pay and answers the api's status for it.
    const pressPay = async (id) => {
      const [res] = await Promise.all([
        hana.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith(`/api/orders/${id}/pay`)),
        payBtn(hana, id).click(),
      ]);
      return res.status();
    };

    await step('a keyboard shopper keeps the focus on the order after Pay, Cancel and a rating', async () => {
      hana = await (await browser.newContext(desktop)).newPage();
      pages.hana = hana;
      hana.setDefaultTimeout(TIMEOUT);
      hana.on('pageerror', (e) => pageErrors.push(`hana: ${e.message}`));
      await hana.goto(BASE + '/');
      await hana.fill('#user', hanaUser);
      await hana.press('#user', 'Enter');
      await expectText(hana.locator('#who-name'), new RegExp(hanaUser), 'hana signed in');
      const [paid, cancelled] = await reserve(2);
      const lost = []; // every action is checked, so a failure names all that lose the focus
      for (const [id, btn, badge] of [[paid, payBtn, /^Paid$/], [cancelled, cancelBtn, /^Cancelled$/]]) {
        await btn(hana, id).focus();
        await hana.keyboard.press('Enter');
        await expectText(orderRow(hana, id).locator('.badge'), badge, 'the row changes');
        if (id === paid) paidByHana = paid;
        await eventually(async () => {
          const f = await focusOf(hana);
          assert(f.tag === 'LI' && f.order === id, `${JSON.stringify(f)}, want the order's row`);
        }, `focus after ${badge.source}`).catch((e) => lost.push(e.message));
      }
      await orderRow(hana, paid).locator('.stars button[data-stars="4"]').focus();
      await hana.keyboard.press('Enter');
      await expectText(orderRow(hana, paid).locator('.msg'), /Average 4\.0 from 1 rating/, 'rating answer');
      await eventually(async () => {
        const f = await focusOf(hana);
        assert(f.order === paid && f.stars === '4', `${JSON.stringify(f)}, want the 4th star`);
      }, 'focus after the rating').catch((e) => lost.push(e.message));
      assert(lost.length === 0, lost.join('; '));
    });

    await step('a Pay refused by the rate limit holds every Pay until Retry-After has passed; a press then goes through', async () => {
      const [first, second] = await reserve(2);
      await spend(await tokenOf(hana), `/api/orders/none-${run}/pay`);
      let status = await pressPay(first);
      assert(status === 429, `the page's Pay: ${status}, want 429 (its limit was spent)`);
      await expectText(orderRow(hana, first).locator('.msg'), /^Too many requests\. Please wait \d+ s/, 'refusal message');
      for (const id of [first, second]) {
        assert(await payBtn(hana, id).isDisabled(), `Pay on order ${id} is enabled while the wait lasts`);
        assert(/^Wait \d+ s$/.test(await textOf(payBtn(hana, id))), `Pay on order ${id}: "${await textOf(payBtn(hana, id))}"`);
      }
      // It comes back when the wait is over and not before: a press then is not refused.
      await eventually(async () => assert(!(await payBtn(hana, first).isDisabled()), 'Pay is held'), 'Pay comes back', 20_000);
      await expectText(orderRow(hana, first).locator('.msg'), /^You can try again now\.$/, 'the page says so');
      status = await pressPay(first);
      assert(status === 200, `Pay once it came back: ${status}, want 200`);
      await expectText(orderRow(hana, first).locator('.badge'), /^Paid$/, 'paid');
      paidByHana = first;
    });

    await step('a Cancel or a rating refused by the rate limit holds those buttons too', async () => {
      const [order] = await reserve(1);
      const tok = await tokenOf(hana);
      await spend(tok, `/api/orders/none-${run}/cancel`);
      await cancelBtn(hana, order).click();
      await expectText(orderRow(hana, order).locator('.msg'), /^Too many requests\. Please wait \d+ s/, 'cancel refusal');
      assert(await cancelBtn(hana, order).isDisabled(), 'Cancel is enabled while the wait lasts');
      assert(/^Wait \d+ s$/.test(await textOf(cancelBtn(hana, order))), `Cancel: "${await textOf(cancelBtn(hana, order))}"`);
      assert(paidByHana, 'no paid order to rate (an earlier step failed)');
      await spend(tok, `/api/items/none-${run}/rating`, { stars: 3 });
      await orderRow(hana, paidByHana).locator('.stars button[data-stars="2"]').click();
      await expectText(orderRow(hana, paidByHana).locator('.msg'), /^Too many requests\. Please wait \d+ s/, 'rating refusal');
      const rows = hana.locator('#orders li.order[data-status="paid"]');
      assert(await rows.count() > 0 && await rows.locator('.stars button:enabled').count() === 0,
        `${await rows.locator('.stars button:enabled').count()} stars of paid orders are enabled while the wait lasts`);
    });

    await step('a rate-limited login holds Log in until Retry-After has passed, then says to try again', async () => {
      await hana.click('#logout');
      // The login limit is per client IP, which every page here shares: refused here, not spent.
      const url = '**/api/login';
      await hana.route(url, (route) => route.fulfill({ status: 429, contentType: 'application/json', headers: { 'Retry-After': '3' },
        body: JSON.stringify({ error: { code: 'rate_limited', message: 'login ip limit reached, retry in 3s' } }) }));
      await hana.fill('#user', hanaUser);
      await hana.press('#user', 'Enter');
      await expectText(hana.locator('#notice'), /^Could not log in\. Too many requests\. Please wait 3 s/, 'refusal message');
      await hana.unroute(url);
      const btn = hana.locator('#login button[type=submit]');
      assert(await btn.isDisabled(), 'Log in is enabled while the wait lasts');
      assert(/^Wait [1-3] s$/.test(await textOf(btn)), `Log in during the wait: "${await textOf(btn)}"`);
      await expectText(hana.locator('#notice'), /^You can try again now\.$/, 'the wait ends', 15_000);
      assert(!(await btn.isDisabled()) && await textOf(btn) === 'Log in', `Log in after the wait: "${await textOf(btn)}"`);
      await hana.press('#user', 'Enter');
      await expectText(hana.locator('#who-name'), new RegExp(hanaUser), 'hana signed in');
    });

    await step('an idle page asks for its orders once a minute with their ETag: 304 while nothing changed', async () => {
      // The page's clock is Playwright's: a minute passes when the step says so.
      const idle = await (await browser.newContext(desktop)).newPage();
      pages.idle = idle;
      idle.setDefaultTimeout(TIMEOUT);
      idle.on('pageerror', (e) => pageErrors.push(`idle: ${e.message}`));
      await idle.clock.install();
      const asks = []; // every GET /api/orders: the ETag it sent and the status it got
      idle.on('response', (r) => {
        if (r.request().method() === 'GET' && new URL(r.url()).pathname === '/api/orders') {
          asks.push({ sent: r.request().headers()['if-none-match'] || '', status: r.status() });
        }
      });
      const user = `e2e-idle-${run}`;
      const item = `e2e-idle-${run}`;
      const put = await apiJSON('PUT', `/api/admin/items/${item}`, ADMIN,
        { name: `Idle ${run}`, category: 'idle', price_cents: 900, stock: 10, per_user_limit: 5 });
      assert(put.status === 201, `create: ${put.status}`);
      await idle.goto(BASE + '/');
      await idle.fill('#user', user);
      await idle.press('#user', 'Enter');
      await expectText(idle.locator('#who-name'), new RegExp(user), 'signed in');
      await eventually(() => assert(asks.length >= 1 && asks[asks.length - 1].status === 200, 'no first ask'), 'the first ask');
      const tok = await tokenOf(idle);
      // The ETag of an order index {item: counter} (internal/orders/index.go): FNV-1a 64 over
      // the sorted items, each "item\0counter\0", with the top bit set.
      const indexTag = (fields) => {
        const enc = new TextEncoder();
        let h = 0xcbf29ce484222325n;
        for (const it of Object.keys(fields).sort()) {
          for (const b of [...enc.encode(it), 0, ...enc.encode(String(fields[it])), 0]) {
            h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
          }
        }
        return `"${h | (1n << 63n)}"`;
      };
      // An order bought and paid elsewhere (another device): the item's counter in the index
      // grows by 3 once the relay applied its two events (the purchase's own write counts one).
      const elsewhere = async (version) => {
        const b = await apiJSON('POST', `/api/items/${item}/purchase`, tok, { quantity: 1 });
        assert(b.status === 201, `purchase: ${b.status}`);
        assert((await apiJSON('POST', `/api/orders/${b.data.order.id}/pay`, tok)).status === 200, 'pay');
        await eventually(async () => {
          const r = await fetch(BASE + '/api/orders', { headers: { Authorization: 'Bearer ' + tok } });
          const want = indexTag({ [item]: version });
          assert(r.headers.get('ETag') === want, `ETag ${r.headers.get('ETag')}, want ${want}`);
        }, 'the order events applied');
        return b.data.order.id;
      };
      const minute = async () => {
        const n = asks.length;
        await idle.clock.fastForward(60_000);
        await eventually(() => assert(asks.length > n, `${asks.length} asks`), 'the idle ask');
        return asks[asks.length - 1];
      };
      const first = await elsewhere(3);
      let a = await minute();
      assert(a.sent === '"0"' && a.status === 200, `the ask after an order elsewhere: ${JSON.stringify(a)}`);
      await expectText(idle.locator(`#orders li.order[data-order="${first}"]`).locator('.badge'), /^Paid$/, 'the order made elsewhere');
      a = await minute();
      assert(a.sent === indexTag({ [item]: 3 }) && a.status === 304, `the ask with nothing changed: ${JSON.stringify(a)}`);
      await expectText(idle.locator(`#orders li.order[data-order="${first}"]`).locator('.badge'), /^Paid$/, 'the list after a 304');
      const second = await elsewhere(6);
      a = await minute();
      assert(a.sent === indexTag({ [item]: 3 }) && a.status === 200, `the ask after another order: ${JSON.stringify(a)}`);
      await expectText(idle.locator(`#orders li.order[data-order="${second}"]`).locator('.badge'), /^Paid$/, 'the second order');
      assert(asks.length === 4, `${asks.length} asks in three idle minutes: ${JSON.stringify(asks)}`);
      await idle.close();
      delete pages.idle;
    });

    if (PAY_BASE) await paymentSteps(browser, desktop, pageErrors);

    await step('no script errors on any page', async () => {
      assert(pageErrors.length === 0, pageErrors.join('; '));
    });
  } finally {
    await browser.close();
  }
}

try {
  await main();
} catch (e) {
  failed++;
  console.log('FAIL setup: ' + (e && e.stack || e));
}
if (failures.length) console.log('failed steps: ' + failures.join(' | '));
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
