// The shopper page: dev login, the live item grid, buying, My orders (pay at the payment
// provider's hosted Checkout page, cancel, rate) and the leaderboards.
//
// Live stock is pushed: an EventSource on GET /api/items/stream gets the catalogue at once and
// again within a second of any change (one encoded event fanned out to every shopper, so the
// api does no work per shopper). When the stream cannot be had (an old proxy, a dropped
// connection) the page falls back to GET /api/items every second until the stream is back.
// Orders are asked every 3 s and leaderboards every 5 s. A hidden tab closes its stream and
// stops asking until it is shown again.
// Cards and order rows are updated in place, so a poll never steals focus or a typed quantity.
// A 429 holds the controls its limit would refuse until Retry-After has passed.
'use strict';

(() => {
  const { api, describe, money, countdown, now, newKey, el, say, picture } = window.flashsale;
  const $ = (id) => document.getElementById(id);

  const ITEMS_EVERY = 1000;
  // "My orders" is asked after the shopper's own actions and at a deadline; otherwise every
  // 3 s only while a payment is open or processing, and at most once a minute when idle.
  const ORDERS_BUSY = 3000;
  const ORDERS_IDLE = 60000;
  const ordersEvery = () => ([...state.rows.values()].some((r) => r.pstatus === 'open' || r.pstatus === 'processing')
    ? ORDERS_BUSY : ORDERS_IDLE);
  const BOARDS_EVERY = 5000;
  const STATUS_TEXT = { upcoming: 'Upcoming', live: 'Live', sold_out: 'Sold out', ended: 'Ended' };
  const ORDER_TEXT = { reserved: 'Reserved', paid: 'Paid', cancelled: 'Cancelled', expired: 'Expired', refunded: 'Refunded' };

  const state = {
    // The shopper's sign-in is kept in local storage, shared by this origin's tabs: the
    // checkout page opens in a new tab, and its "Return to the shop" must find the shopper
    // still signed in. Logging out in one tab logs out every tab (the storage event below).
    token: localStorage.getItem('flashsale.token'),
    user: localStorage.getItem('flashsale.user'),
    items: new Map(), // id -> Item
    cards: new Map(), // id -> {root, parts..., inFlight, pendingKey, pendingQty}
    rows: new Map(), // order id -> {root, status, busy, pay, cancel, stars}
    loggingIn: false,
    provider: '', // 'none' once the shop said it settles outside (POST /pay pays)
    checkouts: new Set(), // order ids this page opened a checkout for
    ordersTag: null, // {token, etag} of the orders list shown (refreshOrders)
    returned: checkoutReturn(), // {order, outcome} when the shopper just came back from Checkout

    category: sessionStorage.getItem('flashsale.category') || '',
  };

  // checkoutReturn reads (and takes out of the address bar) what Checkout's success or cancel
  // URL says: ?checkout=success|cancel&order=<id>. The order's row says it once orders load.
  function checkoutReturn() {
    const q = new URLSearchParams(location.search);
    const outcome = q.get('checkout');
    const order = q.get('order');
    if (!outcome) return null;
    history.replaceState(null, '', location.pathname);
    return (outcome === 'success' || outcome === 'cancel') && order ? { order, outcome } : null;
  }

  // ---- rate limits -------------------------------------------------------------------------

  // A 429 says how long to wait (Retry-After). Until then the page holds every control that
  // limit would refuse (disabled, counting the seconds down), so nobody is invited to press
  // again only to be refused; then it says the shopper can try again. Limits are per shopper
  // and action: a hold on pay, cancel or rating covers that button on every order, a purchase
  // hold one item's card, the login hold this page's Log in.
  const holds = new Map(); // 'login' | 'pay' | 'cancel' | 'rating' | 'purchase:<item id>' -> {until, node, text}

  // refused says text (why r failed) in node and, on a 429, holds key's controls.
  function refused(key, r, node, text) {
    say(node, text, r.status === 429 ? 'warn' : 'bad');
    if (r.status !== 429) return;
    holds.set(key, { until: Date.now() + r.retryAfter * 1000, node, text });
    drawHolds();
  }

  // heldFor answers the ms left before key's controls may be pressed again (0: now).
  function heldFor(key) {
    const h = holds.get(key);
    return h ? Math.max(0, h.until - Date.now()) : 0;
  }

  const waitLabel = (ms) => `Wait ${Math.ceil(ms / 1000)} s`;

  // tickHolds, on the clock, ends the holds whose wait is over (their message, if still
  // shown, turns to "try again now") and redraws the controls' countdowns.
  function tickHolds() {
    if (!holds.size) return;
    for (const [key, h] of holds) {
      if (h.until > Date.now()) continue;
      holds.delete(key);
      if (h.node.isConnected && h.node.textContent === h.text) say(h.node, 'You can try again now.', 'ok');
    }
    drawHolds();
  }

  // drawHolds redraws every control a hold may cover.
  function drawHolds() {
    updateLoginButton();
    for (const c of state.cards.values()) updateButton(c);
    for (const row of state.rows.values()) updateRow(row);
  }

  // ---- login -------------------------------------------------------------------------------

  function showLogin() {
    const inside = !!state.token;
    $('login').hidden = inside;
    $('who').hidden = !inside;
    $('who-name').textContent = state.user || '';
    $('orders-login').hidden = inside;
    if (!inside) {
      $('orders').replaceChildren();
      state.rows.clear();
      $('orders-empty').hidden = true;
    }
    for (const c of state.cards.values()) updateButton(c);
  }

  const loginButton = $('login').querySelector('button');

  function updateLoginButton() {
    const wait = heldFor('login');
    loginButton.disabled = state.loggingIn || wait > 0;
    loginButton.textContent = wait > 0 ? waitLabel(wait) : 'Log in';
  }

  $('login').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (state.loggingIn || heldFor('login')) return;
    const input = $('user');
    const user = input.value.trim();
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(user)) {
      input.setAttribute('aria-invalid', 'true');
      say($('notice'), 'A name is 1 to 64 letters, digits, dashes or underscores.', 'bad');
      input.focus();
      return;
    }
    input.removeAttribute('aria-invalid');
    state.loggingIn = true;
    updateLoginButton();
    const r = await api('POST', '/api/login', { body: { user } });
    state.loggingIn = false;
    if (!r.ok && r.status === 404) { // FLASHSALE_DEV_LOGIN is off: the shop signs shoppers in
      say($('notice'), 'Sign in through your shop account: this quick sign-in is for development only.', 'warn');
    } else if (!r.ok) refused('login', r, $('notice'), 'Could not log in. ' + describe(r));
    updateLoginButton();
    if (!r.ok) return;
    state.token = r.data.token;
    state.user = r.data.user;
    localStorage.setItem('flashsale.token', state.token);
    localStorage.setItem('flashsale.user', state.user);
    say($('notice'), `Welcome, ${state.user}! Pick something below.`, 'ok');
    showLogin();
    refreshOrders();
  });

  function logout(message) {
    state.token = null;
    state.user = null;
    localStorage.removeItem('flashsale.token');
    localStorage.removeItem('flashsale.user');
    // A waiting-room ticket and its pass are this shopper's: the next one to log in here
    // must not inherit them (the api refuses them to anyone else, and the card would be stuck).
    for (const c of state.cards.values()) if (c.ticket || c.pollFailures) forgetTicket(c);
    // So are the limits that held pay, cancel, rating and buying (login is limited per client too).
    for (const key of holds.keys()) if (key !== 'login') holds.delete(key);
    showLogin();
    if (message) say($('notice'), message, 'warn');
    $('user').focus();
  }
  $('logout').addEventListener('click', () => logout('You are logged out.'));
  // Another tab of the shop signed in or out: follow it.
  window.addEventListener('storage', (ev) => {
    if (ev.key !== 'flashsale.token' || ev.newValue === state.token) return;
    if (ev.newValue) adoptToken(ev.newValue);
    else if (state.token) logout('You logged out in another tab.');
  });

  // ---- the shop's own sign-in (docs/api.md, "Signing shoppers in from the shop's page") ----
  // A shop that signs shoppers in itself hands this page the shopper's token in one of three
  // ways: a URL fragment #token=<jwt> (never sent to a server; removed from the address bar at
  // once), window.flashsaleToken set by a script that runs before this one, or a message
  // {type: 'flashsale.token', token} posted by a page of the same origin (a parent frame, the
  // opener). The name shown is the token's sub; the api checks the token on every request.
  function adoptToken(token) {
    if (typeof token !== 'string' || !/^[\w-]+\.[\w-]+\.[\w-]*$/.test(token)) return;
    let user = '';
    try {
      const b64 = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
      user = String(JSON.parse(atob(b64)).sub || '');
    } catch (e) { /* not readable: the api decides whether it is good */ }
    state.token = token;
    state.user = user;
    localStorage.setItem('flashsale.token', token);
    localStorage.setItem('flashsale.user', user);
    showLogin();
    refreshOrders();
  }
  {
    const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (m) {
      history.replaceState(null, '', location.pathname + location.search);
      adoptToken(decodeURIComponent(m[1]));
    } else if (window.flashsaleToken) adoptToken(window.flashsaleToken);
  }
  window.addEventListener('message', (ev) => {
    if (ev.origin !== location.origin || !ev.data || ev.data.type !== 'flashsale.token') return;
    adoptToken(ev.data.token);
  });

  // handleAuth logs out on 401 so the shopper sees why and can log in again.
  function handleAuth(r) {
    if (r.status === 401) logout(describe(r));
  }

  // ---- item grid ---------------------------------------------------------------------------

  function makeCard(item) {
    const id = item.id;
    const c = { id, inFlight: false, pendingKey: null, pendingQty: 0 };
    c.name = el('h3', { id: 'item-' + id + '-name' });
    c.pic = el('div', { class: 'pic placeholder', 'aria-hidden': 'true' });
    c.badge = el('span', { class: 'badge' });
    c.category = el('span', { class: 'category' });
    c.price = el('span', { class: 'price' });
    c.fill = el('span');
    c.bar = el('div', { class: 'bar', 'aria-hidden': 'true' }, c.fill);
    c.stock = el('p', { class: 'stock-text' });
    c.clock = el('p', { class: 'clock' });
    c.qty = el('input', {
      id: 'qty-' + id, type: 'number', min: '1', value: '1', inputmode: 'numeric', required: true,
      'aria-describedby': 'limit-' + id,
    });
    c.limit = el('span', { id: 'limit-' + id, class: 'sr-only' });
    c.button = el('button', { type: 'submit' }, 'Buy');
    c.msg = el('p', { class: 'msg', role: 'status', 'aria-live': 'polite' });
    // The waiting room (items with a queue): the shopper's place in line, then the pass.
    c.line = el('p', { class: 'line-status', role: 'status', 'aria-live': 'polite', hidden: true });
    c.ticket = null;
    c.pollTimer = 0;
    c.pollSeq = 0; // the newest poll; an older one's answer is dropped
    c.pollFailures = 0;
    c.form = el('form', { class: 'buy', 'aria-label': 'Buy' },
      el('label', { for: 'qty-' + id }, 'Quantity', c.qty), c.limit, c.button);
    c.form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const it = state.items.get(c.id);
      if (it && it.queue && !(c.ticket && c.ticket.state === 'admitted')) joinLine(c);
      else buy(c);
    });
    c.root = el('article', { class: 'card', 'data-item': id, 'aria-labelledby': 'item-' + id + '-name' },
      c.pic, el('header', {}, c.name, c.badge),
      el('p', { class: 'meta' }, c.price, ' ', c.category),
      c.bar, c.stock, c.clock, c.line, c.form, c.msg);
    return c;
  }

  function updateCard(c, item) {
    c.name.textContent = item.name;
    picture(c.pic, item.image_url);
    c.badge.textContent = STATUS_TEXT[item.status] || item.status;
    c.badge.className = 'badge ' + item.status;
    c.category.textContent = item.category ? '· ' + item.category : '';
    c.price.textContent = money(item.price_cents);
    const total = Math.max(item.stock_total, 0);
    const left = Math.max(item.stock_left, 0);
    const pct = total > 0 ? Math.round((left / total) * 100) : 0;
    c.fill.style.width = pct + '%';
    c.bar.classList.toggle('low', pct <= 20);
    c.stock.textContent = left === 0 ? `None left of ${total}` : `${left} of ${total} left`;
    c.qty.max = String(item.per_user_limit);
    c.limit.textContent = `At most ${item.per_user_limit} per customer.`;
    c.qty.title = `At most ${item.per_user_limit} per customer`;
    if (item.status === 'upcoming' && item.starts_at) {
      c.clock.dataset.deadline = String(Date.parse(item.starts_at));
      c.clock.dataset.prefix = 'Starts in ';
    } else if ((item.status === 'live' || item.status === 'sold_out') && item.ends_at) {
      c.clock.dataset.deadline = String(Date.parse(item.ends_at));
      c.clock.dataset.prefix = 'Ends in ';
    } else {
      delete c.clock.dataset.deadline;
      c.clock.textContent = item.status === 'ended' ? 'This sale has ended.' : '';
    }
    tickNode(c.clock);
    updateButton(c);
  }

  // updateButton: buying is offered while the sale window is open and stock is left. Stock
  // that cancelled and expired reservations put back turns a sold-out item live again, and
  // the pushed catalogue enables its button within a second.
  function updateButton(c) {
    const item = state.items.get(c.id);
    if (!item) return;
    const wait = heldFor('purchase:' + c.id);
    const closed = item.status === 'upcoming' || item.status === 'ended';
    if (item.queue) {
      // With a waiting room: join (also before the start), wait, then buy with the pass.
      const t = c.ticket;
      const st = t ? t.state : '';
      // Only buying with the pass is rate limited; joining is not.
      const held = st === 'admitted' && wait > 0;
      c.button.disabled = c.inFlight || held || item.status === 'ended' || st === 'waiting' || st === 'spent' || st === 'sold_out';
      if (c.inFlight) c.button.textContent = st === 'admitted' ? 'Buying…' : 'Joining…';
      else if (item.status === 'ended') c.button.textContent = 'Sale ended';
      else if (!state.token) c.button.textContent = 'Log in to join the line';
      else if (st === 'waiting') c.button.textContent = 'In line…';
      else if (held) c.button.textContent = waitLabel(wait);
      else if (st === 'admitted') c.button.textContent = 'Buy now';
      else if (st === 'spent') c.button.textContent = 'Bought';
      else if (st === 'sold_out') c.button.textContent = 'Sold out';
      else if (st === 'expired') c.button.textContent = 'Join again';
      else c.button.textContent = 'Join the line';
      return;
    }
    c.button.disabled = c.inFlight || wait > 0 || closed || item.status === 'sold_out';
    if (c.inFlight) c.button.textContent = 'Buying…';
    else if (wait > 0) c.button.textContent = waitLabel(wait);
    else if (item.status === 'sold_out') c.button.textContent = 'Sold out';
    else if (item.status === 'upcoming') c.button.textContent = 'Not started';
    else if (item.status === 'ended') c.button.textContent = 'Sale ended';
    else c.button.textContent = state.token ? 'Buy' : 'Log in to buy';
  }

  function renderItems(all) {
    // Ended sales are over: known (My orders names them) but not shown under "On sale now".
    state.items = new Map(all.map((i) => [i.id, i]));
    const list = all.filter((i) => i.status !== 'ended');
    const seen = new Set();
    const grid = $('items');
    let prev = null;
    for (const item of list) {
      seen.add(item.id);
      let c = state.cards.get(item.id);
      if (!c) {
        c = makeCard(item);
        state.cards.set(item.id, c);
      }
      updateCard(c, item);
      // Keep the server's order (by id) without moving nodes that are already in place.
      const want = prev ? prev.nextSibling : grid.firstChild;
      if (want !== c.root) grid.insertBefore(c.root, want);
      prev = c.root;
    }
    for (const [id, c] of state.cards) {
      if (!seen.has(id)) {
        c.root.remove();
        state.cards.delete(id);
      }
    }
    $('items-empty').hidden = list.length > 0;
    renderCategories();
  }

  // ---- live stock: the stream, polling as the fallback --------------------------------------

  const STREAM_RETRY = 10000; // a stream the browser gave up on is opened again after this
  const live = { source: null, events: 0, retry: null, mode: 'poll' };

  // The stream is trusted while open and after its first event; a dropped connection turns
  // it to "connecting" (the browser reconnects by itself) and the page polls meanwhile.
  function streamHealthy() {
    return live.source && live.source.readyState === 1 && live.mode === 'stream';
  }

  function setMode(mode) {
    live.mode = mode;
    document.body.dataset.live = mode; // "stream" or "poll"
  }

  function openStream() {
    if (!window.EventSource || live.source || document.hidden) return;
    const es = new EventSource('/api/items/stream');
    live.source = es;
    es.addEventListener('items', (ev) => {
      live.events++;
      setMode('stream');
      try { renderItems(JSON.parse(ev.data).items || []); } catch (e) { /* a broken event: the next one fixes it */ }
    });
    es.addEventListener('error', () => {
      setMode('poll');
      if (es.readyState === 2) { // the browser gave up (not a 200 text/event-stream): try later
        closeStream();
        live.retry = setTimeout(() => { live.retry = null; openStream(); }, STREAM_RETRY);
      }
    });
  }

  function closeStream() {
    if (live.source) live.source.close();
    live.source = null;
    if (live.retry) { clearTimeout(live.retry); live.retry = null; }
  }

  async function refreshItems() {
    if (document.hidden) return;
    if (streamHealthy()) return; // pushed; no need to ask
    const r = await api('GET', '/api/items');
    if (r.ok) renderItems(r.data.items || []);
  }

  async function buy(c) {
    const item = state.items.get(c.id);
    if (!item || c.inFlight || heldFor('purchase:' + c.id)) return;
    if (!state.token) {
      say(c.msg, 'Log in first (top of the page), then buy.', 'warn');
      $('user').focus();
      return;
    }
    const qty = Number(c.qty.value);
    if (!Number.isInteger(qty) || qty < 1) {
      c.qty.setAttribute('aria-invalid', 'true');
      say(c.msg, 'Enter a quantity of at least 1.', 'bad');
      c.qty.focus();
      return;
    }
    if (qty > item.per_user_limit) {
      c.qty.setAttribute('aria-invalid', 'true');
      say(c.msg, `At most ${item.per_user_limit} per customer.`, 'bad');
      c.qty.focus();
      return;
    }
    c.qty.removeAttribute('aria-invalid');
    // One key per intended purchase. A purchase whose answer was lost to the network keeps
    // its key, so pressing Buy again cannot create a second order; any answer ends it.
    if (!c.pendingKey || c.pendingQty !== qty) {
      c.pendingKey = newKey();
      c.pendingQty = qty;
    }
    const hadFocus = document.activeElement === c.button;
    c.inFlight = true;
    updateButton(c);
    say(c.msg, '');
    // A network error or a 503 may hide an order that was made: ask again with the same key
    // (the api answers the order if it exists, and never makes a second one), a few times.
    let r;
    for (let attempt = 0; ; attempt++) {
      const headers = { 'Idempotency-Key': c.pendingKey };
      if (c.ticket && c.ticket.pass) headers['Queue-Pass'] = c.ticket.pass;
      r = await api('POST', `/api/items/${encodeURIComponent(c.id)}/purchase`, {
        token: state.token, body: { quantity: qty }, headers,
      });
      if ((r.status !== 0 && r.status !== 503) || attempt === 3) break;
      say(c.msg, 'The shop is busy; still trying…', 'warn');
      await new Promise((resolve) => setTimeout(resolve, 500 * 2 ** attempt));
    }
    if (r.status !== 0 && r.status !== 503) c.pendingKey = null;
    else refreshOrders(); // the order may exist: show it if it does
    c.inFlight = false;
    if (r.ok) {
      const o = r.data.order;
      cardOrderMessage(c, o);
      refreshOrders();
      if (item.queue) pollLine(c);
    } else {
      refused('purchase:' + c.id, r, c.msg, describe(r, { item, quantity: qty, what: 'purchase' }));
      handleAuth(r);
    }
    updateButton(c);
    keepFocus(hadFocus, c.button, c.qty);
  }

  // keepFocus gives the keyboard focus back after an action: a focused button that is
  // disabled while it works drops the focus to the page's body, and so does a button whose
  // order row is redrawn; a keyboard or screen reader user would start again from the top.
  // It goes to the first of targets still on the page and enabled: on a card the button, or
  // the quantity when the button stays disabled (in line, rate limited); in My orders the
  // pressed button, or the order's row.
  function keepFocus(hadFocus, ...targets) {
    if (!hadFocus) return;
    const a = document.activeElement;
    if (a && a !== document.body) return; // something else took it on purpose (a new login)
    const t = targets.find((n) => n && n.isConnected && !n.disabled);
    if (t) t.focus();
  }

  // ---- waiting room ------------------------------------------------------------------------

  async function joinLine(c) {
    if (!state.token) {
      say(c.msg, 'Log in first (top of the page), then join the line.', 'warn');
      $('user').focus();
      return;
    }
    const hadFocus = document.activeElement === c.button;
    c.inFlight = true;
    updateButton(c);
    const r = await api('POST', `/api/items/${encodeURIComponent(c.id)}/queue`, { token: state.token });
    c.inFlight = false;
    if (r.ok) { c.pollSeq++; showTicket(c, r.data.ticket); }
    else {
      say(c.msg, describe(r, { item: state.items.get(c.id), what: 'join' }), 'bad');
      handleAuth(r);
    }
    updateButton(c);
    keepFocus(c, hadFocus);
  }

  // pollLine asks for the ticket, sending its token so the api answers from memory. Only the
  // newest poll's answer counts (a join, a purchase or a logout starts afresh). A failed poll
  // is tried again after a wait that doubles each time (2 s up to 30 s), and the shopper is
  // told, so a crowd in line does not hammer a shop that is struggling.
  async function pollLine(c) {
    clearTimeout(c.pollTimer);
    if (!state.token || !c.ticket) return;
    const seq = ++c.pollSeq;
    const r = await api('GET', `/api/items/${encodeURIComponent(c.id)}/queue`, {
      token: state.token, headers: { 'Queue-Ticket': c.ticket.token },
    });
    if (seq !== c.pollSeq || !c.ticket) return;
    if (r.ok) {
      if (c.pollFailures) say(c.msg, '');
      c.pollFailures = 0;
      showTicket(c, r.data.ticket);
      return;
    }
    if (r.status === 401) { handleAuth(r); return; }
    if (r.status === 404 || r.status === 409) { // not in this line (any more), or no line at all
      forgetTicket(c);
      say(c.msg, r.status === 404 ? 'You are no longer in this line. Join again to get a place.' : describe(r, { what: 'join' }), 'warn');
      updateButton(c);
      return;
    }
    c.pollFailures = (c.pollFailures || 0) + 1;
    let wait = Math.min(30000, 2000 * 2 ** (c.pollFailures - 1));
    if (r.retryAfter) wait = Math.max(wait, r.retryAfter * 1000);
    say(c.msg, (r.status === 0 ? "Can't reach the shop to check your place in line" : 'The shop is busy')
      + `; trying again in ${Math.round(wait / 1000)} s. You keep your place.`, 'warn');
    c.pollTimer = setTimeout(() => pollLine(c), wait);
  }

  // forgetTicket drops a card's ticket: it was another shopper's, or it is gone.
  function forgetTicket(c) {
    clearTimeout(c.pollTimer);
    c.pollSeq++;
    if (c.pollFailures) say(c.msg, '');
    c.pollFailures = 0;
    c.ticket = null;
    c.line.hidden = true;
    c.line.textContent = '';
    delete c.line.dataset.state;
  }

  function showTicket(c, t) {
    c.ticket = t;
    c.line.hidden = false;
    let text;
    if (t.state === 'waiting' && t.position == null) text = 'You are in line. Your place is drawn at random when the sale starts.';
    else if (t.state === 'waiting') {
      text = `Your place in line: ${t.position}.`;
      if (t.eta_seconds != null) text += ` About ${countdown(t.eta_seconds * 1000)} to wait.`;
    } else if (t.state === 'admitted') text = `It's your turn! Buy within ${countdown(Date.parse(t.pass_expires_at) - now())}.`;
    else if (t.state === 'expired') text = 'Your turn passed unused. Join again to get back in line.';
    else if (t.state === 'spent') text = 'You bought with your turn.';
    else text = 'Sold out: nothing left to wait for.';
    c.line.textContent = text;
    c.line.dataset.state = t.state;
    updateButton(c);
    clearTimeout(c.pollTimer);
    if (t.poll_after_ms != null) c.pollTimer = setTimeout(() => pollLine(c), t.poll_after_ms);
  }

  // ---- orders ------------------------------------------------------------------------------

  // refreshOrders asks for the shopper's orders. The idle poll (idle true) sends the ETag of the
  // list it shows: while none of the shopper's orders changed the api answers 304 for two
  // Redis commands and nothing is redrawn. Refreshes after an action, at a deadline or while a
  // payment is open ask unconditionally (a payment's provider status changes no ETag).
  async function refreshOrders(idle) {
    if (!state.token || document.hidden) return;
    const token = state.token;
    const headers = {};
    if (idle === true && state.ordersTag && state.ordersTag.token === token) headers['If-None-Match'] = state.ordersTag.etag;
    const r = await api('GET', '/api/orders', { token, headers });
    if (r.status === 304) return;
    if (r.ok) {
      const etag = r.headers.get('ETag');
      state.ordersTag = etag ? { token, etag } : null;
      renderOrders(r.data.orders || []);
    } else handleAuth(r);
  }

  function itemName(id) {
    const it = state.items.get(id);
    return it ? it.name : id;
  }

  // cardOrderMessage shows, on its item's card, what became of the order just bought there: a
  // live "Pay within" while it is reserved, then what it turned into (paid, cancelled,
  // expired), never a countdown to a deadline that no longer holds.
  const CARD_ORDER_TEXT = {
    paid: ['Paid, thank you! See it in My orders.', 'ok'],
    cancelled: ['You cancelled this order; its units went back on sale.', 'warn'],
    expired: ['The reservation ended unpaid; its units went back on sale.', 'warn'],
    refunded: ['This order was refunded.', 'warn'],
  };
  function cardOrderMessage(c, o) {
    c.msgOrder = o.id;
    c.msgStatus = o.status;
    if (o.status === 'reserved') {
      say(c.msg, `Reserved ${o.quantity} × ${itemName(o.item_id)}. `, 'ok');
      c.msg.append(el('span', { class: 'clock', 'data-deadline': String(Date.parse(o.expires_at)), 'data-prefix': 'Pay within ' }),
        ' in My orders.');
      c.msg.querySelectorAll('[data-deadline]').forEach(tickNode);
      return;
    }
    const [text, kind] = CARD_ORDER_TEXT[o.status] || [`This order is ${o.status}.`, 'warn'];
    say(c.msg, text, kind);
  }

  function renderOrders(list) {
    if (!state.token) return;
    for (const o of list) {
      const c = state.cards.get(o.item_id);
      // Unless the card has said something else since (its clock is gone).
      if (c && c.msgOrder === o.id && c.msgStatus !== o.status && (c.msgStatus !== 'reserved' || c.msg.querySelector('.clock'))) {
        cardOrderMessage(c, o);
      }
    }
    const ul = $('orders');
    const seen = new Set();
    let prev = null;
    for (const o of list) {
      seen.add(o.id);
      let row = state.rows.get(o.id);
      // Rebuilt only when its status changes (or its payment's, or its item's name arrives), so
      // focus stays put.
      if (!row || row.status !== o.status || row.pstatus !== o.payment_status || row.name !== itemName(o.item_id)) {
        const fresh = makeOrderRow(o);
        updateRow(fresh);
        if (row) {
          fresh.msg.textContent = row.msg.textContent;
          fresh.msg.className = row.msg.className;
          // A checkout this page sent the shopper to is followed until the provider decides it
          // (a debit stays processing a while, then goes through or fails).
          if (state.checkouts.has(o.id)) {
            const decided = o.status !== 'reserved' || o.payment_status === 'failed' || o.payment_status === 'canceled';
            if (decided) state.checkouts.delete(o.id);
            if (o.status === 'paid') say(fresh.msg, 'Paid, thank you! The payment went through. You can rate it now.', 'ok');
            else if (o.status === 'expired') say(fresh.msg, 'The reservation ended before the payment went through. A payment that still goes through is refunded in full.', 'warn');
            else if (o.status === 'reserved' && o.payment_status === 'failed') say(fresh.msg, 'The payment did not go through: nothing was charged. Pay again before the time runs out.', 'warn');
          }
          const focused = row.root.contains(document.activeElement);
          row.root.replaceWith(fresh.root);
          if (focused) fresh.root.focus(); // its buttons are gone; stay on the order
        }
        row = fresh;
        state.rows.set(o.id, row);
      }
      if (state.returned && state.returned.order === o.id) {
        sayReturned(row, o, state.returned.outcome);
        state.returned = null;
      }
      const want = prev ? prev.nextSibling : ul.firstChild;
      if (want !== row.root) ul.insertBefore(row.root, want);
      prev = row.root;
    }
    for (const [id, row] of state.rows) {
      if (!seen.has(id)) {
        row.root.remove();
        state.rows.delete(id);
      }
    }
    $('orders-empty').hidden = list.length > 0;
  }

  // sayReturned tells the shopper back from Checkout where their payment stands.
  function sayReturned(row, o, outcome) {
    if (outcome === 'cancel') {
      say(row.msg, o.status === 'reserved'
        ? 'Checkout cancelled: nothing was charged. Pay again before the time runs out.'
        : 'Checkout cancelled: nothing was charged.', 'warn');
    } else if (o.status === 'paid') {
      say(row.msg, 'Paid, thank you! The payment went through. You can rate it now.', 'ok');
    } else if (o.status === 'reserved') {
      state.checkouts.add(o.id); // says Paid (or why not) when the provider's word arrives
      say(row.msg, o.payment_status === 'processing'
        ? 'Your payment is processing. This order stays reserved for you and turns Paid when it goes through.'
        : 'Thank you! This order turns Paid as soon as the payment provider confirms the payment.', 'ok');
    } else {
      say(row.msg, 'The reservation ended before the payment went through. A payment that still goes through is refunded in full.', 'warn');
    }
  }

  const PAYMENT_TEXT = { processing: 'payment processing', failed: 'payment failed, pay again', canceled: 'checkout ended' };

  function makeOrderRow(o) {
    const row = { id: o.id, status: o.status, pstatus: o.payment_status, name: itemName(o.item_id), busy: false, pay: null, cancel: null, stars: [] };
    row.msg = el('p', { class: 'msg', role: 'status', 'aria-live': 'polite' });
    const total = money(o.price_cents * o.quantity);
    const what = el('div', { class: 'what' },
      el('strong', { text: `${o.quantity} × ${itemName(o.item_id)}` }), ' ',
      el('span', { class: 'badge ' + o.status, text: ORDER_TEXT[o.status] || o.status }),
      el('div', { class: 'hint', text: `${total} · order ${o.id}` + (o.status === 'reserved' && PAYMENT_TEXT[o.payment_status] ? ` · ${PAYMENT_TEXT[o.payment_status]}` : '') }));
    const actions = el('div', { class: 'actions' });
    if (o.status === 'reserved') {
      const clock = el('span', { class: 'clock', 'data-deadline': String(Date.parse(o.expires_at)), 'data-prefix': 'Pay within ', 'data-expires': '1' });
      const pay = el('button', { type: 'button' }, 'Pay');
      const cancel = el('button', { type: 'button', class: 'danger' }, 'Cancel');
      pay.setAttribute('aria-label', `Pay for ${o.quantity} × ${itemName(o.item_id)}`);
      cancel.setAttribute('aria-label', `Cancel ${o.quantity} × ${itemName(o.item_id)}`);
      pay.addEventListener('click', () => changeOrder(row, o, 'pay'));
      cancel.addEventListener('click', () => changeOrder(row, o, 'cancel'));
      row.pay = pay;
      row.cancel = cancel;
      actions.append(clock, pay, cancel);
      tickNode(clock);
    } else if (o.status === 'paid') {
      actions.append(makeStars(o, row));
    }
    // The row takes the focus when its buttons go (paid, cancelled, expired), so it can hold it.
    row.root = el('li', { class: 'order', tabindex: '-1', 'data-order': o.id, 'data-item': o.item_id, 'data-status': o.status }, what, actions, row.msg);
    return row;
  }

  // updateRow enables a row's buttons unless it is working or a limit holds them.
  function updateRow(row) {
    if (row.pay) {
      for (const [b, key, label] of [[row.pay, 'pay', 'Pay'], [row.cancel, 'cancel', 'Cancel']]) {
        const wait = heldFor(key);
        b.disabled = row.busy || wait > 0;
        b.textContent = wait > 0 ? waitLabel(wait) : label;
      }
    }
    const wait = heldFor('rating');
    for (const b of row.stars) b.disabled = row.busy || wait > 0;
  }

  // checkout starts paying o at the shop's payment provider: the api opens (or answers again)
  // the order's Checkout Session, and this tab goes to its hosted page, where the shopper picks
  // a card (a declined one says so there, and another can be tried until the reservation
  // ends). Checkout sends the shopper back here (?checkout=success|cancel&order=…); the order
  // turns Paid when the provider's webhook reached the shop (orders refresh every few
  // seconds). It answers false when the shop has no provider (it settles outside: POST /pay).
  async function checkout(row, o) {
    const r = await api('POST', `/api/orders/${encodeURIComponent(o.id)}/checkout`, { token: state.token });
    if (!r.ok && r.status === 409 && r.error && /no payment provider/.test(r.error.message || '')) {
      state.provider = 'none';
      return false;
    }
    if (r.ok) {
      const p = r.data.payment || {};
      state.checkouts.add(o.id);
      if (p.checkout_url) {
        say(row.msg, 'Taking you to the checkout page…', 'ok');
        location.assign(p.checkout_url);
        return true; // the buttons stay disabled while the page goes
      }
      say(row.msg, 'The payment provider gave no checkout page; nothing was charged. Try again in a moment.', 'warn');
    } else {
      refused('pay', r, row.msg, describe(r, { what: 'pay' }));
      handleAuth(r);
      if (r.error && (r.error.code === 'order_expired' || r.error.code === 'invalid_state')) await refreshOrders();
    }
    row.busy = false;
    updateRow(row);
    return true;
  }

  async function changeOrder(row, o, what) {
    if (row.busy || heldFor(what)) return;
    const hadFocus = row.root.contains(document.activeElement);
    row.busy = true;
    updateRow(row);
    if (what === 'pay' && state.provider !== 'none' && await checkout(row, o)) {
      keepFocus(hadFocus, row.pay, row.root);
      return;
    }
    const r = await api('POST', `/api/orders/${encodeURIComponent(o.id)}/${what}`, { token: state.token });
    if (r.ok) {
      say(row.msg, what === 'pay' ? 'Paid, thank you! You can rate it now.' : 'Cancelled. The stock went back on sale.', 'ok');
      refreshBoards();
      await refreshOrders(); // redraws the row without its buttons; these stay disabled
    } else {
      row.busy = false;
      refused(what, r, row.msg, describe(r, { what }));
      updateRow(row);
      handleAuth(r);
      if (r.error && (r.error.code === 'order_expired' || r.error.code === 'invalid_state')) await refreshOrders();
    }
    const now = state.rows.get(o.id) || row;
    keepFocus(hadFocus, r.ok ? null : now[what], now.root);
  }

  // ---- ratings -----------------------------------------------------------------------------

  function ratedKey(itemID) { return `flashsale.rated.${state.user}.${itemID}`; }

  function makeStars(o, row) {
    const name = itemName(o.item_id);
    const mine = Number(sessionStorage.getItem(ratedKey(o.item_id)) || 0);
    row.note = el('span', { class: 'rating-note', text: mine ? `You rated it ${mine} of 5.` : 'Rate it:' });
    const group = el('div', { class: 'stars', role: 'group', 'aria-label': `Rate ${name}` });
    for (let n = 1; n <= 5; n++) {
      const b = el('button', { type: 'button', 'aria-label': `${n} star${n > 1 ? 's' : ''}`, 'aria-pressed': String(n === mine), 'data-stars': String(n) }, '★');
      if (n <= mine) b.classList.add('lit');
      b.addEventListener('click', () => rate(row, o, n));
      row.stars.push(b);
      group.append(b);
    }
    return el('div', { class: 'actions' }, row.note, group);
  }

  async function rate(row, o, n) {
    if (row.busy || heldFor('rating')) return;
    const hadFocus = row.root.contains(document.activeElement);
    row.busy = true;
    updateRow(row);
    const r = await api('POST', `/api/items/${encodeURIComponent(o.item_id)}/rating`, { token: state.token, body: { stars: n } });
    row.busy = false;
    if (r.ok) {
      sessionStorage.setItem(ratedKey(o.item_id), String(n));
      row.stars.forEach((x, i) => {
        x.setAttribute('aria-pressed', String(i + 1 === n));
        x.classList.toggle('lit', i < n);
      });
      const avg = Number(r.data.average);
      row.note.textContent = `You rated it ${n} of 5.`;
      say(row.msg, `Thanks! Average ${Number.isFinite(avg) ? avg.toFixed(1) : r.data.average} from ${r.data.count} rating${r.data.count === 1 ? '' : 's'}.`, 'ok');
      refreshBoards();
    } else {
      refused('rating', r, row.msg, describe(r, { what: 'rating' }));
      handleAuth(r);
    }
    updateRow(row);
    keepFocus(hadFocus, row.stars[n - 1], row.root);
  }

  // ---- leaderboards ------------------------------------------------------------------------

  function renderCategories() {
    const sel = $('lb-cat');
    const cats = [...new Set([...state.items.values()].map((i) => i.category).filter(Boolean))].sort();
    $('board-cat').hidden = cats.length === 0; // no categories: no empty choice
    const have = [...sel.options].map((o) => o.value);
    if (have.join('\n') === cats.join('\n')) return;
    sel.replaceChildren(...cats.map((c) => el('option', { value: c, text: c })));
    if (!cats.includes(state.category)) state.category = cats[0] || '';
    sel.value = state.category;
    sel.disabled = cats.length === 0;
    refreshBoards();
  }

  $('lb-cat').addEventListener('change', (ev) => {
    state.category = ev.target.value;
    sessionStorage.setItem('flashsale.category', state.category);
    refreshBoards();
  });

  async function loadBoard(path, listID, msgID, fmt, emptyText) {
    const r = await api('GET', path);
    const ol = $(listID);
    if (!r.ok) {
      ol.replaceChildren();
      say($(msgID), r.error.code === 'unavailable' ? 'Not available right now.' : describe(r), 'warn');
      return;
    }
    const entries = r.data.entries || [];
    ol.replaceChildren(...entries.map((e) => el('li', { 'data-item': e.item_id, value: String(e.rank) },
      el('span', { class: 'name', text: e.name || e.item_id }), ' ',
      el('span', { class: 'score', text: fmt(e.score) }))));
    say($(msgID), entries.length ? '' : emptyText, 'warn');
  }

  const stars = (s) => `${Number(s).toFixed(2)} ★`;
  const sold = (s) => `${Number(s)} sold`;
  async function refreshBoards() {
    if (document.hidden) return;
    const jobs = [
      loadBoard('/api/leaderboards/top-rated?limit=10', 'lb-top', 'lb-top-msg', stars, 'No ratings yet.'),
      loadBoard('/api/leaderboards/best-sellers?limit=10', 'lb-best', 'lb-best-msg', sold, 'Nothing paid yet.'),
    ];
    if (state.category) {
      jobs.push(loadBoard('/api/leaderboards/top-rated?limit=10&category=' + encodeURIComponent(state.category),
        'lb-cat-list', 'lb-cat-msg', stars, 'No ratings in this category yet.'));
    } else {
      $('lb-cat-list').replaceChildren();
      say($('lb-cat-msg'), 'No categories yet.', 'warn');
    }
    await Promise.all(jobs);
  }

  // ---- countdowns --------------------------------------------------------------------------

  // tickNode rewrites one countdown from its data-deadline (server-clock ms).
  function tickNode(n) {
    if (!n.dataset.deadline) return;
    const left = Number(n.dataset.deadline) - now();
    n.textContent = (n.dataset.prefix || '') + countdown(left);
    if (left <= 0 && n.dataset.expires && !n.dataset.fired) {
      n.dataset.fired = '1';
      n.textContent = 'Expiring…';
      setTimeout(refreshOrders, 500); // the server expires it; show that soon
    }
  }

  setInterval(() => {
    document.querySelectorAll('[data-deadline]').forEach(tickNode);
    tickHolds();
  }, 500);

  document.addEventListener('visibilitychange', () => {
    if (document.hidden) { closeStream(); setMode('poll'); return; }
    openStream(); refreshItems(); refreshOrders(); refreshBoards();
  });

  // A hook for tests and curious developers.
  window.flashsale.shop = { state, live, holds };

  // every runs fn now and then ms after each run ends, so slow answers never pile up.
  // Refreshes after an action call fn directly and do not start another loop.
  function every(fn, ms) {
    const loop = async () => {
      try { await fn(); } finally { setTimeout(loop, typeof ms === 'function' ? ms() : ms); }
    };
    loop();
  }

  showLogin();
  setMode('poll');
  openStream();
  every(refreshItems, ITEMS_EVERY);
  every(() => refreshOrders(ordersEvery() === ORDERS_IDLE), ordersEvery);
  every(refreshBoards, BOARDS_EVERY);
})();
