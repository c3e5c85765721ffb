// The admin page: the admin token (this tab's session storage only), the create/edit item
// form, restock, CSV import with its per-line report, and the latest reconciliation report.
// The catalogue table polls GET /api/items every 2 s and is updated in place.
'use strict';

(() => {
  const { api, describe, money, el, say, picture } = window.flashsale;
  const $ = (id) => document.getElementById(id);
  const TOKEN_KEY = 'flashsale.admin-token';
  const STATUS_TEXT = { upcoming: 'Upcoming', live: 'Live', sold_out: 'Sold out', ended: 'Ended', archived: 'Archived' };

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    items: new Map(),
    rows: new Map(),
    editing: null, // item id being edited, or null for a new item
  };

  // ---- token -------------------------------------------------------------------------------

  function showToken() {
    $('token-form').hidden = !!state.token;
    $('token-set').hidden = !state.token;
  }

  $('token-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const tok = $('token').value.trim();
    if (!tok) {
      say($('notice'), 'Enter the admin token printed by the api at start-up (or FLASHSALE_ADMIN_TOKEN).', 'bad');
      return;
    }
    // The reconciliation route is admin-only and read-only: a 401/403 there means a wrong token.
    const r = await api('GET', '/api/admin/reconciliation', { token: tok });
    if (r.status === 401 || r.status === 403) {
      say($('notice'), 'That token was refused. Check it and try again.', 'bad');
      $('token').setAttribute('aria-invalid', 'true');
      $('token').focus();
      return;
    }
    $('token').removeAttribute('aria-invalid');
    $('token').value = '';
    state.token = tok;
    sessionStorage.setItem(TOKEN_KEY, tok);
    showToken();
    say($('notice'), 'Admin token accepted for this tab.', 'ok');
    showReport(r);
    $('f-id').focus();
  });

  $('forget').addEventListener('click', () => forget('Token forgotten.'));

  function forget(message) {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    showToken();
    say($('notice'), message, 'warn');
    $('token').focus();
  }

  // needToken tells the admin to enter the token first; true when it is missing.
  function needToken(msgNode) {
    if (state.token) return false;
    say(msgNode, 'Enter the admin token first (top of the page).', 'bad');
    $('token').focus();
    return true;
  }

  function handleAuth(r) {
    if (r.status === 401 || r.status === 403) forget('The admin token was refused. Enter it again.');
  }

  // ---- item form ---------------------------------------------------------------------------

  const fields = ['id', 'name', 'category', 'price', 'stock', 'limit', 'qrate', 'qmax', 'qttl', 'starts', 'ends', 'image'];

  function fieldError(name, text) {
    const input = $('f-' + name);
    $('f-' + name + '-err').textContent = text || '';
    if (text) input.setAttribute('aria-invalid', 'true');
    else input.removeAttribute('aria-invalid');
  }

  // parsePrice turns "19.99" into 1999 cents without floating point; null when malformed.
  function parsePrice(s) {
    const m = /^(\d{1,10})(?:[.,](\d{1,2}))?$/.exec(s.trim());
    if (!m) return null;
    return Number(m[1]) * 100 + Number((m[2] || '0').padEnd(2, '0'));
  }

  function toRFC3339(local) {
    if (!local) return null;
    const d = new Date(local);
    if (Number.isNaN(d.getTime())) return undefined;
    return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
  }

  function toLocalInput(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    const two = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())}T${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
  }

  // readForm validates every field and returns the PUT body, or null after marking the errors.
  function readForm() {
    fields.forEach((f) => fieldError(f, ''));
    const errs = {};
    const id = $('f-id').value.trim();
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(id)) errs.id = 'Use 1 to 64 letters, digits, - or _.';
    const name = $('f-name').value.trim();
    if (!name) errs.name = 'A name is required.';
    else if (new TextEncoder().encode(name).length > 200) errs.name = 'At most 200 bytes.';
    const category = $('f-category').value.trim();
    if (new TextEncoder().encode(category).length > 64) errs.category = 'At most 64 bytes.';
    const price = parsePrice($('f-price').value);
    if (price === null) errs.price = 'Enter a price such as 19.99 (0 or more, up to 2 decimals).';
    const stockText = $('f-stock').value.trim();
    const stock = Number(stockText);
    if (!state.editing && (stockText === '' || !Number.isInteger(stock) || stock < 0 || stock > 1e12)) {
      errs.stock = 'Stock is a whole number, 0 or more.';
    }
    const limit = Number($('f-limit').value);
    if (!Number.isInteger(limit) || limit < 1 || limit > 1e9) errs.limit = 'At least 1, a whole number.';
    // The waiting room: all three numbers, or none.
    const q = { qrate: [1, 100000], qmax: [1, 1000000], qttl: [1, 86400] };
    const qv = {};
    for (const [f, [lo, hi]] of Object.entries(q)) {
      const text = $('f-' + f).value.trim();
      qv[f] = text === '' ? null : Number(text);
      if (qv[f] !== null && (!Number.isInteger(qv[f]) || qv[f] < lo || qv[f] > hi)) errs[f] = `A whole number, ${lo} to ${hi}.`;
    }
    const qset = Object.values(qv).filter((v) => v !== null).length;
    if (qset > 0 && qset < 3) for (const f of Object.keys(q)) if (qv[f] === null) errs[f] = 'Fill in all three, or none.';
    const starts = toRFC3339($('f-starts').value);
    if (starts === undefined) errs.starts = 'Not a valid date and time.';
    const ends = toRFC3339($('f-ends').value);
    if (ends === undefined) errs.ends = 'Not a valid date and time.';
    else if (ends && starts && Date.parse(ends) <= Date.parse(starts)) errs.ends = 'The end must be after the start.';
    else if (ends && Date.parse(ends) <= Date.now() && !unchangedEnd(ends)) errs.ends = 'The end is in the past: choose a time from now on.';
    const image = $('f-image').value.trim();
    if (image.length > 2048) errs.image = 'At most 2,048 characters.';
    else if (image && !/^(https:\/\/[^\s/]+|\/(?!\/))\S*$/.test(image)) errs.image = 'Use an https:// address or a path on this site starting with /.';
    const bad = Object.keys(errs);
    if (bad.length) {
      bad.forEach((f) => fieldError(f, errs[f]));
      $('f-' + fields.find((f) => errs[f])).focus();
      return null;
    }
    const body = { name, category, price_cents: price, per_user_limit: limit };
    if (!state.editing) body.stock = stock;
    body.queue = qset === 3 ? { admit_per_second: qv.qrate, max_active: qv.qmax, pass_ttl_seconds: qv.qttl } : null;
    if (starts) body.starts_at = starts;
    if (ends) body.ends_at = ends;
    body.image_url = image || null;
    return { id, body };
  }

  // unchangedEnd: the item being edited already ends at ends (a past end may stay as it is).
  function unchangedEnd(ends) {
    const it = state.editing && state.items.get(state.editing);
    return !!(it && it.ends_at && Date.parse(it.ends_at) === Date.parse(ends));
  }

  function setMode(item) {
    state.editing = item ? item.id : null;
    $('editor-h').textContent = item ? `Edit ${item.name}` : 'New item';
    $('item-save').textContent = item ? 'Save changes' : 'Create item';
    $('f-id').readOnly = !!item;
    $('f-stock').disabled = !!item;
    $('f-stock-help').textContent = item ? 'Change stock with Restock in the table below.' : 'Initial stock. After creation use Restock.';
    fields.forEach((f) => fieldError(f, ''));
    if (item) {
      $('f-id').value = item.id;
      $('f-name').value = item.name;
      $('f-category').value = item.category || '';
      $('f-price').value = (item.price_cents / 100).toFixed(2);
      $('f-stock').value = String(item.stock_total);
      $('f-limit').value = String(item.per_user_limit);
      $('f-qrate').value = item.queue ? String(item.queue.admit_per_second) : '';
      $('f-qmax').value = item.queue ? String(item.queue.max_active) : '';
      $('f-qttl').value = item.queue ? String(item.queue.pass_ttl_seconds) : '';
      $('f-starts').value = toLocalInput(item.starts_at);
      $('f-ends').value = toLocalInput(item.ends_at);
      $('f-image').value = item.image_url || '';
    } else {
      $('item-form').reset();
    }
  }

  $('item-new').addEventListener('click', () => {
    setMode(null);
    say($('item-msg'), '');
    $('f-id').focus();
  });

  $('item-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const msg = $('item-msg');
    const form = readForm();
    if (!form) {
      say(msg, 'Please fix the marked fields.', 'bad');
      return;
    }
    if (needToken(msg)) return;
    const btn = $('item-save');
    btn.disabled = true;
    const r = await api('PUT', '/api/admin/items/' + encodeURIComponent(form.id), { token: state.token, body: form.body });
    btn.disabled = false;
    if (!r.ok) {
      say(msg, describe(r, { admin: true, what: 'item' }), 'bad');
      handleAuth(r);
      return;
    }
    const it = r.data.item;
    say(msg, r.status === 201 ? `Created ${it.name} (${it.id}) with ${it.stock_total} in stock.` : `Saved ${it.name} (${it.id}).`, 'ok');
    setMode(null);
    refreshItems();
  });

  // ---- catalogue and restock ---------------------------------------------------------------

  function makeRow(item) {
    const id = item.id;
    const row = { id, cells: {} };
    const labels = { id: 'Id', name: 'Name', category: 'Category', price: 'Price', stock: 'Left / total', limit: 'Limit', status: 'Status' };
    for (const [k, label] of Object.entries(labels)) row.cells[k] = el('td', { 'data-label': label });
    for (const k of ['price', 'stock', 'limit']) row.cells[k].className = 'num';
    const edit = el('button', { type: 'button', class: 'secondary' }, 'Edit');
    row.edit = edit;
    edit.addEventListener('click', () => {
      setMode(state.items.get(id));
      say($('item-msg'), '');
      $('f-name').focus();
    });
    row.delta = el('input', { id: 'delta-' + id, type: 'number', step: '1', placeholder: '+/-', inputmode: 'numeric' });
    row.deltaLabel = el('label', { for: 'delta-' + id, class: 'sr-only' });
    const apply = el('button', { type: 'submit' }, 'Restock');
    row.apply = apply;
    const form = el('form', { class: 'restock', 'data-item': id }, row.deltaLabel, row.delta, apply);
    form.addEventListener('submit', (ev) => { ev.preventDefault(); restock(row); });
    // Archiving is for good: the first click asks, the second (within 5 s) archives.
    row.archive = el('button', { type: 'button', class: 'secondary archive' }, 'Archive');
    row.archive.addEventListener('click', () => archive(row));
    row.form = form;
    row.root = el('tr', { 'data-item': id },
      row.cells.id, row.cells.name, row.cells.category, row.cells.price, row.cells.stock,
      row.cells.limit, row.cells.status, el('td', { class: 'actions' }, el('div', { class: 'restock' }, edit, form, row.archive)));
    return row;
  }

  function updateRow(row, item) {
    row.cells.id.textContent = item.id;
    if (!row.thumb) row.thumb = el('span', { class: 'pic thumb', 'aria-hidden': 'true' });
    row.cells.name.replaceChildren(row.thumb, item.name);
    picture(row.thumb, item.image_url);
    row.cells.category.textContent = item.category || '—';
    row.cells.price.textContent = money(item.price_cents);
    row.cells.stock.textContent = `${item.stock_left} / ${item.stock_total}`;
    row.cells.limit.textContent = String(item.per_user_limit);
    row.cells.status.textContent = STATUS_TEXT[item.status] || item.status;
    if (item.queue) refreshLine(row, item);
    row.edit.setAttribute('aria-label', `Edit ${item.name}`);
    row.deltaLabel.textContent = `Stock change for ${item.name}`;
    const archived = item.status === 'archived';
    row.edit.hidden = row.form.hidden = row.archive.hidden = archived;
    if (!row.confirming) row.archive.setAttribute('aria-label', `Archive ${item.name}`);
  }

  async function archive(row) {
    const msg = $('stock-msg');
    if (needToken(msg)) return;
    const item = state.items.get(row.id);
    if (!row.confirming) {
      row.confirming = setTimeout(() => { row.confirming = null; row.archive.textContent = 'Archive'; }, 5000);
      row.archive.textContent = 'Confirm archive';
      say(msg, `Archive ${item.name}? It goes off sale for good (open reservations may still be paid). Click "Confirm archive" to go on.`);
      return;
    }
    clearTimeout(row.confirming);
    row.confirming = null;
    row.archive.textContent = 'Archive';
    row.archive.disabled = true;
    const r = await api('POST', `/api/admin/items/${encodeURIComponent(row.id)}/archive`, { token: state.token });
    row.archive.disabled = false;
    if (!r.ok) {
      say(msg, describe(r, { admin: true, what: 'archive' }), 'bad');
      handleAuth(r);
      return;
    }
    state.items.set(row.id, r.data.item);
    updateRow(row, r.data.item);
    say(msg, `${r.data.item.name} is archived: off sale for good, kept in the record and the reports.`, 'ok');
  }

  // refreshLine shows an item's live line length beside its status (admin route).
  async function refreshLine(row, item) {
    if (!state.token) return;
    const r = await api('GET', `/api/admin/items/${encodeURIComponent(item.id)}/queue`, { token: state.token });
    if (!r.ok) return;
    const l = r.data.line;
    row.cells.status.textContent = `${STATUS_TEXT[item.status] || item.status} · ${l.waiting} in line, ${l.live_passes} ${l.live_passes === 1 ? 'pass' : 'passes'} live`;
  }

  function renderItems(list) {
    const body = $('catalogue').tBodies[0];
    const seen = new Set();
    let prev = null;
    for (const item of list) {
      seen.add(item.id);
      state.items.set(item.id, item);
      let row = state.rows.get(item.id);
      if (!row) {
        row = makeRow(item);
        state.rows.set(item.id, row);
      }
      updateRow(row, item);
      const want = prev ? prev.nextSibling : body.firstChild;
      if (want !== row.root) body.insertBefore(row.root, want);
      prev = row.root;
    }
    for (const [id, row] of state.rows) {
      if (!seen.has(id)) {
        row.root.remove();
        state.rows.delete(id);
        state.items.delete(id);
      }
    }
    $('catalogue-empty').hidden = list.length > 0;
    const cats = [...new Set(list.map((i) => i.category).filter(Boolean))].sort();
    $('categories').replaceChildren(...cats.map((c) => el('option', { value: c })));
  }

  // refreshItems lists every item, archived ones included, with the admin token (the
  // shoppers' list without it).
  async function refreshItems() {
    const r = state.token
      ? await api('GET', '/api/admin/items', { token: state.token })
      : await api('GET', '/api/items');
    if (r.ok) renderItems(r.data.items || []);
    else if (state.token) handleAuth(r);
  }

  async function restock(row) {
    const msg = $('stock-msg');
    const text = row.delta.value.trim();
    const delta = Number(text);
    if (text === '' || !Number.isInteger(delta) || delta === 0) {
      row.delta.setAttribute('aria-invalid', 'true');
      say(msg, 'Enter a whole number of units to add (negative to withdraw), not 0.', 'bad');
      row.delta.focus();
      return;
    }
    row.delta.removeAttribute('aria-invalid');
    if (needToken(msg)) return;
    row.apply.disabled = true;
    const r = await api('POST', `/api/admin/items/${encodeURIComponent(row.id)}/stock`, { token: state.token, body: { delta } });
    row.apply.disabled = false;
    if (!r.ok) {
      say(msg, describe(r, { admin: true, what: 'stock' }), 'bad');
      handleAuth(r);
      return;
    }
    const it = r.data.item;
    row.delta.value = '';
    updateRow(row, it);
    say(msg, `${it.name}: ${delta > 0 ? 'added ' + delta : 'withdrew ' + -delta}; now ${it.stock_left} left of ${it.stock_total}.`, 'ok');
  }

  // ---- CSV import --------------------------------------------------------------------------

  const IMPORT_ERRORS_SHOWN = 500;

  $('import-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const msg = $('import-msg');
    const out = $('import-errors');
    out.replaceChildren();
    const file = $('csv-file').files[0];
    const text = file ? await file.text() : $('csv-text').value;
    if (!text.trim()) {
      say(msg, 'Choose a CSV file or paste CSV text first.', 'bad');
      return;
    }
    if (needToken(msg)) return;
    const btn = $('import-go');
    btn.disabled = true;
    const r = await api('POST', '/api/admin/items/import', { token: state.token, raw: text, headers: { 'Content-Type': 'text/csv' } });
    btn.disabled = false;
    if (!r.ok) {
      say(msg, 'Import refused. ' + describe(r, { admin: true, what: 'import' }), 'bad');
      handleAuth(r);
      return;
    }
    const { created, updated, errors = [] } = r.data;
    say(msg, `Created ${created}, updated ${updated}` + (errors.length ? `; ${errors.length} line${errors.length === 1 ? '' : 's'} skipped (see below).` : '; no errors.'),
      errors.length ? 'warn' : 'ok');
    if (errors.length) {
      // A file of junk can report every one of its lines: show the first ones, say how many more.
      const shown = errors.slice(0, IMPORT_ERRORS_SHOWN);
      const body = el('tbody');
      for (const e of shown) body.append(el('tr', {}, el('td', { class: 'num', text: String(e.line) }), el('td', { text: e.message })));
      out.append(el('div', { class: 'table-wrap' }, el('table', { id: 'import-report' },
        el('caption', { class: 'sr-only', text: 'Lines that were not imported' }),
        el('thead', {}, el('tr', {}, el('th', { scope: 'col', class: 'num', text: 'Line' }), el('th', { scope: 'col', text: 'Problem' }))),
        body)));
      if (errors.length > shown.length) {
        out.append(el('p', { class: 'hint', text: `…and ${errors.length - shown.length} more lines skipped, not listed here.` }));
      }
    }
    refreshItems();
  });

  // ---- reconciliation ----------------------------------------------------------------------

  function showReport(r) {
    const msg = $('recon-msg');
    const out = $('recon-out');
    out.replaceChildren();
    if (r.ok && r.data && r.data.run === null) {
      say(msg, 'No reconciliation report yet: no batch run has ended. Run one with the reconciler (see the README), then load again.', 'warn');
      return;
    }
    if (r.ok) {
      say(msg, '');
      out.append(...reportView(r.data.run));
      return;
    }
    if (r.status === 503 || r.status === 404) {
      say(msg, 'No reconciliation report yet: the reconciler has not produced one, or PostgreSQL is unreachable. Try again later.', 'warn');
      return;
    }
    say(msg, describe(r, { admin: true }), 'bad');
    handleAuth(r);
  }

  const RUN_TEXT = { ok: 'No drift', drift: 'Drift found', failed: 'Failed', abandoned: 'Abandoned' };
  const KIND_TEXT = {
    item_missing_in_postgres: 'Item missing in PostgreSQL', item_missing_in_redis: 'Item missing in Redis',
    stock_counter: 'Stock counter', item_attribute: 'Item attribute',
    order_missing_in_postgres: 'Order missing in PostgreSQL', order_missing_in_redis: 'Order missing in Redis',
    order_status: 'Order status', order_user: 'Order user', order_quantity: 'Order quantity',
    order_price: 'Order price', rating: 'Rating',
    order_id_reused: 'Order id holds two orders', order_conflict_parked: 'Conflicting order event parked',
    payment_without_order: 'Money: payment without a paid order', paid_without_payment: 'Money: paid without a succeeded payment',
    amount_mismatch: 'Money: amount differs from the order', refund_missing: 'Money: refund missing at the provider',
  };

  // reportView: the run's summary, its drift counted by kind (with a few examples of each),
  // what it could not verify, and the whole report folded away for the curious.
  function reportView(run) {
    const rep = run.report || {};
    const when = (t) => (t ? new Date(t).toLocaleString() : '—');
    const rows = [
      ['Status', RUN_TEXT[run.status] || run.status],
      ['Finished', when(run.finished_at)],
      ['Run', `#${run.id}` + (rep.duration_ms != null ? `, ${(rep.duration_ms / 1000).toFixed(1)} s` : '')],
    ];
    if (rep.items != null) rows.push(['Checked', `${rep.items} items, ${rep.orders} orders`]);
    if (run.error) rows.push(['Error', run.error]);
    const parts = [el('dl', { class: 'summary' }, ...rows.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: String(v) })]))];

    const byKind = new Map();
    // The money check's drift (the provider's payments against the record) sits beside the
    // orders' drift, one row per kind.
    for (const d of [...(rep.drift || []), ...((rep.money && rep.money.drift) || [])]) {
      const k = d.kind || 'other';
      if (!byKind.has(k)) byKind.set(k, []);
      byKind.get(k).push(d);
    }
    const example = (d) => [d.item_id, d.order_id, d.user_id, d.payment_id].filter(Boolean).join(' / ') +
      (d.field ? ` (${d.field})` : '') + (d.repair ? ` [${d.repair}]` : '');
    const table = el('table', { class: 'recon' },
      el('thead', {}, el('tr', {}, el('th', { text: 'Kind' }), el('th', { class: 'num', text: 'Drift' }), el('th', { text: 'Examples' }))),
      el('tbody', {}, ...(byKind.size
        ? [...byKind].map(([k, list]) => el('tr', { 'data-kind': k },
          el('td', { text: KIND_TEXT[k] || k }),
          el('td', { class: 'num', text: String(list.length) }),
          el('td', { text: list.slice(0, 3).map(example).join(', ') + (list.length > 3 ? ', …' : '') })))
        : [el('tr', {}, el('td', { colspan: '3', text: run.report ? 'No drift: Redis and PostgreSQL agree.' : 'No report (see the status).' }))])));
    parts.push(el('div', { class: 'table-wrap' }, table));
    if (rep.money && rep.money.skipped) {
      parts.push(el('p', { class: 'msg warn', text: `The money check did not run: ${rep.money.skipped}` }));
    }
    const unv = rep.unverified || [];
    if (unv.length) {
      parts.push(el('p', { class: 'msg warn', text: `${unv.length} ${unv.length === 1 ? 'item' : 'items'} could not be verified (checked again next run): ` +
        unv.slice(0, 5).map((u) => `${u.item_id} (${u.reason})`).join(', ') }));
    }
    parts.push(el('details', {}, el('summary', { text: 'Whole report (JSON)' }),
      el('pre', { class: 'report', text: JSON.stringify(run, null, 2) })));
    return parts;
  }

  $('recon-load').addEventListener('click', async () => {
    if (needToken($('recon-msg'))) return;
    const btn = $('recon-load');
    btn.disabled = true;
    const [r, h] = await Promise.all([
      api('GET', '/api/admin/reconciliation', { token: state.token }),
      api('GET', '/api/admin/reconciliation/runs?limit=10', { token: state.token }),
    ]);
    btn.disabled = false;
    showReport(r);
    if (r.ok && h.ok && h.data.runs.length) $('recon-out').append(historyView(h.data.runs));
  });

  // historyView: the newest runs, one row each, so a trend (drift growing, runs failing) shows.
  function historyView(runs) {
    const when = (t) => (t ? new Date(t).toLocaleString() : 'running');
    return el('div', { class: 'table-wrap' },
      el('table', { class: 'recon-history' },
        el('caption', { text: 'Recent runs' }),
        el('thead', {}, el('tr', {}, el('th', { text: 'Run' }), el('th', { text: 'Finished' }), el('th', { text: 'Status' }),
          el('th', { class: 'num', text: 'Drift' }), el('th', { class: 'num', text: 'Unverified' }))),
        el('tbody', {}, ...runs.map((x) => el('tr', { 'data-run': String(x.id) },
          el('td', { text: '#' + x.id }), el('td', { text: when(x.finished_at) }),
          el('td', { text: RUN_TEXT[x.status] || x.status, title: x.error || '' }),
          el('td', { class: 'num', text: String(x.drift) }), el('td', { class: 'num', text: String(x.unverified) }))))));
  }

  // every runs fn now and then ms after each run ends, so slow answers never pile up.
  function every(fn, ms) {
    const loop = async () => {
      try { await fn(); } finally { setTimeout(loop, ms); }
    };
    loop();
  }

  showToken();
  setMode(null);
  every(() => (document.hidden ? null : refreshItems()), 2000);
  every(async () => {
    if (document.hidden || !state.token) return;
    const r = await api('GET', '/api/admin/stats?seconds=1', { token: state.token });
    if (r.ok) window.flashsale.showDataLost(r.data.redis_data_lost);
  }, 5000);
})();
