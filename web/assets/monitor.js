// The sale monitor: GET /api/admin/stats once a second (every api instance's series, summed
// in Redis), drawn with uPlot (web/assets/vendor/uplot, MIT). A chart is rebuilt only when its
// set of series changes (a new outcome, a new item on sale); otherwise uPlot gets new data.
// Each chart's figure carries data-series (the series' names), data-last (their newest
// values) and data-points, so tests (and curious admins) can read what is drawn.
'use strict';

(() => {
  const { api, describe, say, showDataLost } = window.flashsale;
  const $ = (id) => document.getElementById(id);
  const TOKEN_KEY = 'flashsale.admin-token';
  const SECONDS = 120;
  const EVERY = 1000;
  const PALETTE = ['#0b5cad', '#b3261e', '#1f7a3f', '#7a4a00', '#6a1b9a', '#00838f', '#ad1457', '#4e342e', '#455a64', '#9e9d24'];
  const OUTCOME_COLOUR = { reserved: '#1f7a3f', replayed: '#00838f', sold_out: '#b3261e', limit_exceeded: '#7a4a00',
    rate_limited: '#6a1b9a', unavailable: '#ad1457' };

  const state = { token: sessionStorage.getItem(TOKEN_KEY), charts: new Map(), timer: null };

  function showToken() {
    $('token-form').hidden = !!state.token;
    $('token-set').hidden = !state.token;
    // Without a token there is nothing to draw: say what to do instead of six empty charts.
    $('monitor-prompt').hidden = !!state.token;
    $('monitor-charts').hidden = !state.token;
  }

  $('token-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const tok = $('token').value.trim();
    if (!tok) return;
    const r = await api('GET', '/api/admin/stats?seconds=1', { token: tok });
    if (r.status === 401 || r.status === 403) {
      say($('notice'), 'That token was refused. Check it and try again.', 'bad');
      $('token').setAttribute('aria-invalid', 'true');
      return;
    }
    $('token').removeAttribute('aria-invalid');
    $('token').value = '';
    state.token = tok;
    sessionStorage.setItem(TOKEN_KEY, tok);
    showToken();
    say($('notice'), 'Admin token accepted for this tab.', 'ok');
    refresh();
  });

  $('forget').addEventListener('click', () => {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    showToken();
    say($('notice'), 'Token forgotten.', 'warn');
  });

  // plotWidth fits a chart to its figure (one column on a phone).
  function plotWidth(fig) {
    return Math.max(200, Math.floor(fig.querySelector('.plot').clientWidth || fig.clientWidth || 300));
  }

  // The time axis's labels ("12:01:30") need about 60px each: ticks at least 80px apart keep
  // them from running into each other on a phone (about 300px of plot: four labels).
  const AXIS_FONT = '11px system-ui, -apple-system, sans-serif';
  function xAxis() {
    return { space: 80, font: AXIS_FONT, values: (u, splits) => splits.map((v) => timeLabel(v)) };
  }
  const timeLabel = (sec) => new Date(sec * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });

  // noteTicks records where the time axis's labels are drawn (data-xticks: [x px, label]...) and
  // its font, so a test can check that no two labels overlap.
  function noteTicks(fig, u) {
    const ax = u.axes[0];
    const splits = ax._splits || [];
    const labels = ax._values || [];
    fig.dataset.xticks = JSON.stringify(splits.map((v, i) => [Math.round(u.valToPos(v, 'x')), String(labels[i] ?? '')]));
    fig.dataset.xfont = AXIS_FONT;
  }

  // draw shows series (name -> values, aligned with t) in the figure with id; colours may
  // name a colour per series.
  function draw(id, t, series, colours = {}) {
    const fig = $(id);
    const names = Object.keys(series).sort();
    const data = [t, ...names.map((n) => series[n])];
    let c = state.charts.get(id);
    const key = names.join('\n');
    if (c && c.key !== key) {
      c.plot.destroy();
      c = null;
    }
    if (!c) {
      const opts = {
        width: plotWidth(fig), height: 180,
        scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
        axes: [xAxis(), { size: 50, font: AXIS_FONT }],
        hooks: { draw: [(u) => noteTicks(fig, u)] },
        legend: { live: false },
        series: [{}, ...names.map((n, i) => ({
          label: n, stroke: colours[n] || PALETTE[i % PALETTE.length], width: 2, spanGaps: false,
        }))],
      };
      c = { key, plot: new window.uPlot(opts, data, fig.querySelector('.plot')) };
      state.charts.set(id, c);
    } else {
      c.plot.setData(data);
    }
    const last = names.map((n) => {
      const v = series[n];
      for (let i = v.length - 1; i >= 0; i--) if (v[i] !== null && v[i] !== undefined) return `${n} ${v[i]}`;
      return `${n} –`;
    });
    fig.dataset.series = names.join(',');
    fig.dataset.colours = names.map((n, i) => colours[n] || PALETTE[i % PALETTE.length]).join(',');
    fig.dataset.last = last.join('; ');
    fig.dataset.points = String(t.length);
  }

  function render(s) {
    const t = s.t;
    $('instances').textContent = String(s.instances.length ? s.instances[s.instances.length - 1] : 0);
    const purchases = Object.keys(s.purchases).length ? s.purchases : { reserved: t.map(() => 0) };
    draw('c-purchases', t, purchases, OUTCOME_COLOUR);
    const stock = Object.keys(s.stock_left).length ? s.stock_left : { 'no item on sale': t.map(() => null) };
    draw('c-stock', t, stock);
    // Every series of these charts has a colour of its own.
    draw('c-latency', t, { p50: s.latency_ms.p50, p99: s.latency_ms.p99 }, { p50: '#00838f', p99: '#ad1457' });
    draw('c-requests', t, { requests: s.requests, '5xx': s.errors_5xx }, { requests: '#0b5cad', '5xx': '#b3261e' });
    // A Redis primary change is rare and matters: it shares a chart with expiries (both a
    // count per second), in a colour no other series uses.
    draw('c-expired', t, { expired: s.reservations_expired, 'Redis failovers': s.redis_failovers || t.map(() => 0) },
      { expired: '#7a4a00', 'Redis failovers': '#e65100' });
    draw('c-backlog', t, { outbox: s.outbox_backlog, 'consumer lag': s.consumer_lag },
      { outbox: '#4e342e', 'consumer lag': '#6a1b9a' });
  }

  async function refresh() {
    if (!state.token || document.hidden || !window.uPlot) return;
    const r = await api('GET', `/api/admin/stats?seconds=${SECONDS}`, { token: state.token });
    if (r.ok) {
      showDataLost(r.data.redis_data_lost);
      render(r.data);
      if ($('notice').dataset.stale) { say($('notice'), ''); delete $('notice').dataset.stale; }
    } else if (r.status === 401 || r.status === 403) {
      state.token = null;
      sessionStorage.removeItem(TOKEN_KEY);
      showToken();
      say($('notice'), 'The admin token was refused. Enter it again.', 'bad');
    } else {
      say($('notice'), 'Could not read the stats: ' + describe(r), 'warn');
      $('notice').dataset.stale = '1';
    }
  }

  window.addEventListener('resize', () => {
    for (const [id, c] of state.charts) c.plot.setSize({ width: plotWidth($(id)), height: 180 });
  });
  document.addEventListener('visibilitychange', () => { if (!document.hidden) refresh(); });

  showToken();
  const loop = async () => {
    try { await refresh(); } finally { setTimeout(loop, EVERY); }
  };
  loop();
})();
