// The admin page's sales report: GET /api/admin/reports/sales (JSON for the table and charts,
// CSV for the download). The table lists every item of the window; choosing one draws its
// funnel and its refusals as uPlot bar charts. Each chart's figure carries data-labels and
// data-values (what is drawn), so tests can read it.
'use strict';

(() => {
  const { api, describe, money, el, say } = window.flashsale;
  const $ = (id) => document.getElementById(id);
  const TOKEN_KEY = 'flashsale.admin-token';
  const FUNNEL = ['joined', 'admitted', 'reserved', 'paid', 'expired', 'cancelled', 'refunded'];
  const REFUSED = ['sold_out', 'limit_exceeded', 'rate_limited', 'sale_not_started', 'sale_ended', 'queue_required'];
  const words = (k) => k.replace(/_/g, ' ');
  const charts = new Map();
  let report = null;

  function token() {
    const t = sessionStorage.getItem(TOKEN_KEY);
    if (!t) {
      say($('sales-msg'), 'Enter the admin token first (top of the page).', 'bad');
      $('token').focus();
    }
    return t;
  }

  // query builds the route's parameters from the form; null (and a message) when one is bad.
  function query() {
    const p = new URLSearchParams();
    for (const [id, name] of [['s-from', 'from'], ['s-to', 'to']]) {
      const v = $(id).value;
      if (!v) continue;
      const d = new Date(v);
      if (Number.isNaN(d.getTime())) {
        say($('sales-msg'), `“${name}” is not a time.`, 'bad');
        return null;
      }
      p.set(name, d.toISOString().replace(/\.\d{3}Z$/, 'Z'));
    }
    const item = $('s-item').value.trim();
    if (item) {
      if (!/^[A-Za-z0-9_-]{1,64}$/.test(item)) {
        say($('sales-msg'), 'An item id is letters, digits, - and _ (up to 64).', 'bad');
        return null;
      }
      p.set('item', item);
    }
    if (p.get('from') && p.get('to') && p.get('to') < p.get('from')) {
      say($('sales-msg'), '“To” is before “From”.', 'bad');
      return null;
    }
    const s = p.toString();
    return '/api/admin/reports/sales' + (s ? '?' + s : '');
  }

  const seconds = (s) => {
    if (s === null || s === undefined) return '–';
    if (s < 60) return `${Number(s.toFixed(1))} s`;
    const m = Math.floor(s / 60);
    return `${m} min ${Math.round(s - m * 60)} s`;
  };

  function table(items) {
    const head = ['Item', 'Sold / stock', 'Sold out after', 'Revenue', 'Refunded', 'Orders paid / made',
      'Refused', 'Peak / s', 'Wait p50 / p99', 'Out of order'];
    const cell = (label, text, cls) => el('td', { 'data-label': label, class: cls, text });
    return el('div', { class: 'table-wrap' },
      el('table', { class: 'stack', id: 'sales-table' },
        el('thead', {}, el('tr', {}, ...head.map((h, i) => el('th', { scope: 'col', class: i ? 'num' : undefined, text: h })), el('th', { scope: 'col', text: 'Charts' }))),
        el('tbody', {}, ...items.map((x) => {
          const refused = REFUSED.reduce((n, k) => n + x.refused[k], 0);
          const show = el('button', { type: 'button', class: 'secondary', text: 'Show', 'aria-label': `Show the charts of ${x.name || x.item_id}`,
            onclick: () => drawItem(x) });
          return el('tr', { 'data-item': x.item_id },
            cell(head[0], `${x.name} (${x.item_id})`),
            cell(head[1], `${x.sold_units} / ${x.stock_total}`, 'num'),
            cell(head[2], seconds(x.sell_out_seconds), 'num'),
            cell(head[3], money(x.revenue_cents), 'num'),
            cell(head[4], money(x.refunded_cents), 'num'),
            cell(head[5], `${x.funnel.paid} / ${x.funnel.reserved}`, 'num'),
            cell(head[6], String(refused), 'num'),
            cell(head[7], String(x.peak_purchases_per_second), 'num'),
            cell(head[8], `${seconds(x.wait_seconds.p50)} / ${seconds(x.wait_seconds.p99)}`, 'num'),
            el('td', { 'data-label': head[9], class: 'num', text: String(x.fairness.fifo_inversions),
              title: 'Pairs of admitted shoppers where the later joiner was admitted first (0: a fair line)' }),
            el('td', { class: 'actions' }, show));
        }))));
  }

  // bars draws labelled bars (one value each) in the figure with id.
  function bars(id, labels, values, colour) {
    const fig = $(id);
    const plot = fig.querySelector('.plot');
    const old = charts.get(id);
    if (old) old.destroy();
    const width = Math.max(240, Math.floor(plot.clientWidth || fig.clientWidth || 320));
    // Labels of about 90px each fit side by side; with less room they are slanted.
    const crowded = width / labels.length < 90;
    const opts = {
      width, height: 200,
      legend: { show: false },
      cursor: { show: false },
      scales: { x: { time: false, range: [-0.5, labels.length - 0.5] }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.15)] } },
      axes: [
        { splits: () => labels.map((_, i) => i), values: () => labels,
          rotate: crowded ? -40 : 0, size: crowded ? 80 : 30, gap: 4, font: '11px system-ui, sans-serif' },
        { size: 50 },
      ],
      series: [{}, { label: 'count', fill: colour, stroke: colour, paths: window.uPlot.paths.bars({ size: [0.6, 48] }), points: { show: false } }],
    };
    charts.set(id, new window.uPlot(opts, [labels.map((_, i) => i), values], plot));
    fig.dataset.labels = labels.join(',');
    fig.dataset.values = values.join(',');
  }

  function drawItem(x) {
    $('sales-charts').hidden = false;
    for (const s of document.querySelectorAll('#sales-charts .which')) s.textContent = `${x.name} (${x.item_id})`;
    bars('c-funnel', FUNNEL.map(words), FUNNEL.map((k) => x.funnel[k]), '#0b5cad');
    bars('c-refused', REFUSED.map(words), REFUSED.map((k) => x.refused[k]), '#b3261e');
    $('sales-charts').dataset.item = x.item_id;
  }

  $('sales-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const tok = token();
    const path = tok && query();
    if (!path) return;
    $('sales-load').disabled = true;
    const r = await api('GET', path, { token: tok });
    $('sales-load').disabled = false;
    $('sales-out').replaceChildren();
    $('sales-charts').hidden = true;
    if (!r.ok) {
      say($('sales-msg'), r.status === 503 ? 'The sales record (PostgreSQL) is unreachable; try again later.' : 'Could not load the report: ' + describe(r), 'bad');
      return;
    }
    report = r.data;
    if (!report.items.length) {
      say($('sales-msg'), 'No sale in this window.', 'warn');
      return;
    }
    say($('sales-msg'), `${report.items.length} item${report.items.length === 1 ? '' : 's'}.`, 'ok');
    $('sales-out').append(table(report.items));
    if (window.uPlot) drawItem(report.items[0]);
  });

  $('sales-csv').addEventListener('click', async () => {
    const tok = token();
    const path = tok && query();
    if (!path) return;
    const res = await fetch(path, { headers: { Authorization: 'Bearer ' + tok, Accept: 'text/csv' } });
    if (!res.ok) {
      say($('sales-msg'), res.status === 503 ? 'The sales record (PostgreSQL) is unreachable; try again later.' : `Could not download the report (HTTP ${res.status}).`, 'bad');
      return;
    }
    const url = URL.createObjectURL(await res.blob());
    const a = el('a', { href: url, download: 'sales-report.csv' });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    say($('sales-msg'), 'CSV downloaded.', 'ok');
  });

  window.addEventListener('resize', () => {
    if (report && !$('sales-charts').hidden) {
      const x = report.items.find((i) => i.item_id === $('sales-charts').dataset.item);
      if (x) drawItem(x);
    }
  });
})();
