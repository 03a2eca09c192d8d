
'use strict';
// memsif view: draws the memory held in #memsif-data. Stored text is only ever shown through text
// nodes (textContent, createTextNode, setAttribute of plain attributes): never parsed as markup.
(function () {
  var SVGNS = 'http://www.w3.org/2000/svg';
  var LEFT = 178, RIGHT = 12, MAX_LANES = 28, MAX_FACT_ROWS = 40, MAX_TICKS = 400, MAX_LIST = 200;
  var UNITS = [
    { name: 'minute', s: 60 }, { name: '10 minutes', s: 600 }, { name: 'hour', s: 3600 },
    { name: '6 hours', s: 21600 }, { name: 'day', s: 86400 }, { name: 'week', s: 604800 },
    { name: 'month', s: 2629746, cal: 1 }, { name: 'year', s: 31556952, cal: 12 }];
  var MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  var SPEAKER_COLOURS = ['#2f6fd6', '#d6602f', '#2f9d5a', '#9b4fd1', '#c9a21a', '#1aa3b8', '#c2417a', '#6d7a8c'];

  function $(id) { return document.getElementById(id); }
  function put(node, kids) {
    if (kids === null || kids === undefined) return node;
    if (!Array.isArray(kids)) kids = [kids];
    for (var i = 0; i < kids.length; i++) {
      var k = kids[i];
      if (k === null || k === undefined || k === false) continue;
      node.appendChild(typeof k === 'object' ? k : document.createTextNode(String(k)));
    }
    return node;
  }
  function attrs(node, a) {
    if (a) for (var k in a) if (a[k] !== null && a[k] !== undefined) node.setAttribute(k, String(a[k]));
    return node;
  }
  function h(tag, a, kids) { return put(attrs(document.createElement(tag), a), kids); }
  function s(tag, a, kids) { return put(attrs(document.createElementNS(SVGNS, tag), a), kids); }
  function tip(node, text) { node.appendChild(s('title', null, text)); return node; }
  function link(go, text) { return h('a', { href: '#' + go }, text); }
  function num(n) { return Number(n).toLocaleString('en-US'); }
  function plural(n, word, many) { return num(n) + ' ' + (n === 1 ? word : (many || word + 's')); }
  function clip(text, n) { text = String(text); return text.length <= n ? text : text.slice(0, n - 1) + '\u2026'; }

  // -- the data ---------------------------------------------------------------------------------
  var holder = $('memsif-data');
  var D = JSON.parse(holder.textContent);
  holder.textContent = '';
  if (D.v !== 1) throw new Error('memsif view: unknown document format ' + D.v);

  // columns as typed arrays: 4 bytes a value where every value fits (ids, indexes), else 8
  var NONE = -2147483648;
  function fits(v) { return v > NONE && v <= 2147483647 && Math.floor(v) === v; }
  function undelta(a, wide) {
    var acc = 0, small = !wide, i;
    for (i = 0; i < a.length && small; i++) { acc += a[i]; small = fits(acc); }
    var out = small ? new Int32Array(a.length) : new Float64Array(a.length);
    for (i = 0, acc = 0; i < a.length; i++) { acc += a[i]; out[i] = acc; }
    return out;
  }
  function unruns(r, n) {  // null: NONE
    var out = new Int32Array(n), i = 0;
    for (var k = 0; k < r.length; k++) {
      var v = r[k][0];
      out.fill(v === null || !fits(v) ? NONE : v, i, i + r[k][1]);
      i += r[k][1];
    }
    return out;
  }
  var M = {
    id: undelta(D.m.id), t: undelta(D.m.t, true), sp: Int32Array.from(D.m.sp), x: D.m.x, seg: undelta(D.m.seg),
    speakers: D.m.speakers, sessions: D.m.sessions
  };
  M.n = M.id.length;
  M.off = unruns(D.m.off, M.n);
  M.se = unruns(D.m.se, M.n);
  D.m = { clipped: D.m.clipped };  // the coded columns are decoded: let them go
  // a message's row by id: they come in id order (data.py), so a binary search (no 100,000-entry map)
  var msgRow = {
    get: function (id) { var k = lowerBound(M.id, id); return k < M.n && M.id[k] === id ? k : undefined; },
    has: function (id) { return this.get(id) !== undefined; }
  };
  var i;
  // messages in time order (ties by id): ord[k] is a row, ts[k] its time
  var ord = new Uint32Array(M.n);
  var sorted = true;
  for (i = 0; i < M.n; i++) { ord[i] = i; if (i && M.t[i] < M.t[i - 1]) sorted = false; }
  if (!sorted) ord.sort(function (p, q) { return M.t[p] - M.t[q] || M.id[p] - M.id[q]; });
  var ts = new Float64Array(M.n);
  for (i = 0; i < M.n; i++) ts[i] = M.t[ord[i]];

  var S = { id: D.s.id, tr: D.s.tr, a: D.s.a, b: D.s.b, c: D.s.c, l: D.s.l, n: D.s.id.length };
  var segRow = new Map();
  for (i = 0; i < S.n; i++) segRow.set(S.id[i], i);
  S.cnt = new Int32Array(S.n);
  for (i = 0; i < M.n; i++) { var sr = segRow.get(M.seg[i]); if (sr !== undefined) S.cnt[sr]++; }
  // each segment's messages (rows, in id order): segList[segStart[r] .. segStart[r + 1])
  var segStart = new Int32Array(S.n + 1), fill = new Int32Array(S.n), segList = new Int32Array(M.n);
  for (i = 0; i < S.n; i++) segStart[i + 1] = segStart[i] + S.cnt[i];
  for (i = 0; i < M.n; i++) {
    sr = segRow.get(M.seg[i]);
    if (sr !== undefined) segList[segStart[sr] + fill[sr]++] = i;
  }
  function segMessages(r) { return Array.prototype.slice.call(segList, segStart[r], segStart[r + 1]); }

  var TR = { id: D.tr.id, a: D.tr.a, b: D.tr.b, l: D.tr.l, n: D.tr.id.length };
  var trRow = new Map();
  for (i = 0; i < TR.n; i++) trRow.set(TR.id[i], i);
  TR.segs = [];
  TR.cnt = new Int32Array(TR.n);
  for (i = 0; i < TR.n; i++) TR.segs.push([]);
  for (i = 0; i < S.n; i++) {
    var tr = trRow.get(S.tr[i]);
    if (tr !== undefined) { TR.segs[tr].push(i); TR.cnt[tr] += S.cnt[i]; }
  }

  var F = [];
  var factRow = new Map();
  for (i = 0; i < D.f.id.length; i++) {
    F.push({ id: D.f.id[i], su: D.f.su[i], ty: D.f.ty[i], x: D.f.x[i], a: D.f.a[i], b: D.f.b[i], by: D.f.by[i],
             o: D.f.o[i], src: D.f.src[i], h: D.f.h[i], supersedes: [] });
    factRow.set(D.f.id[i], i);
  }
  F.forEach(function (f) { var by = factRow.get(f.by); if (by !== undefined) F[by].supersedes.push(f.id); });

  // -- time -------------------------------------------------------------------------------------
  function pad(n) { return (n < 10 ? '0' : '') + n; }
  function iso(t) {
    var d = new Date(t * 1000), y = d.getUTCFullYear();
    var ys = y >= 0 && y <= 9999 ? ('000' + y).slice(-4) : String(y);
    return { y: ys, mo: d.getUTCMonth(), date: ys + '-' + pad(d.getUTCMonth() + 1) + '-' + pad(d.getUTCDate()),
             time: pad(d.getUTCHours()) + ':' + pad(d.getUTCMinutes()), d: d };
  }
  function fmtDay(t) { return iso(t).date; }
  function fmtMinute(t) { var p = iso(t); return p.date + ' ' + p.time; }
  function fmtLocal(t, off) {
    if (off === NONE) return fmtMinute(t) + ' UTC';
    var a = Math.abs(off);
    return fmtMinute(t + off * 60) + (off < 0 ? '-' : '+') + pad(Math.floor(a / 60)) + ':' + pad(a % 60);
  }
  function fmtSpan(sec) {
    var u = [[31556952, 'year'], [2629746, 'month'], [604800, 'week'], [86400, 'day'], [3600, 'hour'], [60, 'minute']];
    for (var k = 0; k < u.length; k++) if (sec >= u[k][0] * 1.5 || k === u.length - 1) {
      return plural(Math.max(1, Math.round(sec / u[k][0])), u[k][1]);
    }
    return '';
  }
  function floorUnit(t, u) {
    if (u.cal) {
      var d = new Date(Math.floor(t) * 1000);
      d.setUTCHours(0, 0, 0, 0);
      d.setUTCFullYear(d.getUTCFullYear(), u.cal === 12 ? 0 : d.getUTCMonth(), 1);
      return d.getTime() / 1000;
    }
    if (u.s === 604800) return Math.floor((t - 345600) / 604800) * 604800 + 345600;  // weeks start on Monday
    return Math.floor(t / u.s) * u.s;
  }
  function nextUnit(t, u) {
    if (!u.cal) return t + u.s;
    var d = new Date(t * 1000);
    if (u.cal === 12) d.setUTCFullYear(d.getUTCFullYear() + 1, 0, 1);
    else d.setUTCFullYear(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
    return d.getTime() / 1000;
  }
  function tickLabel(t, u, first) {
    var p = iso(t), d = p.d.getUTCDate(), md = MONTHS[p.mo] + ' ' + d;
    if (u.cal === 12) return p.y;
    if (u.cal) return MONTHS[p.mo] + (first || p.mo === 0 ? ' ' + p.y : '');
    if (u.s >= 86400) return md + (first || (p.mo === 0 && d === 1) ? ', ' + p.y : '');
    return (first || p.time === '00:00' ? md + ' ' : '') + p.time;
  }
  function binLabel(t, u) {
    var p = iso(t);
    if (u.cal === 12) return p.y;
    if (u.cal) return MONTHS[p.mo] + ' ' + p.y;
    if (u.s >= 86400) return (u.s === 604800 ? 'week of ' : '') + p.date;
    return p.date + ' ' + p.time;
  }
  function lowerBound(arr, v) { var lo = 0, hi = arr.length; while (lo < hi) { var m = (lo + hi) >> 1; if (arr[m] < v) lo = m + 1; else hi = m; } return lo; }
  function upperBound(arr, v) { var lo = 0, hi = arr.length; while (lo < hi) { var m = (lo + hi) >> 1; if (arr[m] <= v) lo = m + 1; else hi = m; } return lo; }

  var tMin = Infinity, tMax = -Infinity;
  if (M.n) { tMin = ts[0]; tMax = ts[M.n - 1]; }
  F.forEach(function (f) { tMin = Math.min(tMin, f.a); tMax = Math.max(tMax, f.b === null ? f.a : f.b); });
  if (tMin === Infinity) { tMax = D.file.generated_at; tMin = tMax - 86400; }
  var MIN_SPAN = 600, MAX_SPAN = Math.max((tMax - tMin) * 1.3, 3 * 86400);
  function fullView() {
    var span = Math.max(tMax - tMin, 3600), padT = span * 0.03;
    return { a: tMin - padT, b: tMax + padT };
  }
  var V = fullView();

  function trColour(id) { return 'hsl(' + Math.round((id * 137.508) % 360) + ',58%,46%)'; }
  function spColour(k) { return SPEAKER_COLOURS[k % SPEAKER_COLOURS.length]; }

  // -- the selection ----------------------------------------------------------------------------
  var sel = { seg: null, traj: null, fact: null, msg: null };

  function setView(a, b) {
    var span = Math.min(Math.max(b - a, MIN_SPAN), MAX_SPAN), mid = (a + b) / 2;
    V = { a: mid - span / 2, b: mid + span / 2 };
    draw();
  }
  function around(a, b, minSpan) {
    var span = Math.max(b - a, minSpan), mid = (a + b) / 2;
    setView(mid - span * 0.6, mid + span * 0.6);
  }

  // -- the timeline -----------------------------------------------------------------------------
  var svg = $('tl');
  var geom = null;

  function chooseUnit(span, pw, minPx) {
    for (var k = 0; k < UNITS.length; k++) if (UNITS[k].s / span * pw >= minPx) return UNITS[k];
    return UNITS[UNITS.length - 1];
  }

  function draw() {
    var started = performance.now();
    var W = Math.max(640, $('tl-wrap').clientWidth || 1000), PW = W - LEFT - RIGHT, span = V.b - V.a;
    function x(t) { return LEFT + (t - V.a) / span * PW; }
    function cx(t) { return Math.min(Math.max(x(t), LEFT), LEFT + PW); }
    var binU = chooseUnit(span, PW, 5), tickU = chooseUnit(span, PW, 90);
    $('binname').textContent = binU.name;
    $('range').textContent = fmtMinute(V.a) + ' \u2192 ' + fmtMinute(V.b) + '  (' + fmtSpan(span) + ', bars by ' +
      binU.name + ')';
    var g = [];
    var defs = s('defs', null, s('pattern', { id: 'hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse',
      patternTransform: 'rotate(45)' }, [s('rect', { width: 6, height: 6, fill: '#f3f4f6' }),
      s('line', { x1: 0, y1: 0, x2: 0, y2: 6, stroke: '#d3d8df', 'stroke-width': 2 })]));
    g.push(defs);
    var Y_AXIS = 14, Y_HIST = 22, H_HIST = 46, y = Y_HIST + H_HIST + 4;
    // axis ticks
    var ticks = [], t = floorUnit(V.a, tickU);
    for (var guard = 0; t <= V.b && guard < 200; guard++, t = nextUnit(t, tickU)) if (t >= V.a) ticks.push(t);
    // messages in view
    var i0 = lowerBound(ts, V.a), i1 = upperBound(ts, V.b), inView = i1 - i0;
    var bins = [], bs = -Infinity, be = -Infinity, maxC = 1;
    for (var k = i0; k < i1; k++) {
      if (ts[k] >= be) { bs = floorUnit(ts[k], binU); be = nextUnit(bs, binU); bins.push([bs, be, 0]); }
      var last = bins[bins.length - 1];
      last[2]++;
      if (last[2] > maxC) maxC = last[2];
    }
    // gaps: a stretch without messages wider than two bars (and than 14 px)
    var gaps = [], gapMin = Math.max(2 * binU.s, span * 14 / PW);
    for (k = Math.max(i0, 1); k <= Math.min(i1, M.n - 1); k++) {
      var g0 = ts[k - 1], g1 = ts[k];
      if (g1 - g0 >= gapMin && g1 > V.a && g0 < V.b) gaps.push([g0, g1]);
    }
    if (gaps.length > 150) gaps = gaps.sort(function (p, q) { return (q[1] - q[0]) - (p[1] - p[0]); }).slice(0, 150);
    var detailed = inView > 0 && inView <= MAX_TICKS;
    var Y_MSG = y;
    if (detailed) y += 18;
    // lanes: trajectories crossing the view, the busiest first, then in time order
    var lanes = [], byTr = new Map(), open = [];
    for (k = 0; k < S.n; k++) {
      if (S.b[k] < V.a || S.a[k] > V.b) continue;
      var tr = trRow.get(S.tr[k]);
      if (tr === undefined) { open.push(k); continue; }
      var e = byTr.get(tr);
      if (!e) { e = { tr: tr, segs: [], n: 0 }; byTr.set(tr, e); }
      e.segs.push(k);
      e.n += S.cnt[k];
    }
    for (k = 0; k < TR.n; k++) {
      if (TR.a[k] <= V.b && TR.b[k] >= V.a && !byTr.has(k)) byTr.set(k, { tr: k, segs: [], n: 0 });
    }
    var all = Array.from(byTr.values());
    all.sort(function (p, q) { return q.n - p.n || TR.a[p.tr] - TR.a[q.tr]; });
    if (sel.traj !== null) {  // the selected thread always has its row
      var st = trRow.get(sel.traj);
      var at = all.findIndex(function (e) { return e.tr === st; });
      if (at >= MAX_LANES) all.unshift(all.splice(at, 1)[0]);
    }
    lanes = all.slice(0, MAX_LANES).sort(function (p, q) { return TR.a[p.tr] - TR.a[q.tr]; });
    var hiddenLanes = all.length - lanes.length;
    if (open.length) lanes.push({ tr: -1, segs: open, n: 0 });
    var Y_LANES = y + 6, LANE = 18;
    y = Y_LANES + lanes.length * LANE + (hiddenLanes ? 16 : 0);
    // facts valid in the view: the selected one, those that begin or end in it, then the latest begun
    var facts = F.filter(function (f) { return f.a <= V.b && (f.b === null || f.b >= V.a); });
    function rank(f) {
      return f.id === sel.fact ? 2 : (f.a >= V.a || (f.b !== null && f.b <= V.b)) ? 1 : 0;
    }
    facts.sort(function (p, q) { return rank(q) - rank(p) || q.a - p.a; });
    var hiddenFacts = Math.max(0, facts.length - MAX_FACT_ROWS);
    facts = facts.slice(0, MAX_FACT_ROWS).sort(function (p, q) {
      return p.su < q.su ? -1 : p.su > q.su ? 1 : p.ty < q.ty ? -1 : p.ty > q.ty ? 1 : p.a - q.a || p.id - q.id;
    });
    var Y_FACTS = y + (F.length ? 22 : 0), FROW = 16;
    var H = Y_FACTS + facts.length * FROW + (hiddenFacts ? 18 : 0) + 8;

    // draw: grid and axis
    ticks.forEach(function (tt, ti) {
      g.push(s('line', { class: 'tick', x1: x(tt), x2: x(tt), y1: Y_AXIS + 4, y2: H }));
      g.push(s('text', { class: 'tick-label', x: x(tt) + 3, y: Y_AXIS }, tickLabel(tt, tickU, ti === 0)));
    });
    gaps.forEach(function (gp) {
      var x0 = cx(gp[0]) + 2, x1 = cx(gp[1]) - 2;
      if (x1 - x0 < 6) return;
      g.push(tip(s('rect', { class: 'gap', x: x0, y: Y_HIST, width: x1 - x0, height: Y_LANES - Y_HIST - 4 }),
        'no messages for ' + fmtSpan(gp[1] - gp[0]) + ' (' + fmtMinute(gp[0]) + ' \u2192 ' + fmtMinute(gp[1]) + ')'));
      if (x1 - x0 > 80) {
        g.push(s('text', { class: 'gap-label', x: (x0 + x1) / 2, y: Y_HIST + H_HIST / 2 + 4, 'text-anchor': 'middle' },
          fmtSpan(gp[1] - gp[0]) + ' gap'));
      }
    });
    g.push(s('text', { class: 'section', x: 4, y: Y_HIST + 14 }, 'messages'));
    g.push(s('text', { x: 4, y: Y_HIST + 28 }, num(inView) + ' in view'));
    bins.forEach(function (bn) {
      var x0 = cx(bn[0]), x1 = cx(bn[1]), hh = 3 + (H_HIST - 3) * Math.sqrt(bn[2] / maxC);
      g.push(tip(s('rect', { class: 'bar', x: x0, y: Y_HIST + H_HIST - hh, width: Math.max(1, x1 - x0 - 1), height: hh,
        'data-go': 'zoom=' + bn[0] + ',' + bn[1] }), binLabel(bn[0], binU) + ': ' + plural(bn[2], 'message')));
    });
    if (detailed) {
      g.push(s('text', { x: 4, y: Y_MSG + 11 }, 'each message'));
      for (k = i0; k < i1; k++) {
        var r = ord[k], id = M.id[r];
        g.push(tip(s('rect', { class: 'msg' + (sel.msg === id ? ' sel' : ''), x: x(ts[k]) - 1.5, y: Y_MSG, width: 3,
          height: 13, fill: spColour(M.sp[r]), 'data-go': 'msg=' + id }),
          fmtLocal(M.t[r], M.off[r]) + '  ' + M.speakers[M.sp[r]] + ': ' + clip(M.x[r], 160)));
      }
    }
    // lanes
    lanes.forEach(function (ln, li) {
      var yy = Y_LANES + li * LANE, tid = ln.tr >= 0 ? TR.id[ln.tr] : null, colour = ln.tr >= 0 ? trColour(tid) : '#9aa3af';
      var isSel = tid !== null && sel.traj === tid;
      g.push(s('rect', { class: 'lane-bg' + (isSel ? ' sel' : ''), x: 0, y: yy - 2, width: W, height: LANE }));
      var name = tid !== null ? '#' + tid + ' ' + TR.l[ln.tr] : 'not yet linked';
      var lbl = s('text', { class: 'lane-label' + (isSel ? ' sel' : ''), x: 4, y: yy + 11,
        'data-go': tid !== null ? 'traj=' + tid : null }, clip(name, 27));
      g.push(tip(lbl, tid !== null ? 'Event Trajectory ' + tid + ': ' + TR.l[ln.tr] + ' (' +
        plural(TR.segs[ln.tr].length, 'segment') + ', ' + plural(TR.cnt[ln.tr], 'message') + ')'
        : 'segments not linked to a trajectory yet (open, or waiting in the backlog)'));
      if (tid !== null) {
        g.push(s('line', { class: 'thread', x1: cx(TR.a[ln.tr]), x2: cx(TR.b[ln.tr]), y1: yy + 6, y2: yy + 6,
          stroke: colour }));
      }
      var runs = ln.segs.map(function (sr) {
        var x0 = cx(S.a[sr]), x1 = Math.max(cx(S.b[sr]), x0 + 4);
        return { x0: x0, x1: x1, a: S.a[sr], b: S.b[sr], segs: [sr], n: S.cnt[sr] };
      }).sort(function (p, q) { return p.x0 - q.x0; });
      var merged = [];
      runs.forEach(function (rn) {
        var prev = merged[merged.length - 1];
        if (prev && rn.x0 <= prev.x1 + 1) {
          prev.x1 = Math.max(prev.x1, rn.x1); prev.a = Math.min(prev.a, rn.a); prev.b = Math.max(prev.b, rn.b);
          prev.segs.push(rn.segs[0]); prev.n += rn.n;
        } else merged.push(rn);
      });
      merged.forEach(function (rn) {
        var one = rn.segs.length === 1, sid = S.id[rn.segs[0]];
        var rect = s('rect', { class: 'seg' + (one && sel.seg === sid ? ' sel' : ''), x: rn.x0, y: yy, width: rn.x1 - rn.x0,
          height: 12, rx: 2, fill: colour, 'data-go': one ? 'seg=' + sid : 'zoom=' + rn.a + ',' + rn.b });
        g.push(tip(rect, one ? 'Topical Segment ' + sid + ': ' + S.l[rn.segs[0]] + '\n' + fmtMinute(rn.a) + ' \u2192 ' +
          fmtMinute(rn.b) + ', ' + plural(rn.n, 'message') : plural(rn.segs.length, 'segment') + ', ' +
          plural(rn.n, 'message') + ' (click to zoom in)'));
      });
    });
    if (hiddenLanes) {
      g.push(s('text', { class: 'more', x: 4, y: Y_LANES + lanes.length * LANE + 10 },
        '+ ' + plural(hiddenLanes, 'quieter thread') + ' in this period: zoom in to see them'));
    }
    // facts
    if (F.length) {
      g.push(s('text', { class: 'section', x: 4, y: Y_FACTS - 6 }, 'CoreFacts'));
      if (!facts.length) g.push(s('text', { class: 'more', x: LEFT, y: Y_FACTS - 6 }, 'none valid in this period'));
    }
    facts.forEach(function (f, fi) {
      var yy = Y_FACTS + fi * FROW, x0 = cx(f.a), x1 = f.b === null ? LEFT + PW : cx(f.b);
      x1 = Math.max(x1, x0 + 3);
      var lbl = s('text', { class: 'lane-label' + (sel.fact === f.id ? ' sel' : ''), x: 4, y: yy + 10,
        'data-go': 'fact=' + f.id }, clip(f.su + ' \u00b7 ' + f.ty, 27));
      g.push(tip(lbl, f.su + ' \u00b7 ' + f.ty + ': ' + f.x));
      g.push(tip(s('rect', { class: 'fact' + (f.b !== null ? ' old' : '') + (sel.fact === f.id ? ' sel' : ''), x: x0,
        y: yy, width: x1 - x0, height: 11, rx: f.b === null ? 0 : 2, 'data-go': 'fact=' + f.id }),
        f.x + '\nvalid ' + fmtDay(f.a) + (f.b === null ? ', current' : ' \u2192 ' + fmtDay(f.b) + ' (superseded)')));
      if (f.b !== null && f.b <= V.b) g.push(s('line', { class: 'cap', x1: x1, x2: x1, y1: yy - 1, y2: yy + 12 }));
      if (f.b === null) g.push(s('path', { d: 'M' + (x1 - 1) + ' ' + (yy - 1) + 'l7 6.5l-7 6.5z', fill: '#2f6fd6' }));
      var room = x1 - x0 - 8, right = LEFT + PW - x1 - 14, left = x0 - LEFT - 6;
      var where = room >= 60 ? 'in' : right >= Math.min(left, 120) ? 'right' : 'left';
      var text = clip(f.x, Math.floor((where === 'in' ? room : where === 'right' ? right : left) / 6.2));
      if (text.length > 2) g.push(s('text', { class: 'fact-text' + (where === 'in' ? '' : ' out'), y: yy + 9,
        x: where === 'in' ? x0 + 4 : where === 'right' ? x1 + 10 : x0 - 4, 'text-anchor': where === 'left' ? 'end' : null }, text));
    });
    if (hiddenFacts) {
      g.push(s('text', { class: 'more', x: 4, y: Y_FACTS + facts.length * FROW + 12 },
        '+ ' + plural(hiddenFacts, 'more fact') + ' valid in this period: zoom in, or search to find them'));
    }
    svg.textContent = '';
    attrs(svg, { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H });
    put(svg, g);
    geom = { W: W, PW: PW, span: span };
    scheduleInView(i0, i1);
    saveState();
    document.body.setAttribute('data-draw-ms', (performance.now() - started).toFixed(1));
  }

  // -- lists of messages ------------------------------------------------------------------------
  function marked(text, res) {
    var span = h('span', { class: 'text' });
    if (!res || !res.length) return put(span, text);
    var hits = [];
    res.forEach(function (re) {
      var g = new RegExp(re.source, 'gi'), m;
      while ((m = g.exec(text)) !== null && hits.length < 200) { hits.push([m.index, m.index + m[0].length]); if (!m[0].length) g.lastIndex++; }
    });
    hits.sort(function (p, q) { return p[0] - q[0]; });
    var at = 0;
    hits.forEach(function (hh) {
      if (hh[0] < at) return;
      put(span, text.slice(at, hh[0]));
      put(span, h('mark', null, text.slice(hh[0], hh[1])));
      at = hh[1];
    });
    put(span, text.slice(at));
    return span;
  }
  function msgItem(r, res) {
    var id = M.id[r], seg = M.seg[r], sr = segRow.get(seg), links = [];
    links.push(link('msg=' + id, 'message ' + id));
    if (sr !== undefined) {
      links.push(link('seg=' + seg, 'segment ' + seg));
      var tr = trRow.get(S.tr[sr]);
      links.push(tr !== undefined ? link('traj=' + S.tr[sr], 'thread ' + S.tr[sr]) : h('span', null, ' not yet linked'));
    } else {
      links.push(h('span', null, ' not yet placed'));
    }
    var dot = h('span', { class: 'dot' });
    dot.style.background = spColour(M.sp[r]);
    var session = M.se[r] >= 0 ? ' \u00b7 session ' + M.sessions[M.se[r]] : '';
    return h('li', { class: sel.msg === id ? 'sel' : null }, [
      h('div', { class: 'meta' }, [dot, h('span', { class: 'who' }, M.speakers[M.sp[r]]), ' \u00b7 ',
        fmtLocal(M.t[r], M.off[r]) + session].concat(links)),
      marked(M.x[r], res)]);
  }
  var inViewTimer = null;
  function scheduleInView(i0, i1) {  // while dragging, once it pauses
    clearTimeout(inViewTimer);
    if (drag) inViewTimer = setTimeout(function () { listInView(i0, i1); }, 80); else listInView(i0, i1);
  }
  function listInView(i0, i1) {
    var list = $('inview'), n = i1 - i0;
    list.textContent = '';
    if (n > MAX_LIST) {
      $('inview-summary').textContent = plural(n, 'message') + ' in this period: zoom in (or search) to list them.';
      return;
    }
    $('inview-summary').textContent = n ? plural(n, 'message') + ' in this period, oldest first.' : 'No messages in this period.';
    for (var k = i0; k < i1; k++) list.appendChild(msgItem(ord[k], null));
  }

  // -- details ----------------------------------------------------------------------------------
  function detail(title, kids) {
    $('detail-title').textContent = title;
    var d = $('detail');
    d.textContent = '';
    put(d, kids);
  }
  function messageList(rows, limit) {
    var ol = h('ol', { class: 'messages' });
    rows.slice(0, limit).forEach(function (r) { ol.appendChild(msgItem(r, null)); });
    return [ol, rows.length > limit ? h('p', { class: 'hint' }, '\u2026 and ' + plural(rows.length - limit, 'more message')) : null];
  }
  function showSegment(id, zoom) {
    var r = segRow.get(id);
    if (r === undefined) return detail('Segment ' + id, h('p', { class: 'warn' }, 'There is no segment ' + id + ' in this file.'));
    sel = { seg: id, traj: S.tr[r] || null, fact: null, msg: null };
    var tr = trRow.get(S.tr[r]);
    detail('Topical Segment ' + id, [
      h('p', { class: 'stmt' }, S.l[r]),
      h('p', { class: 'meta' }, [fmtMinute(S.a[r]) + ' \u2192 ' + fmtMinute(S.b[r]) + ' UTC \u00b7 ' +
        plural(S.cnt[r], 'message') + (S.c[r] ? '' : ' \u00b7 still open') + ' \u00b7 ',
        tr !== undefined ? link('traj=' + S.tr[r], 'thread ' + S.tr[r] + ': ' + clip(TR.l[tr], 60)) : 'not yet linked to a thread'])
    ].concat(messageList(segMessages(r), 500)));
    if (zoom) around(S.a[r], S.b[r], 1800); else draw();
  }
  function showTraj(id, zoom) {
    var r = trRow.get(id);
    if (r === undefined) return detail('Thread ' + id, h('p', { class: 'warn' }, 'There is no trajectory ' + id + ' in this file.'));
    sel = { seg: null, traj: id, fact: null, msg: null };
    var segs = TR.segs[r], inTraj = new Set(segs.map(function (k) { return S.id[k]; }));
    var table = h('table', null, h('tr', null, [h('th', null, 'segment'), h('th', null, 'when (UTC)'), h('th', null, 'messages'), h('th', null, 'about')]));
    segs.slice(0, 300).forEach(function (k) {
      table.appendChild(h('tr', null, [h('td', null, link('seg=' + S.id[k], String(S.id[k]))), h('td', { class: 'nw' }, fmtMinute(S.a[k])),
        h('td', null, num(S.cnt[k])), h('td', null, S.l[k])]));
    });
    var facts = F.filter(function (f) {
      return f.src.some(function (m) { var mr = msgRow.get(m); return mr !== undefined && inTraj.has(M.seg[mr]); });
    });
    detail('Event Trajectory ' + id, [
      h('p', { class: 'stmt' }, TR.l[r]),
      h('p', { class: 'meta' }, fmtMinute(TR.a[r]) + ' \u2192 ' + fmtMinute(TR.b[r]) + ' UTC (' + fmtSpan(TR.b[r] - TR.a[r]) +
        ') \u00b7 ' + plural(segs.length, 'segment') + ' \u00b7 ' + plural(TR.cnt[r], 'message')),
      table, segs.length > 300 ? h('p', { class: 'hint' }, '\u2026 and ' + plural(segs.length - 300, 'more segment')) : null,
      facts.length ? h('h2', null, 'CoreFacts resting on its messages') : null,
      facts.length ? factList(facts.slice(0, 100), null) : null]);
    if (zoom) around(TR.a[r], TR.b[r], 3600); else draw();
  }
  function showFact(id, zoom) {
    var r = factRow.get(id);
    if (r === undefined) return detail('CoreFact ' + id, h('p', { class: 'warn' }, 'There is no CoreFact ' + id + ' in this file.'));
    var f = F[r];
    sel = { seg: null, traj: null, fact: id, msg: null };
    var validity = [f.b === null ? 'current: valid since ' + fmtMinute(f.a) + ' UTC'
      : 'valid ' + fmtMinute(f.a) + ' \u2192 ' + fmtMinute(f.b) + ' UTC, then superseded'];
    if (f.by !== null) validity.push(' by ', link('fact=' + f.by, 'fact ' + f.by));
    f.supersedes.forEach(function (o) { validity.push(' \u00b7 supersedes ', link('fact=' + o, 'fact ' + o)); });
    var hist = h('table', null, h('tr', null, [h('th', null, 'when (UTC)'), h('th', null, 'change'), h('th', null, 'statement'), h('th', null, 'detail')]));
    f.h.forEach(function (ev) {
      hist.appendChild(h('tr', null, [h('td', { class: 'nw' }, fmtMinute(ev[0])), h('td', { class: 'nw' }, ev[1]), h('td', null, ev[2]), h('td', null, ev[3] || '')]));
    });
    var rows = f.src.map(function (m) { return msgRow.get(m); }).filter(function (x) { return x !== undefined; });
    detail('CoreFact ' + id, [
      h('p', { class: 'stmt' + (f.b !== null ? ' old-stmt' : '') }, f.x),
      h('p', { class: 'meta' }, 'subject ' + f.su + ' \u00b7 type ' + f.ty + ' \u00b7 written by the ' + (f.o === 'llm' ? 'LLM' : 'offline rule')),
      h('p', null, validity),
      h('h2', null, 'History'), f.h.length ? hist : h('p', { class: 'hint' }, 'no history recorded'),
      h('h2', null, 'The messages it rests on')].concat(rows.length ? messageList(rows, 100) : [h('p', { class: 'hint' }, 'none left in this file')]));
    if (zoom && (f.a > V.b || (f.b !== null && f.b < V.a))) around(f.a, f.b === null ? Math.max(tMax, f.a) : f.b, 86400); else draw();
  }
  function showMessage(id) {
    var r = msgRow.get(id);
    if (r === undefined) return detail('Message ' + id, h('p', { class: 'warn' }, 'There is no message ' + id + ' in this file.'));
    var sr = segRow.get(M.seg[r]);
    sel = { seg: sr !== undefined ? M.seg[r] : null, traj: sr !== undefined ? (S.tr[sr] || null) : null, fact: null, msg: id };
    var facts = F.filter(function (f) { return f.src.indexOf(id) >= 0; });
    var kids = [h('ol', { class: 'messages' }, msgItem(r, null))];
    if (facts.length) kids.push(h('h2', null, 'CoreFacts resting on it'), factList(facts, null));
    if (sr !== undefined) {
      kids.push(h('h2', null, 'Its segment: ' + S.l[sr]));
      kids = kids.concat(messageList(segMessages(sr), 500));
    }
    detail('Message ' + id, kids);
    if (sr !== undefined) around(S.a[sr], S.b[sr], 1800); else around(M.t[r] - 900, M.t[r] + 900, 1800);
  }
  function factList(facts, res) { return factItems(h('ol', { class: 'facts' }), facts, res); }
  function factItems(ol, facts, res) {
    facts.forEach(function (f) {
      ol.appendChild(h('li', null, [
        h('div', { class: 'meta' }, [f.su + ' \u00b7 ' + f.ty + ' \u00b7 ' + fmtDay(f.a) + (f.b === null ? ' \u2192 now' : ' \u2192 ' + fmtDay(f.b) + ' (superseded)'),
          link('fact=' + f.id, 'fact ' + f.id)]),
        marked(f.x, res)]));
    });
    return ol;
  }

  // -- search -----------------------------------------------------------------------------------
  (function () {
    var select = $('speaker');
    M.speakers.forEach(function (name, k) { select.appendChild(h('option', { value: String(k) }, name)); });
  })();
  function dayStart(v) { var d = new Date(v + 'T00:00:00Z'); return isNaN(d.getTime()) ? null : d.getTime() / 1000; }
  function search() {
    var q = $('q').value.trim(), spk = $('speaker').value, since = dayStart($('since').value), until = dayStart($('until').value);
    if (until !== null) until += 86399;
    var terms = q ? q.split(/\s+/).slice(0, 8) : [];
    var res = terms.map(function (w) { return new RegExp(w.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i'); });
    var out = $('results'), factsOut = $('fact-results');
    out.textContent = ''; factsOut.textContent = '';
    if (!terms.length && spk === '' && since === null && until === null) { $('search-summary').textContent = ''; return; }
    var who = spk === '' ? -1 : Number(spk), lo = since === null ? 0 : lowerBound(ts, since), hi = until === null ? M.n : upperBound(ts, until);
    var found = [], count = 0;
    for (var k = lo; k < hi; k++) {
      var r = ord[k];
      if (who >= 0 && M.sp[r] !== who) continue;
      var text = M.x[r], ok = true;
      for (var j = 0; j < res.length && ok; j++) ok = res[j].test(text);
      if (!ok) continue;
      count++;
      if (found.length < 100) found.push(r);
    }
    var name = who >= 0 ? M.speakers[who].toLowerCase() : null;
    var facts = F.filter(function (f) {
      if (name !== null && f.su.toLowerCase() !== name) return false;
      if (since !== null && f.b !== null && f.b < since) return false;
      if (until !== null && f.a > until) return false;
      var hay = f.su + ' ' + f.ty + ' ' + f.x;
      return res.every(function (re) { return re.test(hay); });
    });
    $('search-summary').textContent = plural(count, 'message') + ' and ' + plural(facts.length, 'fact') + ' match' +
      (count > found.length ? ' (the first ' + found.length + ' messages are listed)' : '') + '.';
    factItems(factsOut, facts.slice(0, 50), res);
    found.forEach(function (r) { out.appendChild(msgItem(r, res)); });
  }
  var searchTimer = null;
  ['q', 'speaker', 'since', 'until'].forEach(function (name) {
    $(name).addEventListener('input', function () { clearTimeout(searchTimer); searchTimer = setTimeout(search, 150); });
  });

  // -- navigation: #seg=ID, #traj=ID, #fact=ID, #msg=ID, #search=WORDS&speaker=NAME&since=DAY&until=DAY
  function route() {
    var p = new URLSearchParams(location.hash.slice(1));
    if (p.has('search') || p.has('speaker') || p.has('since') || p.has('until')) {
      $('q').value = p.get('search') || '';
      var spk = p.get('speaker'), k = spk === null ? -1 : M.speakers.indexOf(spk);
      $('speaker').value = k >= 0 ? String(k) : '';
      $('since').value = p.get('since') || '';
      $('until').value = p.get('until') || '';
      search();
    }
    if (p.has('zoom')) { var z = p.get('zoom').split(',').map(Number); if (z.length === 2 && z[0] < z[1]) setView(z[0], z[1]); }
    if (p.has('seg')) showSegment(Number(p.get('seg')), true);
    else if (p.has('traj')) showTraj(Number(p.get('traj')), true);
    else if (p.has('fact')) showFact(Number(p.get('fact')), true);
    else if (p.has('msg')) showMessage(Number(p.get('msg')));
  }
  function go(target) {
    if (target.indexOf('zoom=') === 0) {
      var z = target.slice(5).split(',').map(Number);
      var pad = Math.max((z[1] - z[0]) * 0.15, 60);
      setView(z[0] - pad, z[1] + pad);
      return;
    }
    if (location.hash === '#' + target) route(); else location.hash = target;
  }
  window.addEventListener('hashchange', route);
  document.addEventListener('click', function (ev) {
    if (dragged) { dragged = false; return; }
    var a = ev.target.closest ? ev.target.closest('[data-go], a[href^="#"]') : null;
    if (!a) return;
    ev.preventDefault();
    go(a.getAttribute('data-go') || a.getAttribute('href').slice(1));
  });

  // -- zooming and moving -----------------------------------------------------------------------
  $('toolbar').addEventListener('click', function (ev) {
    var b = ev.target.closest('button');
    if (!b) return;
    var z = b.getAttribute('data-zoom'), span = V.b - V.a, mid = (V.a + V.b) / 2;
    if (z === 'all') { var f = fullView(); setView(f.a, f.b); }
    else if (z === 'in') setView(mid - span / 4, mid + span / 4);
    else if (z === 'out') setView(mid - span, mid + span);
    else if (z === 'left') setView(V.a - span / 2, V.b - span / 2);
    else if (z === 'right') setView(V.a + span / 2, V.b + span / 2);
    else { var w = Number(z); setView(mid - w / 2, mid + w / 2); }
  });
  function timeAt(clientX) {
    var box = svg.getBoundingClientRect();
    return V.a + (clientX - box.left - LEFT) / geom.PW * (V.b - V.a);
  }
  svg.addEventListener('wheel', function (ev) {
    ev.preventDefault();
    var t = timeAt(ev.clientX), k = Math.exp(Math.max(-1, Math.min(1, ev.deltaY * 0.002)));
    var span = Math.min(Math.max((V.b - V.a) * k, MIN_SPAN), MAX_SPAN), frac = (t - V.a) / (V.b - V.a);
    V = { a: t - frac * span, b: t - frac * span + span };
    draw();
  }, { passive: false });
  var drag = null, dragged = false;
  document.addEventListener('pointerdown', function () { dragged = false; }, true);
  svg.addEventListener('pointerdown', function (ev) { drag = { x: ev.clientX, a: V.a, b: V.b }; });
  window.addEventListener('pointermove', function (ev) {
    if (!drag) return;
    var dx = ev.clientX - drag.x;
    if (Math.abs(dx) > 3) { dragged = true; svg.classList.add('dragging'); }
    if (!dragged) return;
    var dt = dx / geom.PW * (drag.b - drag.a);
    V = { a: drag.a - dt, b: drag.b - dt };
    draw();
  });
  window.addEventListener('pointerup', function () { drag = null; svg.classList.remove('dragging'); });
  var resizeTimer = null;
  window.addEventListener('resize', function () { clearTimeout(resizeTimer); resizeTimer = setTimeout(draw, 100); });

  // -- the header, the backlog, ActiveFacts, the file ---------------------------------------------
  function bytes(n) {
    if (n >= 1e9) return (n / 1e9).toFixed(2) + ' GB';
    if (n >= 1e6) return (n / 1e6).toFixed(1) + ' MB';
    if (n >= 1e3) return (n / 1e3).toFixed(1) + ' kB';
    return n + ' bytes';
  }
  var st = D.stats;
  $('fname').textContent = D.file.name;
  document.title = 'memsif view \u00b7 ' + D.file.name;
  $('holds').textContent = (M.n ? plural(M.n, 'message') + ' from ' + fmtDay(ts[0]) + ' to ' + fmtDay(ts[M.n - 1]) +
    ' (' + fmtSpan(ts[M.n - 1] - ts[0]) + ')' : 'No messages yet') + ' \u00b7 ' + plural(S.n, 'Topical Segment') + ' \u00b7 ' +
    plural(TR.n, 'Event Trajectory', 'Event Trajectories') + ' \u00b7 ' + plural(st.core_facts, 'current CoreFact') + ', ' +
    num(st.superseded_facts) + ' superseded \u00b7 ' + plural(st.pending_steps, 'pending step') + ' \u00b7 read ' +
    fmtMinute(D.file.generated_at) + ' UTC';
  (function backlog() {
    var q = D.q, box = $('backlog');
    if (!q.n) { put(box, h('p', { class: 'hint' }, 'Nothing pending: every message is placed, every closed segment linked and its CoreFacts written.')); return; }
    var kinds = Object.keys(q.kinds).map(function (k) { return num(q.kinds[k]) + ' ' + k; }).join(', ');
    put(box, h('p', null, plural(q.n, 'pending step') + ' (' + kinds + ')' + (q.oldest !== null ? '; the oldest queued ' + fmtMinute(q.oldest) + ' UTC' : '') +
      '. They run with the next write, or with memsif process.'));
    var table = h('table', null, h('tr', null, [h('th', null, 'step'), h('th', null, 'message'), h('th', null, 'segment'), h('th', null, 'queued (UTC)'), h('th', null, 'attempts')]));
    q.rows.forEach(function (row) {
      table.appendChild(h('tr', null, [h('td', null, row[0]), h('td', null, msgRow.has(row[1]) ? link('msg=' + row[1], String(row[1])) : String(row[1])),
        h('td', null, row[2] === null ? '' : segRow.has(row[2]) ? link('seg=' + row[2], String(row[2])) : String(row[2])),
        h('td', null, fmtMinute(row[3])), h('td', null, num(row[4]))]));
    });
    put(box, [table, q.n > q.rows.length ? h('p', { class: 'hint' }, '\u2026 and ' + plural(q.n - q.rows.length, 'more step')) : null]);
  })();
  (function actives() {
    var box = $('actives');
    if (!D.af.length) { put(box, h('p', { class: 'hint' }, 'None yet: ActiveFacts are promoted from the evidence of questions that recur.')); return; }
    var ol = h('ol', { class: 'facts' });
    D.af.forEach(function (a) {
      ol.appendChild(h('li', null, [h('div', { class: 'meta' }, ['#' + a[0] + ' \u00b7 ' + a[1] + ' \u00b7 from'].concat(
        a[3].slice(0, 20).map(function (m) { return link('msg=' + m, 'message ' + m); }))), h('span', { class: 'text' }, a[2])]));
    });
    put(box, ol);
  })();
  (function file() {
    var f = D.file, dl = $('file');
    var rows = [['file', f.name], ['size', bytes(f.bytes) + (f.wal_bytes ? ' + ' + bytes(f.wal_bytes) + ' write-ahead log' : '')],
      ['embedding model', f.model + (f.dim ? ' (' + f.dim + ' dimensions)' : '')], ['schema version', String(f.schema)],
      ['created', (f.created_at ? f.created_at.replace('T', ' ').slice(0, 16) + ' UTC' : 'unknown') + (f.created_by ? ' by ' + f.created_by : '')],
      ['read', fmtMinute(f.generated_at) + ' UTC by ' + f.generator]];
    Object.keys(st).forEach(function (k) { rows.push([k.replace(/_/g, ' '), num(st[k])]); });
    if (D.m.clipped) rows.push(['shortened', plural(D.m.clipped, 'long message') + ' shortened in this page (memsif messages shows them whole)']);
    rows.forEach(function (r) { dl.appendChild(h('dt', null, r[0])); dl.appendChild(h('dd', null, r[1])); });
  })();

  // -- live: reload when the file changed (memsif view --serve) ---------------------------------------
  var KEY = 'memsif-view:' + D.file.name;
  function saveState() {
    if (D.live === null) return;
    try { sessionStorage.setItem(KEY, JSON.stringify({ a: V.a, b: V.b })); } catch (e) { /* storage off */ }
  }
  if (D.live !== null) {
    try { var saved = JSON.parse(sessionStorage.getItem(KEY) || 'null'); if (saved && saved.b > saved.a) V = { a: saved.a, b: saved.b }; } catch (e) { /* none */ }
    var badge = $('live');
    badge.hidden = false;
    badge.textContent = 'live: this page reloads itself when the memory file changes (read ' + new Date().toLocaleTimeString() + ')';
    setInterval(function () {
      fetch('stamp', { cache: 'no-store' }).then(function (r) { return r.json(); }).then(function (j) {
        if (j && typeof j.stamp === 'string' && j.stamp !== D.live) location.reload();
      }).catch(function () { badge.textContent = 'live: the server does not answer (stopped?)'; });
    }, 1500);
  }

  draw();
  route();
  var ready = Math.round(performance.now());
  function heap() { return performance.memory ? performance.memory.usedJSHeapSize : null; }
  $('perf').textContent = 'drawn ' + ready + ' ms after the page was opened';
  attrs(document.body, { 'data-ready-ms': ready, 'data-heap-bytes': heap(), 'data-messages': M.n, 'data-segments': S.n,
    'data-trajectories': TR.n, 'data-facts': F.length });
  setTimeout(function () {  // what stays: (a browser started with --js-flags=--expose-gc collects first)
    if (typeof window.gc === 'function') window.gc();
    attrs(document.body, { 'data-heap-later-bytes': heap() });
  }, 3000);
})();
