// Shared by the shopper and admin pages: the API client, one sentence per error code, money
// and countdown formatting, and a clock corrected to the server's. Plain browser JavaScript,
// no build step.
'use strict';

window.flashsale = (() => {
  // Server time minus local time in ms, learnt from the Date header, so countdowns to a
  // sale's start or a reservation's expiry agree with the server even on a wrong phone clock.
  let clockOffset = 0;

  function now() { return Date.now() + clockOffset; }

  function learnClock(res, sentAt) {
    const d = Date.parse(res.headers.get('Date') || '');
    if (Number.isNaN(d)) return;
    // The header has whole seconds: take the middle of that second and of the round trip,
    // and ignore changes below a second so countdowns do not jitter.
    const local = (sentAt + Date.now()) / 2;
    const offset = d + 500 - local;
    if (Math.abs(offset - clockOffset) > 1000) clockOffset = Math.abs(offset) < 1500 ? 0 : offset;
  }

  // api calls the HTTP contract and never throws: it answers
  // {ok, status, data, error: {code, message}, retryAfter}. A network failure is status 0 with
  // the code "network".
  async function api(method, path, opts = {}) {
    const headers = Object.assign({}, opts.headers || {});
    if (opts.token) headers.Authorization = 'Bearer ' + opts.token;
    let body;
    if (opts.raw !== undefined) {
      body = opts.raw;
    } else if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['Content-Type'] = 'application/json';
    }
    const sentAt = Date.now();
    let res;
    try {
      res = await fetch(path, { method, headers, body, cache: 'no-store' });
    } catch (e) {
      return { ok: false, status: 0, error: { code: 'network', message: String(e && e.message || e) } };
    }
    learnClock(res, sentAt);
    let data = null;
    try { data = await res.json(); } catch (e) { data = null; }
    const out = { ok: res.ok, status: res.status, data, headers: res.headers };
    if (!res.ok) {
      out.error = (data && data.error) || { code: 'http_' + res.status, message: res.statusText || 'request failed' };
      const ra = parseInt(res.headers.get('Retry-After') || '', 10);
      if (res.status === 429) out.retryAfter = Number.isFinite(ra) && ra > 0 ? ra : 1;
    }
    return out;
  }

  // describe turns a failed answer into one sentence for a shopper or an admin. ctx may hold
  // item (the Item), quantity, and what ("purchase", "pay", "cancel", "rating", "stock", ...).
  function describe(r, ctx = {}) {
    const e = r.error || {};
    const item = ctx.item;
    switch (e.code) {
      case 'network':
        return "Can't reach the shop. Check your connection and try again.";
      case 'invalid_request':
        return 'Please check your input: ' + (e.message || 'the request was not valid') + '.';
      case 'unauthorized':
        return ctx.admin ? 'The admin token was refused. Enter it again.' : 'Your session has ended. Please log in again.';
      case 'forbidden':
        return 'That needs the admin token, not a shopper login.';
      case 'not_found':
        if (ctx.what === 'pay' || ctx.what === 'cancel') return 'That order was not found.';
        return 'Not found: it may have been removed.';
      case 'sold_out':
        if (item && ctx.quantity > 1 && item.stock_left > 0 && item.stock_left < ctx.quantity) {
          return `Not enough left: only ${item.stock_left} available. Lower the quantity.`;
        }
        return 'Sold out: no stock left for that quantity. Stock returns when a reservation is cancelled or expires, so it may be worth trying again shortly.';
      case 'limit_exceeded':
        return item
          ? `Limit reached: at most ${item.per_user_limit} per customer for this item (cancelled and expired orders give it back).`
          : 'Limit reached: that would take you past the per-customer limit.';
      case 'sale_not_started':
        if (item && item.starts_at) return 'The sale has not started yet. It starts in ' + countdown(Date.parse(item.starts_at) - now()) + '.';
        return 'The sale has not started yet.';
      case 'sale_ended':
        return 'Sorry, this sale has ended.';
      case 'queue_required':
        return 'This item sells through its waiting room: join the line and buy when it is your turn (a turn buys once and expires).';
      case 'no_queue':
        return 'This item has no waiting room: buy it directly.';
      case 'invalid_state':
        if (ctx.what === 'pay' || ctx.what === 'cancel') return 'This order can no longer be changed: it is already paid, cancelled or expired.';
        if (ctx.what === 'stock') return 'Stock cannot go below zero: ' + (e.message || 'not enough unsold stock') + '.';
        if (ctx.what === 'item') return 'Not saved: ' + (e.message || 'the change is not allowed') + '. Change the stock with Restock instead.';
        return 'Not allowed right now: ' + (e.message || 'invalid state') + '.';
      case 'order_expired':
        return 'Too late: this reservation expired and its stock went back on sale.';
      case 'not_a_buyer':
        return 'Only shoppers who paid for this item can rate it.';
      case 'too_large':
        return 'That is too large to send (64 KiB at most, 8 MiB for an import).';
      case 'rate_limited':
        return `Too many requests. Please wait ${r.retryAfter || 1} s and try again.`;
      case 'unavailable':
        if (/not built yet/i.test(e.message || '')) return 'This part of the shop is not available yet.';
        // The contract's second 503: the change may have been made. Saying "nothing was
        // changed" here would be false; the same key makes trying again safe.
        if (/outcome is unknown/i.test(e.message || '')) {
          if (ctx.what === 'purchase') return 'The shop did not answer in time, so we cannot tell whether your purchase went through. Check My orders, or press Buy again: it will not buy twice.';
          return 'The shop did not answer in time, so we cannot tell whether that went through. Check My orders before trying again.';
        }
        return 'The shop is very busy right now and nothing was changed. Please try again.';
      default:
        return (e.message || 'Something went wrong') + (r.status ? ` (HTTP ${r.status})` : '') + '.';
    }
  }

  // Every code of the contract, so tests can check that describe has a sentence for each.
  const codes = ['invalid_request', 'unauthorized', 'forbidden', 'not_found', 'sold_out',
    'limit_exceeded', 'sale_not_started', 'sale_ended', 'invalid_state', 'order_expired',
    'not_a_buyer', 'too_large', 'rate_limited', 'queue_required', 'no_queue', 'unavailable', 'network'];

  const currency = document.documentElement.dataset.currency || 'USD';
  const moneyFmt = new Intl.NumberFormat(undefined, { style: 'currency', currency });
  function money(cents) { return moneyFmt.format(Number(cents) / 100); }

  // countdown formats a duration in ms as "2d 03:04:05", "3:04:05" or "4:05".
  function countdown(ms) {
    let s = Math.max(0, Math.ceil(ms / 1000));
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    const two = (n) => String(n).padStart(2, '0');
    if (d > 0) return `${d}d ${two(h)}:${two(m)}:${two(s)}`;
    if (h > 0) return `${h}:${two(m)}:${two(s)}`;
    return `${m}:${two(s)}`;
  }

  // newKey makes an Idempotency-Key: 32 hex characters from the browser's CSPRNG (which,
  // unlike crypto.randomUUID, also exists on plain-http pages).
  function newKey() {
    const b = new Uint8Array(16);
    crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  }

  // el builds an element: el('p', {class: 'x', text: 'hi'}, child...).
  function el(tag, attrs = {}, ...children) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') n.textContent = v;
      else if (k === 'class') n.className = v;
      else if (k.startsWith('on')) n.addEventListener(k.slice(2), v);
      else if (v === true) n.setAttribute(k, '');
      else n.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) n.append(c);
    return n;
  }

  // picture shows an item's image_url in node (an element of class "pic"), loaded lazily at a
  // fixed size so the layout never jumps; without a URL, or when the image fails to load, the
  // node keeps its neutral placeholder (class "placeholder").
  function picture(node, url) {
    let img = node.querySelector('img');
    if (!url) {
      if (img) img.remove();
      node.classList.add('placeholder');
      return;
    }
    if (img && img.getAttribute('src') === url) return;
    node.classList.add('placeholder');
    if (!img) {
      img = el('img', { alt: '', loading: 'lazy', decoding: 'async', width: '320', height: '200' });
      img.addEventListener('load', () => node.classList.remove('placeholder'));
      img.addEventListener('error', () => { img.removeAttribute('src'); node.classList.add('placeholder'); });
      node.append(img);
    }
    img.src = url;
  }

  // say writes a message into a status element; kind is ok, warn or bad.
  function say(node, text, kind = 'ok') {
    node.textContent = text || '';
    node.classList.remove('ok', 'warn', 'bad');
    node.classList.add('msg');
    if (text) node.classList.add(kind);
  }

  // showDataLost shows the admin pages' "Redis lost its data" banner (#data-lost) while the
  // stats say so (GET /api/admin/stats: redis_data_lost), and hides it once restored.
  function showDataLost(message) {
    const b = document.getElementById('data-lost');
    if (!b) return;
    b.hidden = !message;
    b.textContent = message ? 'Redis lost its data: purchases and changes are refused until '
      + '`reconciler restore --all` has run (runbook: "Redis lost its data"). ' + message : '';
  }

  return { api, describe, codes, money, countdown, now, newKey, el, say, picture, showDataLost };
})();
