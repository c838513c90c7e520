"""The incident page's stylesheet and script, as text html.py inlines into the page (a page that
opens offline and from a mail attachment fetches nothing). The script only reads the page's JSON
block and builds the timeline and the panel with textContent: text from logs never becomes markup."""

STYLE = """
:root{--stall:#e8a317;--crash:#d93025;--kill:#8e24aa;--fail:#e8590c;--ok:#1e8e3e;--stop:#9aa0a6;
--run:#1a73e8;--ph:#8ab4f8;--phb:#4f86d9;--ink:#202124;--mute:#5f6368;--line:#e3e6ea;--sel:#fff4d6;--lw:250px}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;color:var(--ink);
background:#f6f7f9}
code,.mono,.frames,.cmd{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,"DejaVu Sans Mono",monospace;
font-size:12.5px}
header{padding:14px 24px 10px;background:#fff;border-bottom:1px solid var(--line)}
.brand{font-weight:700;font-size:13px;letter-spacing:.04em;text-transform:uppercase;color:var(--mute)}
.folder{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px;margin:2px 0 6px;word-break:break-all}
.meta{color:var(--mute);font-size:13px}
.chip{display:inline-flex;align-items:center;gap:5px;margin-right:10px;color:var(--ink);font-weight:600}
.chip i,.dot{display:inline-block;width:9px;height:9px;border-radius:50%;background:var(--stop);flex:none}
.s-stalled i,.s-stalled .dot{background:var(--stall)}
.s-crashed i,.s-crashed .dot,.s-vanished i,.s-vanished .dot{background:var(--crash)}
.s-killed i,.s-killed .dot{background:var(--kill)}.s-failed i,.s-failed .dot{background:var(--fail)}
.s-exited i,.s-exited .dot{background:var(--ok)}.s-running i,.s-running .dot{background:var(--run)}
.verdict{margin:16px 24px;padding:14px 18px;background:#fff;border:1px solid var(--line);
border-left:6px solid var(--ok);border-radius:6px}
.verdict.bad{border-left-color:var(--crash)}
.verdict h1{font-size:20px;margin:0 0 8px}
.causes{list-style:none;padding:0;margin:8px 0}
.cause{border:1px solid var(--line);border-radius:6px;padding:8px 12px;margin:8px 0;background:#fffdf7}
.kind{display:inline-block;font-size:11px;font-weight:700;text-transform:uppercase;letter-spacing:.05em;
background:#fde7c4;color:#7a4b00;border-radius:3px;padding:1px 6px;margin-bottom:3px}
.ctext{font-weight:600}.next{margin-top:3px}.next b{color:var(--ok)}
.cwho{margin-top:4px;font-size:12.5px;color:var(--mute)}
.pidlink,.link{font:inherit;font-size:12.5px;border:1px solid #c6d4ea;background:#eef3fb;color:#174ea6;
border-radius:10px;padding:0 8px;margin-right:4px;cursor:pointer}
.lines{margin:6px 0 0;padding-left:20px}.lines li{margin:3px 0}
.more>summary{cursor:pointer;color:#174ea6;margin:4px 0 0 20px;font-size:13px}
.notes{margin-top:8px;color:var(--mute);font-size:13px}
.board{display:grid;grid-template-columns:minmax(0,1.5fr) minmax(360px,1fr);gap:16px;margin:0 24px 24px;
align-items:start}
@media (max-width:1000px){.board{grid-template-columns:1fr}}
.tl{background:#fff;border:1px solid var(--line);border-radius:6px;padding:10px 0 0;min-width:0}
.bar{display:flex;gap:10px;align-items:center;padding:0 12px 8px;flex-wrap:wrap}
.filters button{font:inherit;font-size:13px;border:1px solid #c9ced6;background:#fff;padding:2px 10px;
cursor:pointer}
.filters button:first-child{border-radius:4px 0 0 4px}
.filters button:last-child{border-radius:0 4px 4px 0;border-left:0}
.filters button.on{background:#e8f0fe;border-color:#8ab4f8;color:#174ea6;font-weight:600}
#q{font:inherit;font-size:13px;padding:2px 8px;border:1px solid #c9ced6;border-radius:4px;min-width:16em;flex:1;
max-width:24em}
#shown{color:var(--mute);font-size:12.5px}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;padding:6px 12px;border-top:1px solid var(--line);font-size:12px;
color:var(--mute)}
.legend span{display:inline-flex;align-items:center;gap:5px}
.legend .m{position:relative;transform:none;top:auto;left:auto;display:inline-block}
.legend .m-stall{transform:rotate(45deg);margin:0 2px}
.sw{display:inline-block;width:22px;height:10px;position:relative}
.sw.life{height:2px;background:#b9c0ca}.sw.ph{border-radius:3px;background:var(--ph);border:1px solid var(--phb)}
.sw.ph.open{background:linear-gradient(90deg,var(--ph),#e3edfd)}
.sw.ph.err{background:#f6aea9;border-color:var(--crash)}
.sw.band{height:14px;background:repeating-linear-gradient(45deg,rgba(232,163,23,.45) 0 3px,transparent 3px 7px);
border:1px solid var(--stall)}
.sw.band.idle{background:rgba(185,192,202,.35);border-color:#b9c0ca}
#axis{position:sticky;top:0;z-index:3;height:24px;padding-left:var(--lw);background:#fff;
border-top:1px solid var(--line);border-bottom:1px solid var(--line);font-size:11px;color:var(--mute)}
.axt{position:relative;height:24px;margin-right:14px}
#axis span{position:absolute;top:5px;transform:translateX(-50%);white-space:nowrap}
#axis span.first{transform:none}#axis span.now{color:var(--run);font-weight:600}
#lanes{position:relative;max-height:68vh;overflow:auto;outline:none}
#lanes-inner{position:relative;min-height:24px}
.gridlayer{position:absolute;top:0;bottom:0;left:var(--lw);right:14px;pointer-events:none}
.grid{position:absolute;top:0;bottom:0;width:0;border-left:1px solid #eef0f3}
.grid.now{border-left:1px dashed var(--run)}
.lane,.host{position:absolute;left:0;right:0;height:24px;display:flex;align-items:center}
.lane{cursor:pointer;border-bottom:1px solid #f1f3f5}
.lane:hover{background:#f3f6fb}.lane.sel{background:var(--sel)}.lane.ctx{opacity:.55}
.host{background:#eef1f5;font-weight:600;font-size:12.5px;padding-left:10px;cursor:pointer;
border-bottom:1px solid var(--line);z-index:1}
.host .muted{font-weight:400;color:var(--mute);margin-left:8px}
.label{width:var(--lw);flex:none;display:flex;align-items:center;gap:6px;overflow:hidden;white-space:nowrap;
font-size:12.5px;padding-right:8px;height:24px;border-right:1px solid var(--line)}
.label .tag{font-weight:600;overflow:hidden;text-overflow:ellipsis;flex:0 0 auto;max-width:9em}
.label .pid{flex:none;color:var(--mute);font-family:ui-monospace,Menlo,Consolas,monospace;font-size:11.5px}
.label .tree,.label .dot{flex:none}.label .tree{color:#b0b6bf}
.label .args{flex:1 1 0;min-width:0;color:var(--mute);font-size:11.5px;overflow:hidden;text-overflow:ellipsis}
.track{position:relative;flex:1;height:24px;margin-right:14px}
.track>*{position:absolute}
.life{top:11px;height:2px;background:#b9c0ca}
.band{top:3px;height:18px;
background:repeating-linear-gradient(45deg,rgba(232,163,23,.42) 0 3px,transparent 3px 7px);
border-top:1px solid var(--stall);border-bottom:1px solid var(--stall)}
.band.idle,.band.busy,.band.quiet{background:rgba(185,192,202,.35);border-color:#b9c0ca}
.ph{top:6px;height:12px;min-width:2px;border-radius:3px;background:var(--ph);border:1px solid var(--phb)}
.ph.open{background:linear-gradient(90deg,var(--ph),#e3edfd)}.ph.err{background:#f6aea9;border-color:var(--crash)}
.m{top:12px;transform:translate(-50%,-50%);cursor:pointer;z-index:2}
.m-stall{width:10px;height:10px;background:var(--stall);border:1px solid #fff;
transform:translate(-50%,-50%) rotate(45deg)}
.m-crashed{width:15px;height:15px;border-radius:50%;background:var(--crash);border:1px solid #fff}
.m-crashed::before,.m-crashed::after{content:"";position:absolute;left:6px;top:2px;width:2px;height:9px;
background:#fff;transform:rotate(45deg)}
.m-crashed::after{transform:rotate(-45deg)}
.m-killed{width:11px;height:11px;background:var(--kill);border:1px solid #fff}
.m-vanished{width:13px;height:13px;border-radius:50%;border:3px solid var(--crash);background:#fff}
.m-unknown{width:11px;height:11px;border-radius:50%;border:2px dashed var(--stop);background:#fff}
.m-exited,.m-terminated,.m-failed{width:4px;height:16px;border-radius:1px;background:var(--ok)}
.m-terminated{background:var(--stop)}.m-failed{width:5px;background:var(--fail)}
.m-running{width:0;height:0;border-top:6px solid transparent;border-bottom:6px solid transparent;
border-left:9px solid var(--run);transform:translate(-100%,-50%)}
#detail{background:#fff;border:1px solid var(--line);border-radius:6px;padding:12px 16px;position:sticky;top:12px;
max-height:calc(100vh - 24px);overflow:auto;min-width:0}
#detail .hint{color:var(--mute)}
#detail h2{font-size:17px;margin:0 0 2px;display:flex;align-items:center;gap:8px;flex-wrap:wrap}
#detail h3{font-size:13px;text-transform:uppercase;letter-spacing:.04em;color:var(--mute);margin:16px 0 6px}
.pill{font-size:11.5px;font-weight:700;padding:1px 8px;border-radius:10px;color:#fff;background:var(--stop);
text-transform:uppercase;letter-spacing:.04em}
.pill.s-stalled{background:var(--stall)}.pill.s-crashed,.pill.s-vanished{background:var(--crash)}
.pill.s-killed{background:var(--kill)}
.pill.s-failed{background:var(--fail)}.pill.s-exited{background:var(--ok)}.pill.s-running{background:var(--run)}
.sub{color:var(--mute);font-size:12.5px}
.summary{margin:8px 0;font-weight:600}
.cmd{background:#f6f7f9;border:1px solid var(--line);border-radius:4px;padding:4px 8px;white-space:pre-wrap;
word-break:break-all;max-height:7.5em;overflow:auto}
.thread{border:1px solid var(--line);border-radius:5px;margin:8px 0;overflow:hidden}
.thead{background:#f6f7f9;padding:5px 10px;font-size:12.5px;border-bottom:1px solid var(--line)}
.thead b{font-size:13px}.thead .st{color:#7a4b00}
.frames{padding:4px 0}
.fr{display:flex;gap:10px;padding:1px 10px;white-space:nowrap}
.fr .fn{font-weight:700;min-width:9em}.fr .loc{color:#3c4043;flex:none}
.fr .dir{color:#9aa0a6;overflow:hidden;text-overflow:ellipsis;min-width:0}
.fr.lib .fn{font-weight:400;color:var(--mute)}.fr.lib .loc{color:#80868b}
.fr.user{background:#fef7e0}.fr.user:first-child{border-left:3px solid var(--stall);padding-left:7px}
details.lib{padding:0 0 0 22px}
details.lib>summary{cursor:pointer;color:var(--mute);font-family:system-ui,sans-serif;font-size:12px;padding:1px 0;
list-style:none}
details.lib>summary::before{content:"\\25B8  ";color:#9aa0a6}details.lib[open]>summary::before{content:"\\25BE  "}
.notes2{color:var(--mute);font-size:12px;padding:0 10px 4px}
.warn{border-left:3px solid var(--stall);background:#fffaf0;padding:4px 8px;margin:4px 0;font-size:13px;
word-break:break-word}
table.kv{border-collapse:collapse;font-size:13px;width:100%}
table.kv td{padding:2px 6px 2px 0;vertical-align:top}
table.kv td:first-child{color:var(--mute);white-space:nowrap;width:7.5em}
table.phases{border-collapse:collapse;font-size:12.5px;width:100%}
table.phases td{padding:1px 8px 1px 0;border-bottom:1px solid #f1f3f5}
.err{color:var(--crash)}
"""

# The page's own script: lanes drawn only while in view, the panel filled on a click.
SCRIPT = r"""
(function () {
"use strict";
var D = JSON.parse(document.getElementById("page-data").textContent);
var P = D.procs, H = 24, TROUBLE = D.trouble;
var rows = [], sel = -1, mode = "all", query = "", closed = {}, grid = [], drawn = null, frame = 0;
var WORD = D.words;
var ENDS = ["crashed", "killed", "vanished", "failed", "exited", "terminated", "running", "unknown"];

function $(id) { return document.getElementById(id); }
function el(tag, cls, text) {
  var e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = String(text);
  return e;
}
function add(parent, tag, cls, text) { return parent.appendChild(el(tag, cls, text)); }
function x(t) { return (100 * Math.max(0, Math.min(t, D.span)) / D.span) + "%"; }
function trouble(p) { return TROUBLE.indexOf(p.state) >= 0; }
function alive(p) { return p.state === "running" || p.state === "stalled"; }
function dur(s) {
  if (s == null) return "?";
  if (s < 10) return s.toFixed(1) + " s";
  if (s < 120) return Math.round(s) + " s";
  if (s < 7200) return Math.floor(s / 60) + " min " + (Math.round(s % 60) ? Math.round(s % 60) + " s" : "");
  return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
}
function tick(s) {
  if (s < 60) return +s.toFixed(1) + " s";
  if (s < 3600) return +(s / 60).toFixed(1) + " min";
  return +(s / 3600).toFixed(1) + " h";
}
function pad(n, w) { n = String(n); while (n.length < (w || 2)) n = "0" + n; return n; }
function clock(t) {
  if (t == null) return "?";
  var d = new Date((D.t0 + t) * 1000);
  return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." +
    pad(d.getMilliseconds(), 3);
}

// ---- which lanes: a filter keeps the matching processes and, dimmed, their ancestors ----
function words(p) {
  if (p._words == null) {
    p._words = [p.pid, p.tag, p.host, p.state, WORD[p.state], p.cmd, p.summary].join(" ").toLowerCase();
  }
  return p._words;
}
function layout() {
  var keep = new Uint8Array(P.length), shown = 0, i, a;
  for (i = 0; i < P.length; i++) {
    if ((mode === "all" || trouble(P[i])) && (!query || words(P[i]).indexOf(query) >= 0)) {
      keep[i] = 2;
      shown++;
      for (a = P[i].parent; a >= 0 && !keep[a]; a = P[a].parent) keep[a] = 1;
    }
  }
  rows = [];
  var multi = D.hosts.length > 1, head = null;
  for (i = 0; i < P.length; i++) {
    if (multi && (!head || head.host !== P[i].host)) rows.push(head = {host: P[i].host, n: 0, bad: 0});
    if (head) { head.n++; if (trouble(P[i])) head.bad++; }
    if (keep[i] && !(multi && closed[P[i].host])) rows.push({p: i, ctx: keep[i] === 1});
  }
  $("f-all").className = mode === "all" ? "on" : "";
  $("f-trouble").className = mode === "trouble" ? "on" : "";
  $("f-all").textContent = "all " + P.length;
  $("f-trouble").textContent = "in trouble " + P.filter(trouble).length;
  $("shown").textContent = shown === P.length ? "" : "showing " + shown + " of " + P.length;
  $("lanes-inner").style.height = rows.length * H + "px";
  drawn = null;
  draw();
}

// ---- the axis, and only the lanes in view (a thousand processes stay quick) ----
function axis() {
  var ax = $("axt"), w = ax.clientWidth || 500, step = 86400, t;
  var steps = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200];
  for (var k = 0; k < steps.length; k++) {
    if (D.span / steps[k] <= Math.max(2, w / 90)) { step = steps[k]; break; }
  }
  while (ax.firstChild) ax.removeChild(ax.firstChild);
  var showNow = D.now > D.span * 0.06 && D.now <= D.span * 1.0001;
  add(ax, "span", "first", "0 = " + D.clock).style.left = "0";
  if (showNow) {
    var now = add(ax, "span", "now", "report \u25BE");
    now.style.left = x(D.now);
    now.style.transform = "translateX(-100%)";
  }
  grid = [];
  for (t = step; t < D.span * 0.999; t += step) {
    grid.push(t);
    // a label only where it clears the clock at 0, the report's label and the right edge
    var px = t / D.span * w, nowPx = D.now / D.span * w;
    if (px > 100 && px < w - 20 && !(showNow && px > nowPx - 80 && px < nowPx + 30)) {
      add(ax, "span", "", "+" + tick(t)).style.left = x(t);
    }
  }
}
function draw() {
  var box = $("lanes"), inner = $("lanes-inner");
  var a = Math.max(0, Math.floor(box.scrollTop / H) - 10);
  var b = Math.min(rows.length, Math.ceil((box.scrollTop + (box.clientHeight || 600)) / H) + 10);
  var key = a + ":" + b + ":" + sel;
  if (drawn === key) return;
  drawn = key;
  while (inner.firstChild) inner.removeChild(inner.firstChild);
  var layer = add(inner, "div", "gridlayer");
  grid.forEach(function (t) { add(layer, "div", "grid").style.left = x(t); });
  if (D.now > 0 && D.now <= D.span * 1.0001) add(layer, "div", "grid now").style.left = x(D.now);
  for (var r = a; r < b; r++) inner.appendChild(rows[r].host != null ? hostRow(rows[r], r) : lane(rows[r], r));
}
function hostRow(h, r) {
  var e = el("div", "host", (closed[h.host] ? "\u25B8 " : "\u25BE ") + "host " + h.host);
  add(e, "span", "muted", h.n + " process" + (h.n === 1 ? "" : "es") + (h.bad ? ", " + h.bad + " in trouble" : ""));
  e.style.top = r * H + "px";
  e.setAttribute("data-host", h.host);
  return e;
}
function lane(row, r) {
  var p = P[row.p];
  var e = el("div", "lane s-" + p.state + (row.ctx ? " ctx" : "") + (row.p === sel ? " sel" : ""));
  e.style.top = r * H + "px";
  e.setAttribute("data-i", row.p);
  e.setAttribute("data-pid", p.pid);
  e.setAttribute("data-state", p.state);
  var label = add(e, "div", "label");
  label.style.paddingLeft = 8 + 14 * Math.min(p.depth, 10) + "px";
  if (p.depth) add(label, "span", "tree", "\u2514");
  add(label, "span", "dot");
  add(label, "span", "tag", p.tag || "?");
  add(label, "span", "pid", p.pid);
  if (p.args) add(label, "span", "args", p.args);
  label.title = p.summary || p.cmd;
  var tr = add(e, "div", "track");
  bar(tr, "life", p.start, p.end, "alive " + dur(p.end - p.start));
  var stuck = p.stall && p.stall.kind === "stuck";
  if (p.stall) bar(tr, stuck ? "band" : "band " + p.stall.kind, p.stall.since, p.end,
                   (stuck ? "stalled: " : p.stall.kind + ": ") + p.summary);
  p.phases.forEach(function (ph) {
    var end = ph[2] == null ? p.end : ph[2], open = ph[3] === "open", failed = ph[3].indexOf("error") === 0;
    bar(tr, open ? "ph open" : failed ? "ph err" : "ph", ph[1], end,
      "phase " + ph[0] + " (" + (open ? "still open" : ph[3]) + ", " + dur(end - ph[1]) + ")");
  });
  if (stuck) mark(tr, "stall", p.stall.since, "stalled from here: " + p.summary);
  if (ENDS.indexOf(p.state) >= 0) mark(tr, p.state, p.end, WORD[p.state] + ": " + p.summary);
  return e;
}
function bar(tr, cls, a, b, title) {
  var s = add(tr, "span", cls);
  s.style.left = x(a);
  s.style.width = "calc(" + x(b) + " - " + x(a) + ")";
  s.title = title;
}
function mark(tr, kind, t, title) {
  var m = add(tr, "span", "m m-" + kind);
  m.style.left = x(t);
  m.title = title;
  m.setAttribute("data-mark", kind);
}

// ---- the panel: one process ----
function select(i, focus) {
  if (i < 0 || i >= P.length) return;
  sel = i;
  var at = function () { return rows.findIndex(function (r) { return r.p === i; }); };
  if (at() < 0) {  // filtered out or folded away: show everything again
    mode = "all";
    query = $("q").value = "";
    delete closed[P[i].host];
    layout();
  }
  var box = $("lanes"), top = at() * H;
  if (top < box.scrollTop || top + H > box.scrollTop + box.clientHeight) {
    box.scrollTop = Math.max(0, top - box.clientHeight / 2);
  }
  drawn = null;
  draw();
  panel(P[i], focus);
  try {
    history.replaceState(null, "", "#pid=" + (D.hosts.length > 1 ? P[i].host + "/" : "") + P[i].pid);
  } catch (err) { /* a page opened from a file may refuse it: the link is only a nicety */ }
}
function panel(p, focus) {
  var d = $("detail");
  while (d.firstChild) d.removeChild(d.firstChild);
  var h = add(d, "h2");
  add(h, "span", "pill s-" + p.state, WORD[p.state] || p.state);
  add(h, "span", "", (p.tag || "?") + " \u00B7 pid " + p.pid);
  add(d, "div", "sub", "host " + p.host + (p.rank != null ? " \u00B7 rank " + p.rank : "") + " \u00B7 started " +
    clock(p.start) + " \u00B7 " + (alive(p) ? "alive " : "lived ") + dur(p.end - p.start));
  if (p.summary) add(d, "div", "summary", p.summary);
  D.causes.forEach(function (c) {
    if ((c.pids || []).indexOf(p.pid) < 0) return;
    var box = add(d, "div", "cause");
    add(box, "span", "kind", c.kind || "cause");
    add(box, "div", "ctext", c.text);
    if (c.next) {
      var n = add(box, "div", "next");
      add(n, "b", "", "Next: ");
      n.appendChild(document.createTextNode(c.next));
    }
  });
  if (p.crash) {
    stacks(d, "crash", "Stacks at the crash: " + p.crash.what + (p.crash.signal ? " (" + p.crash.signal + ")" : ""),
      p.crash.threads);
  }
  if (p.stall) {
    var silent = p.stall.seconds != null ? " (silent " + dur(p.stall.seconds) + ")" : "";
    stacks(d, "stall", "Stacks when it stalled" + silent, p.stall.threads);
  }
  if (!p.crash && !p.stall && p.where) {
    add(d, "h3", "", "Where it was");
    add(d, "div", "fr user mono", p.where.function + "  " + p.where.file + ":" + p.where.line);
  }
  if (p.exception) {
    var f = p.exception.frame;
    add(d, "h3", "", "Exception");
    add(d, "div", "err mono", p.exception.text + (f ? "  in " + f.function + " at " + f.file + ":" + f.line : ""));
  }
  if (p.warnings.length) {
    add(d, "h3", "", "Warnings (" + p.warnings.length + ")");
    p.warnings.forEach(function (w) { add(d, "div", "warn", w); });
  }
  if (p.phases.length) {
    add(d, "h3", "", "Phases");
    var t = add(d, "table", "phases");
    p.phases.forEach(function (ph) {
      var tr = add(t, "tr");
      add(tr, "td", "", ph[0]);
      add(tr, "td", "sub", "+" + dur(ph[1]));
      add(tr, "td", "", ph[2] == null ? "open" : dur(ph[2] - ph[1]));
      add(tr, "td", ph[3].indexOf("error") === 0 ? "err" : "sub", ph[3] === "open" ? "" : ph[3]);
    });
  }
  facts(d, p);
  var target = focus && d.querySelector("[data-stacks=" + focus + "]");
  if (target) target.scrollIntoView({block: "nearest"});
}
function facts(d, p) {
  add(d, "h3", "", "Process");
  var kv = add(d, "table", "kv");
  function row(k, v) {
    var tr = add(kv, "tr"), td;
    add(tr, "td", "", k);
    td = add(tr, "td");
    if (v != null && typeof v === "object") td.appendChild(v); else td.textContent = v;
    return td;
  }
  row("command", el("div", "cmd", p.cmd || "?"));
  row("started", clock(p.start) + " (+" + dur(p.start) + ")");
  row(alive(p) ? "last line" : "ended", clock(alive(p) ? p.last : p.end));
  if (p.status != null) row("exit status", p.status);
  var parent = row("parent", "pid " + p.ppid + (p.parent < 0 ? " (no log here)" : " "));
  if (p.parent >= 0) link(parent, p.parent);
  if (p.kids.length) {
    var kids = row("children", "");
    p.kids.slice(0, 40).forEach(function (k) { link(kids, k); });
    if (p.kids.length > 40) kids.appendChild(document.createTextNode(" and " + (p.kids.length - 40) + " more"));
  }
  if (p.memory) row("memory", p.memory);
  row("log", p.files.join(", "));
}
function link(parent, i) {
  var b = add(parent, "button", "link", (P[i].tag || "?") + " " + P[i].pid);
  b.type = "button";
  b.setAttribute("data-i", i);
}
function stacks(d, kind, title, threads) {
  add(d, "h3", "", title).setAttribute("data-stacks", kind);
  if (!threads.length) { add(d, "div", "sub", "no stack was written"); return; }
  var box = add(d, "div", "stacks");
  box.setAttribute("data-stacks-of", kind);
  threads.forEach(function (t) {
    var th = add(box, "div", "thread"), head = add(th, "div", "thead");
    add(head, "b", "", "thread " + t.name + (t.main && !/^(main|MainThread)$/.test(t.name) ? " (main)" : ""));
    if (t.state) add(head, "span", "st", " \u00B7 " + t.state);
    if (t.phase) add(head, "span", "sub", " \u00B7 phase " + t.phase);
    if (t.notes.length) add(th, "div", "notes2", t.notes.join("; "));
    frames(add(th, "div", "frames"), t.frames.map(function (f) { return D.frames[f]; }));
  });
}
// Frames run innermost first. The user's frames stand out; the library frames a user frame called
// fold under it ("inside ..."), and the outer ones (the interpreter, a launcher) fold at the end:
// the first line a reader sees is their own code.
function frames(box, fs) {
  var users = [];
  fs.forEach(function (f, i) { if (!D.paths[f[0]][2]) users.push(i); });
  if (!users.length) {
    fold(box, fs, "only library frames (" + fs.length + "): none of your code is on this stack", true);
    return;
  }
  users.forEach(function (u, k) {
    frameRow(box, fs[u], "fr user");
    var inside = fs.slice(k ? users[k - 1] + 1 : 0, u);
    if (!inside.length) return;
    var what = k ? "between: " : "inside " + call(inside[inside.length - 1]) + " \u00B7 ";
    fold(box, inside, what + count(inside.length));
  });
  var outer = fs.slice(users[users.length - 1] + 1);
  if (outer.length) fold(box, outer, "called from " + count(outer.length));
}
function call(f) { return D.names[f[2]] + " (" + D.paths[f[0]][1] + ")"; }
function count(n) { return n + " library frame" + (n === 1 ? "" : "s"); }
function fold(box, fs, title, open) {
  var det = add(box, "details", "lib");
  det.open = !!open;
  add(det, "summary", "", title);
  fs.forEach(function (f) { frameRow(det, f, "fr lib"); });
}
// A frame: function, file:line, then (for the user's code) its folder, which may be cut short.
function frameRow(box, f, cls) {
  var path = D.paths[f[0]], r = add(box, "div", cls), cut = path[0].lastIndexOf("/");
  add(r, "span", "fn", D.names[f[2]]);
  add(r, "span", "loc", (path[2] ? path[1] : path[0].slice(cut + 1)) + ":" + f[1]);
  if (!path[2] && cut > 0) add(r, "span", "dir", path[0].slice(0, cut + 1));
  r.title = path[0] + ":" + f[1];
  r.setAttribute("data-lib", path[2]);
}
// On a narrow window the panel sits under the timeline: a click brings it into view.
function reveal() {
  if ($("detail").getBoundingClientRect().top > window.innerHeight - 80) $("detail").scrollIntoView({block: "start"});
}
function byPid(pid, host) {
  var best = -1;
  P.forEach(function (p, i) {
    if (p.pid === pid && (host == null || p.host === host) && (best < 0 || (trouble(p) && !trouble(P[best])))) {
      best = i;
    }
  });
  if (best >= 0) select(best);
  return best;
}

// ---- wiring ----
$("lanes-inner").addEventListener("click", function (ev) {
  var h = ev.target.closest(".host"), l = ev.target.closest(".lane");
  if (h) {
    closed[h.getAttribute("data-host")] = !closed[h.getAttribute("data-host")];
    layout();
  } else if (l) {
    var kind = (ev.target.closest("[data-mark]") || l).getAttribute("data-mark");
    select(+l.getAttribute("data-i"), kind === "crashed" ? "crash" : kind === "stall" ? "stall" : null);
    reveal();
  }
});
$("detail").addEventListener("click", function (ev) {
  var b = ev.target.closest("button[data-i]");
  if (b) select(+b.getAttribute("data-i"));
});
document.querySelectorAll(".pidlink").forEach(function (b) {
  b.addEventListener("click", function () { if (byPid(+b.getAttribute("data-pid")) >= 0) reveal(); });
});
$("f-all").addEventListener("click", function () { mode = "all"; layout(); });
$("f-trouble").addEventListener("click", function () { mode = "trouble"; layout(); });
$("q").addEventListener("input", function () { query = this.value.trim().toLowerCase(); layout(); });
$("lanes").addEventListener("scroll", function () {
  if (!frame) frame = requestAnimationFrame(function () { frame = 0; draw(); });
});
window.addEventListener("resize", function () { axis(); drawn = null; draw(); });
$("lanes").addEventListener("keydown", function (ev) {
  if (ev.key !== "ArrowDown" && ev.key !== "ArrowUp") return;
  var step = ev.key === "ArrowDown" ? 1 : -1, r = rows.findIndex(function (row) { return row.p === sel; });
  for (r += step; r >= 0 && r < rows.length; r += step) {
    if (rows[r].p != null) { select(rows[r].p); break; }
  }
  ev.preventDefault();
});

// A big run opens on the processes in trouble (their parents dimmed around them); "all" shows every lane.
if (P.length > 200 && P.some(trouble)) mode = "trouble";
axis();
layout();
// Open on the process a link names (#pid=123 or #pid=host/123), else the first cause's, else the worst.
var asked = /^#pid=(?:(.*)\/)?(\d+)$/.exec(location.hash);
var first = (D.causes[0] || {}).pids || [];
if (!(asked && byPid(+asked[2], asked[1] ? decodeURIComponent(asked[1]) : null) >= 0) &&
    !(first.length && byPid(first[0]) >= 0)) {
  ["crashed", "stalled", "killed", "vanished", "failed"].some(function (state) {
    var i = P.findIndex(function (p) { return p.state === state; });
    if (i >= 0) select(i);
    return i >= 0;
  });
}
})();
"""
