// The admin page's payments panel: refund a paid order through the provider
// (POST /api/admin/orders/{id}/refund, with an Idempotency-Key kept until the refund is
// answered, so a retry after a lost answer refunds once) and the disputed payments
// (GET /api/admin/payments/disputes), each with its order's refund button.
'use strict';

(() => {
  const { api, describe, money, el, say } = window.flashsale;
  const $ = (id) => document.getElementById(id);
  const TOKEN_KEY = 'flashsale.admin-token';
  // pending maps an order id to the key of its refund not yet answered for good.
  const pending = new Map();

  function token(msg) {
    const t = sessionStorage.getItem(TOKEN_KEY);
    if (!t) {
      say(msg, 'Enter the admin token first (top of the page).', 'bad');
      $('token').focus();
    }
    return t;
  }

  async function refund(order, restock, msg) {
    const tok = token(msg);
    if (!tok) return;
    if (!pending.has(order)) pending.set(order, crypto.randomUUID());
    say(msg, `Refunding ${order}…`, 'warn');
    const r = await api('POST', `/api/admin/orders/${encodeURIComponent(order)}/refund`,
      { token: tok, body: { restock }, headers: { 'Idempotency-Key': pending.get(order) } });
    if (r.status !== 503 && r.status !== 0) pending.delete(order); // answered for good
    if (!r.ok) {
      const why = r.error && r.error.code === 'invalid_state'
        ? 'Only a paid order with a payment can be refunded.'
        : describe(r, { admin: true, what: 'refund' });
      say(msg, `Refund of ${order} refused. ${why}`, 'bad');
      return;
    }
    const o = r.data.order;
    say(msg, `Order ${o.id} refunded (${money(o.quantity * o.price_cents)})${restock ? ', its units back on sale' : ''}.`);
  }

  $('refund-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const order = $('refund-order').value.trim();
    if (!order) {
      say($('refund-msg'), 'Enter an order id.', 'bad');
      return;
    }
    refund(order, $('refund-restock').checked, $('refund-msg'));
  });

  $('disputes-load').addEventListener('click', async () => {
    const msg = $('disputes-msg');
    const out = $('disputes-out');
    const tok = token(msg);
    if (!tok) return;
    const r = await api('GET', '/api/admin/payments/disputes', { token: tok });
    out.replaceChildren();
    if (!r.ok) {
      say(msg, 'Disputes unavailable. ' + describe(r, { admin: true }), 'bad');
      return;
    }
    const list = r.data.disputes;
    say(msg, list.length ? `${list.length} disputed payment(s), newest first.` : 'No disputed payment.', list.length ? 'warn' : 'ok');
    if (!list.length) return;
    const rows = list.map((d) => el('tr', {},
      el('td', { text: d.order_id }), el('td', { text: d.order_status || '—' }),
      el('td', { text: d.payment_intent || d.payment_id }), el('td', { text: money(d.amount_cents) }),
      el('td', { text: d.disputed_at }),
      el('td', {}, el('button', { type: 'button', class: 'refund', text: 'Refund',
        onclick: () => refund(d.order_id, false, msg) }))));
    out.append(el('div', { class: 'table-wrap' }, el('table', { id: 'disputes-table' },
      el('thead', {}, el('tr', {}, ...['Order', 'Status', 'Payment', 'Amount', 'Disputed at', ''].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, ...rows))));
  });
})();
