// autoresearchd dashboard: a small hash-routed page over the read-only JSON API.
// Every value from the research repo (titles, logs, diffs) is written with textContent, never as
// markup: idea text is untrusted. One EventSource tells the page when git changed; the page then
// refetches only the view it shows.
"use strict";

const $main = document.getElementById("main");
const $live = document.getElementById("live");
let current = null;      // {view, args}
let version = null;
let charts = [];
const expanded = new Set(); // lineage nodes the user opened

// -- DOM helpers ---------------------------------------------------------------------------------
// Control and format characters (C0/C1 controls, bidi overrides and isolates, zero-width characters) are
// written out as escapes: a browser obeys a bidi override even in a text node. The same rule as the
// terminal's (views/safe.py); newlines and tabs stay where a block is multi-line on purpose.
const HIDDEN = /[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}]/gu;
const NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"};
function escaped(c) {
  if (NAMED[c]) return NAMED[c];
  const cp = c.codePointAt(0);
  return cp <= 0xff ? "\\x" + cp.toString(16).padStart(2, "0")
    : cp <= 0xffff ? "\\u" + cp.toString(16).padStart(4, "0") : "\\U" + cp.toString(16).padStart(8, "0");
}
function visible(s, keep = "\n\t") { return String(s).replace(HIDDEN, c => keep.includes(c) ? c : escaped(c)); }
function h(tag, props, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, visible(v, ""));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.appendChild(kid instanceof Node ? kid : document.createTextNode(visible(kid)));
  }
  return el;
}
const num = (v, d = 4) => (v === null || v === undefined ? "" : Number(v).toFixed(d));
const signed = (v, d = 4) => (v === null || v === undefined ? "" : (v >= 0 ? "+" : "") + Number(v).toFixed(d));
function dur(s) {
  if (s === null || s === undefined) return "";
  s = Math.max(0, Math.round(s));
  if (s >= 86400) return `${Math.floor(s / 86400)}d${String(Math.floor(s % 86400 / 3600)).padStart(2, "0")}h`;
  if (s >= 3600) return `${Math.floor(s / 3600)}h${String(Math.floor(s % 3600 / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
}
const ideaLink = (id, text) => h("a", {href: "#/idea/" + encodeURIComponent(id)}, text === undefined ? id : text);
const badge = (text, cls) => h("span", {class: "badge " + (cls || String(text || "").replace(/[^a-z_]/gi, ""))}, text || "");
function card(title, ...body) { return h("section", {class: "card"}, h("h3", {}, title), ...body); }
function kv(rows) {
  return h("table", {class: "kv"}, rows.filter(r => r).map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v))));
}
function better(goal, a, b) { return goal === "min" ? a < b : a > b; }
// what a delta is (views/versus.py): paired by seed or against the baseline's mean, the other where they
// differ beyond the noise, and the old baseline a result was measured against
function deltaKind(x) {
  if (!x || x.delta === null || x.delta === undefined) return "";
  let t = x.delta_kind === "paired by seed" ? " paired" : " mean";
  if (x.deltas_differ && x.delta_mean !== null && x.delta_mean !== undefined) t += " (" + signed(x.delta_mean) + " mean)";
  if (x.stale) t += ", old " + num(x.baseline) + (x.baseline_commit ? "@" + x.baseline_commit.slice(0, 7) : "");
  return h("span", {class: "dim kind"}, t);
}
function deltaCell(delta, margin, goal, quiet) {
  if (delta === null || delta === undefined) return h("span", {class: "dim"}, "");
  const good = goal === "min" ? delta < 0 : delta > 0;
  const beyond = margin ? Math.abs(delta) > margin : true;
  return h("span", {class: "delta " + (beyond ? (good ? "pos" : "neg") : "noise")},
    signed(delta), margin && !quiet ? h("span", {class: "dim"}, " ±" + num(margin, 3)) : "");
}

async function get(path) {
  const r = await fetch(path, {credentials: "same-origin", headers: {"accept": "application/json"}});
  if (!r.ok) {
    let msg = r.status + " " + r.statusText;
    try { msg = (await r.json()).error || msg; } catch (e) { /* not JSON */ }
    throw new Error(msg);
  }
  return r.json();
}

// -- routing -------------------------------------------------------------------------------------
function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?");
  const args = Object.fromEntries(new URLSearchParams(query || ""));
  const parts = path.split("/").filter(Boolean);
  if (parts[0] === "idea" && parts[1]) return {view: "idea", args: {id: decodeURIComponent(parts.slice(1).join("/"))}};
  if (["ideas", "lineage", "failures"].includes(parts[0])) return {view: parts[0], args};
  return {view: "overview", args};
}
function setHash(view, args) {
  const q = new URLSearchParams(Object.entries(args).filter(([, v]) => v !== "" && v !== null && v !== undefined));
  const s = q.toString();
  location.hash = "#/" + view + (s ? "?" + s : "");
}

const VIEWS = {overview: renderOverview, ideas: renderIdeas, lineage: renderLineage, failures: renderFailures,
  idea: renderIdea};

async function render(soft) {
  const route = parseHash();
  const same = current && current.view === route.view && JSON.stringify(current.args) === JSON.stringify(route.args);
  current = route;
  document.querySelectorAll("nav a").forEach(a => a.classList.toggle("active",
    a.dataset.view === route.view || (route.view === "idea" && a.dataset.view === "ideas")));
  const scroll = window.scrollY;
  try {
    const node = await VIEWS[route.view](route.args);
    if (parseHash().view !== route.view) return;     // the user moved on while we fetched
    charts.forEach(c => c.destroy());
    charts = [];
    $main.replaceChildren(node);
    node.dispatchEvent(new Event("mounted"));
    if (soft && same) window.scrollTo(0, scroll);
  } catch (e) {
    $main.replaceChildren(h("div", {class: "error"}, "could not load this view: " + e.message));
  }
}
window.addEventListener("hashchange", () => render(false));

// -- live updates --------------------------------------------------------------------------------
let pending = null;
function connect() {
  const es = new EventSource("/api/events");
  es.addEventListener("hello", ev => {
    const v = JSON.parse(ev.data).version;
    const missed = version !== null && v !== version;   // reconnected (a restart, a network blip): catch up
    version = v;
    liveOn();
    if (missed) render(true);
  });
  es.addEventListener("change", ev => {
    const d = JSON.parse(ev.data);
    version = d.version;
    liveOn();
    // the heartbeat file only matters to the overview; new notes matter to every view
    if (d.kind === "state" && current && current.view !== "overview") return;
    clearTimeout(pending);
    pending = setTimeout(() => render(true), 150);
  });
  es.onerror = () => { $live.className = "live off"; $live.textContent = "reconnecting…"; };
}
function liveOn() {
  $live.className = "live on";
  $live.textContent = "live · v" + version + " · " + new Date().toLocaleTimeString();
}

// -- overview ------------------------------------------------------------------------------------
async function renderOverview() {
  const s = await get("/api/overview");
  document.getElementById("env").textContent = s.env ? "· " + visible(s.env, "") : "";
  const d = s.daemon, m = s.metric, b = s.baseline, sp = s.spend;
  const root = h("div", {class: "overview"});
  const daemon = d.alive
    ? [h("div", {class: "big ok"}, "running"), kv([["pid", d.pid], ["up", dur(d.uptime_s)],
      ["heartbeat", d.last_heartbeat_s !== null ? dur(d.last_heartbeat_s) + " ago" : ""], ["LLM", d.llm || ""],
      d.stop_reason ? ["not proposing", d.stop_reason] : null,
      sp.held ? ["held", sp.held + " queued idea(s), compute budget spent"] : null,
      d.implementing && d.implementing.length ? ["implementing", d.implementing.join(", ")] : null])]
    : [h("div", {class: "big dim"}, "not running"), h("p", {class: "dim"}, "read from git" +
      (d.stop_reason ? "; last stop: " + d.stop_reason : ""))];
  const bar = (used, cap) => cap ? h("div", {class: "bar"}, h("div", {class: "fill" + (used > cap ? " over" : ""),
    style: null, "data-w": Math.min(100, 100 * used / cap)})) : null;
  const usd = sp.live_usd !== null && sp.live_usd !== undefined ? Math.max(sp.usd, sp.live_usd) : sp.usd;
  const spend = [kv([
    ["LLM", "$" + num(usd, 2) + (sp.budget_usd ? " / $" + num(sp.budget_usd, 0) : "")],
    ["tokens", Number(sp.tokens || 0).toLocaleString()],
    // max_gpu_hours is the budget in the env's own unit (CPU-hours on a CPU env), shown as set
    s.gpus !== 0 ? ["GPU-hours", num(sp.gpu_hours, 2) + (sp.max_gpu_hours ? " / " + sp.max_gpu_hours : "")] : null,
    s.gpus === 0 || sp.cpu_hours ? ["CPU-hours", num(sp.cpu_hours || 0, 2)
      + (s.gpus === 0 && sp.max_gpu_hours ? " / " + sp.max_gpu_hours : "")] : null,
    // early stopping ([stopping]) and screening ([screening]): ideas not run to full length and the
    // compute that saved (estimated)
    sp.stopped || sp.screened_out ? [(s.gpus === 0 ? "CPU" : "GPU") + "-hours saved", h("span", {id: "saved-hours"},
      num(sp.saved_hours, 2) + " (" + [sp.stopped ? sp.stopped + " stopped early" : null,
        sp.screened_out ? sp.screened_out + " screened out" : null].filter(Boolean).join(", ")
      + ", estimated)")] : null,
    s.cost_per_improvement.usd !== null ? ["$ per 1.0 Δ", num(s.cost_per_improvement.usd, 2)] : null,
    s.cost_per_improvement.gpu_hours !== null && s.cost_per_improvement.gpu_hours !== undefined
      ? ["GPU-h per 1.0 Δ", num(s.cost_per_improvement.gpu_hours, 2)] : null]),
    bar(usd, sp.budget_usd)];
  const baseline = b.value !== null
    ? [h("div", {class: "big"}, num(b.value)), h("div", {class: "dim"}, "± " + num(b.std || 0) + " over " + b.seeds +
      " seeds"), h("div", {class: "seeds"}, (b.values || []).map((v, k) => h("span", {class: "seed"}, "s" + k + " " + num(v)))),
      h("div", {class: "small"}, ideaLink("baseline", "seeds, logs, checkout →"))]
    : [h("div", {class: "big dim"}, "not measured yet"), h("div", {class: "small"}, ideaLink("baseline", "its commit →"))];
  const result = (r, label) => r
    ? [h("div", {class: "big " + (label ? "warn" : "ok")}, num(r.value)),
      h("div", {class: "dim"}, (r.seeds > 1 && r.std !== null ? "± " + num(r.std) + " over " + r.seeds + " seeds"
        : "1 seed") + (r.delta_text ? " · " + r.delta_text : "")),
      h("div", {}, badge(r.decision_text, r.decision || "undecided"), " ", ideaLink(r.idea, r.title))]
    : [h("div", {class: "big dim"}, "none yet")];
  const counts = h("div", {class: "chips"}, Object.entries(s.counts).sort().map(([k, v]) =>
    h("a", {class: "chip " + k, href: "#/ideas?status=" + encodeURIComponent(k)}, k + " ", h("b", {}, v))));
  root.append(h("div", {class: "cards top"},
    card("Daemon", ...daemon),
    card("Spend", ...spend),
    card("Baseline " + m + " (" + s.goal + ")", ...baseline),
    card("Best confirmed", ...result(s.best)),
    s.best_unconfirmed ? card("Best unconfirmed", ...result(s.best_unconfirmed, true),
      h("div", {class: "dim small"}, "one lucky seed is not a result: confirmation seeds decide")) : null,
    s.stale && s.stale.count ? card("Measured against an old baseline (" + s.stale.count + ")",
      h("div", {class: "dim small"}, "kept apart: never best, never a parent"),
      s.stale.top.map(r => h("div", {class: "stale"}, num(r.value), " · ", r.delta_text, " ", ideaLink(r.idea, r.title)))) : null,
    card("Ideas: " + s.total + (s.epoch !== null && s.epoch !== undefined ? " · epoch " + s.epoch : " · no epochs yet"), counts,
      Object.keys(s.failures).length ? h("p", {}, h("a", {href: "#/failures"},
        Object.values(s.failures).reduce((a, c) => a + c, 0) + " failures by reason →")) : null)));
  // best-so-far curves
  const c1 = h("div", {class: "chart"}), c2 = h("div", {class: "chart"});
  const unit = s.gpus === 0 ? "CPU-hours" : "GPU-hours";   // the compute axis of a CPU env is CPU time
  root.append(h("div", {class: "cards two"}, card("Best so far, by epoch", c1), card("Best so far, by " + unit, c2)));
  // what runs where
  const slots = s.slots || [];
  const running = s.running || [];
  root.append(h("div", {class: "cards two"},
    card("Slots and hosts", slots.length ? slotTable(slots) : h("p", {class: "dim"}, d.alive ? "no slots reported" : "the daemon is not running")),
    card("Running now", running.length ? h("table", {class: "grid"}, h("tr", {}, h("th", {}, "trial"), h("th", {}, "idea"),
      h("th", {}, "where"), h("th", {}, "for")), running.map(r => h("tr", {}, h("td", {}, r.trial),
      h("td", {}, ideaLink(r.idea, r.idea === "baseline" ? "baseline" : r.title)), h("td", {}, r.where),
      h("td", {}, dur(r.elapsed_s))))) : h("p", {class: "dim"}, "nothing is running"))));
  root.addEventListener("mounted", () => {
    root.querySelectorAll(".fill").forEach(f => { f.style.width = f.dataset.w + "%"; });
    const e = s.curves.by_epoch, t = s.curves.by_time;
    plot(c1, e.epoch, e.raw, e.confirmed, b.value, "epoch", "no epochs yet");
    plot(c2, t.gpu_hours, t.raw, t.confirmed, b.value, unit);
  });
  return root;
}

function slotTable(slots) {
  const hosts = new Map();
  for (const x of slots) {
    const host = String(x.slot).split("/")[0];
    if (!hosts.has(host)) hosts.set(host, []);
    hosts.get(host).push(x);
  }
  return h("table", {class: "grid compact", id: "slots"}, h("tr", {}, h("th", {}, "host"), h("th", {}, "slots"), h("th", {}, "busy")),
    [...hosts].map(([host, xs]) => h("tr", {}, h("td", {}, host),
      h("td", {}, xs.map(x => [badge(String(x.slot).split("/").slice(1).join("/") + " " + x.state, x.state), " "])),
      h("td", {class: "num"}, xs.filter(x => x.state === "busy").length + "/" + xs.length))));
}

function plot(el, xs, raw, conf, base, xlabel, empty) {
  if (!window.uPlot || !xs || xs.length === 0) { el.append(h("p", {class: "dim"}, empty || "no results yet")); return; }
  // the x axis fits the data: one x (one epoch, one result) gets a unit-wide range around it, not 0..100
  const lo = Math.min(...xs), hi = Math.max(...xs);
  const xr = hi > lo ? [lo, hi] : [lo - 0.5, lo + 0.5];
  // a line through one point draws nothing (a result confirmed last is the confirmed curve's only
  // point): points are drawn for the best-so-far series, so every value shows
  const pts = {show: true, size: 6};
  const width = Math.max(300, el.clientWidth || 500);
  const data = [xs, raw.map(v => v === null ? null : v), conf.map(v => v === null ? null : v), xs.map(() => base)];
  const opts = {width, height: 240, legend: {show: true},
    scales: {x: {time: false, range: () => xr}},
    axes: [{label: xlabel, stroke: "#666"}, {stroke: "#666", size: 60}],
    series: [{label: xlabel}, {label: "best (any)", stroke: "#9aa4b1", width: 1.5, points: Object.assign({}, pts, {stroke: "#9aa4b1", fill: "#9aa4b1"}), paths: uPlot.paths.stepped({align: 1})},
      {label: "best confirmed", stroke: "#d1495b", width: 2.5, points: Object.assign({}, pts, {stroke: "#d1495b", fill: "#d1495b"}), paths: uPlot.paths.stepped({align: 1})},
      {label: "baseline", stroke: "#222", dash: [6, 4], width: 1, points: {show: false}}]};
  charts.push(new uPlot(opts, data, el));
}

// an idea's learning curve (one line per seed) against the band of the baseline's seeds (mean ± std):
// numbers only, from /api/idea's `curve` (views/learning.py)
function learningPlot(el, c, metric) {
  if (!window.uPlot) { el.append(h("p", {class: "dim"}, "no chart library")); return; }
  const grey = {stroke: "#9aa4b1", dash: [4, 4], width: 1, points: {show: false}};
  const series = [{label: "t"}, Object.assign({label: "baseline − std"}, grey),
    {label: "baseline mean", stroke: "#222", dash: [6, 4], width: 1.5, points: {show: false}},
    Object.assign({label: "baseline + std"}, grey)].concat(
    c.idea.map((_, k) => ({label: "idea seed " + k, stroke: "#d1495b", width: 2, points: {show: true, size: 4}})));
  const data = [c.t, c.lo, c.mean, c.hi].concat(c.idea);
  const opts = {width: Math.max(300, el.clientWidth || 500), height: 240, legend: {show: true},
    scales: {x: {time: false, range: () => [0, 1]}}, axes: [{label: "t (share of training)", stroke: "#666"},
      {label: metric, stroke: "#666", size: 60}], series};
  charts.push(new uPlot(opts, data, el));
}

// -- leaderboard ---------------------------------------------------------------------------------
const COLS = [["rank", "#"], ["idea", "idea"], ["title", "title"], ["value", "metric"], ["delta", "Δ baseline"],
  ["decision", "decision"], ["status", "status"], ["origin", "origin"], ["epoch", "epoch"]];

async function renderIdeas(args) {
  const q = new URLSearchParams();
  for (const k of ["status", "origin", "epoch", "decision", "q", "sort", "desc", "offset"]) if (args[k]) q.set(k, args[k]);
  const r = await get("/api/ideas?" + q.toString());
  const set = (k, v) => { const a = Object.assign({}, args, {[k]: v}); if (k !== "offset") delete a.offset; setHash("ideas", a); };
  const select = (k, label) => h("label", {}, label + " ", h("select", {name: k, onchange: e => set(k, e.target.value)},
    h("option", {value: ""}, "all"),
    Object.entries(r.facets[k]).map(([v, n]) => h("option", {value: v, selected: String(args[k] || "") === v ? "" : null},
      v + " (" + n + ")"))));
  const search = h("input", {type: "search", name: "q", placeholder: "search titles and ids", value: args.q || ""});
  search.addEventListener("change", e => set("q", e.target.value));
  const bar = h("div", {class: "filters"}, select("status", "status"), select("origin", "origin"),
    select("epoch", "epoch"), select("decision", "decision"), search,
    h("span", {class: "dim"}, r.matched + " of " + r.total + " ideas"));
  const head = h("tr", {}, COLS.map(([k, label]) => {
    const on = (args.sort || "rank") === k;
    return h("th", {class: "sortable" + (on ? " on" : ""), "data-sort": k,
      onclick: () => { const a = Object.assign({}, args, {sort: k, desc: on && !args.desc ? "1" : ""}); delete a.offset; setHash("ideas", a); }},
      label === "metric" ? r.metric : label, on ? (args.desc ? " ▾" : " ▴") : "");
  }));
  const rows = r.rows.map(x => h("tr", {class: "row " + x.status, "data-idea": x.idea},
    h("td", {class: "dim"}, x.rank || ""), h("td", {}, ideaLink(x.idea)),
    h("td", {class: "title"}, ideaLink(x.idea, x.title), x.error ? h("div", {class: "err small"}, x.error) : null),
    h("td", {class: "num"}, num(x.value), x.seeds > 1 && x.std !== null ? h("span", {class: "dim"}, " ±" + num(x.std, 3) + " (" + x.seeds + ")") : ""),
    h("td", {class: "num"}, deltaCell(x.delta, x.margin, r.goal), deltaKind(x)),
    h("td", {}, x.decision_text ? badge(x.decision_text, x.decision || "undecided") : ""), h("td", {}, badge(x.status)), h("td", {}, x.origin),
    h("td", {class: "num"}, x.epoch)));
  const off = Number(args.offset || 0);
  const pager = h("div", {class: "pager"},
    off > 0 ? h("a", {href: "#", onclick: e => { e.preventDefault(); set("offset", Math.max(0, off - 100)); }}, "← previous") : "",
    h("span", {class: "dim"}, r.matched ? (off + 1) + "–" + Math.min(off + r.rows.length, r.matched) : ""),
    off + r.rows.length < r.matched ? h("a", {href: "#", onclick: e => { e.preventDefault(); set("offset", off + 100); }}, "next →") : "");
  return h("div", {}, bar, h("table", {class: "grid board", id: "leaderboard"}, h("thead", {}, head), h("tbody", {}, rows)), pager);
}

// -- lineage -------------------------------------------------------------------------------------
async function renderLineage(args) {
  const root = args.root || "baseline";
  const r = await get("/api/lineage?depth=2&root=" + encodeURIComponent(root));
  const crumbs = h("div", {class: "crumbs"}, h("a", {href: "#/lineage"}, "all"),
    r.ancestors.filter(a => a.id !== "baseline").map(a => [" › ", h("a", {href: "#/lineage?root=" + encodeURIComponent(a.id)}, a.title)]),
    root !== "baseline" ? [" › ", h("b", {}, r.root.title)] : "");
  const legend = h("div", {class: "legend"}, ["best", "good", "neutral", "worse", "failed", "live", "pending"].map(c =>
    h("span", {}, h("i", {class: "dot " + c}), {best: "promoted / confirmed", good: "better than baseline",
      neutral: "within noise", worse: "worse", failed: "failed", live: "running", pending: "queued"}[c])));
  const tree = h("ul", {class: "tree"}, node(r.root, r.goal, 0, true, r.margin));
  return h("div", {}, h("p", {class: "dim"}, r.total + " ideas; children sorted by the best result in their subtree. " +
    "Open a branch with ▸, or focus on its subtree."), crumbs, legend, tree);
}

function node(n, goal, depth, open, margin) {
  const li = h("li", {class: "node", "data-id": n.id});
  const isOpen = open || expanded.has(n.id);
  const tog = n.children ? h("button", {class: "tog", title: "expand"}, isOpen && n.kids ? "▾" : "▸") : h("span", {class: "tog"}, "");
  const size = n.size > 1 ? h("span", {class: "dim small"}, " · " + (n.size - 1) + " below" +
    (n.best !== null && n.best !== undefined ? ", best " + num(n.best) : "")) : "";
  const label = n.id === "baseline" ? h("b", {}, ideaLink("baseline", "baseline " + num(n.value))) : ideaLink(n.id, n.title);
  const row = h("div", {class: "nrow"}, tog, h("i", {class: "dot " + n.colour, title: n.status}), label,
    n.value !== null && n.id !== "baseline" ? h("span", {class: "num"}, " " + num(n.value)) : "",
    n.delta !== null && n.delta !== undefined ? h("span", {title: n.delta_text || ""}, " ", deltaCell(n.delta, margin, goal, true), deltaKind(n)) : "",
    n.decision ? [" ", badge(n.decision)] : "", size,
    n.children && n.id !== "baseline" ? h("a", {class: "focus", title: "focus on this subtree",
      href: "#/lineage?root=" + encodeURIComponent(n.id)}, "focus") : "");
  li.append(row);
  const kids = h("ul", {});
  li.append(kids);
  const fill = (list, more) => {
    kids.replaceChildren(...list.map(k => node(k, goal, depth + 1, false, margin)));
    if (more) kids.append(h("li", {class: "dim small more"}, "… " + more + " more (focus to see them all)"));
  };
  if (n.kids && isOpen) fill(n.kids, n.more);
  if (n.children && tog.tagName === "BUTTON") {
    tog.addEventListener("click", async () => {
      if (kids.childElementCount) { kids.replaceChildren(); tog.textContent = "▸"; expanded.delete(n.id); return; }
      const r = await get("/api/lineage?depth=1&limit=100&root=" + encodeURIComponent(n.id));
      expanded.add(n.id);
      tog.textContent = "▾";
      fill(r.root.kids || [], r.root.more);
    });
  }
  if (!n.kids && expanded.has(n.id)) {          // re-open what the user had open after a live refresh
    get("/api/lineage?depth=1&limit=100&root=" + encodeURIComponent(n.id)).then(r => { tog.textContent = "▾"; fill(r.root.kids || [], r.root.more); });
  }
  return li;
}

// -- failures ------------------------------------------------------------------------------------
const REASONS = {implement_failed: "implementation failed", check_failed: "check failed", crashed: "crashed",
  timed_out: "timed out", rejected: "rejected", duplicate: "duplicate", tamper_or_suspicious: "tamper or suspicious",
  over_budget: "over budget (compute cap)", lost: "lost (host vanished)", refused: "refused (harness differs)",
  cancelled: "cancelled", stopped: "stopped early (learning curve)"};
async function renderFailures() {
  const r = await get("/api/failures");
  if (!r.groups.length) return h("p", {class: "dim"}, "no failures yet");
  const nav = h("div", {class: "chips"}, r.groups.map(g => h("a", {class: "chip failed", href: "#/failures",
    onclick: e => { e.preventDefault(); document.getElementById("g-" + g.reason).scrollIntoView(); }},
    (REASONS[g.reason] || g.reason) + " ", h("b", {}, g.count))));
  return h("div", {}, nav, r.groups.map(g => h("section", {class: "card wide", id: "g-" + g.reason},
    h("h3", {}, (REASONS[g.reason] || g.reason) + " · " + g.count + (g.count > g.ideas.length ? " (newest " + g.ideas.length + ")" : "")),
    h("table", {class: "grid"}, g.ideas.map(i => h("tr", {}, h("td", {}, ideaLink(i.id)),
      h("td", {class: "title"}, ideaLink(i.id, i.title)), h("td", {}, i.origin), h("td", {class: "num"}, i.epoch),
      h("td", {}, h("div", {class: "err small clip"}, i.error))))))));
}

// -- one idea ------------------------------------------------------------------------------------
function diffView(text) {
  const pre = h("pre", {class: "diff"});
  for (const line of text.split("\n")) {
    let cls = "";
    if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff --git") || line.startsWith("index ")) cls = "file";
    else if (line.startsWith("@@")) cls = "hunk";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    pre.append(h("span", {class: cls}, line + "\n"));
  }
  return pre;
}

async function renderIdea(args) {
  const i = await get("/api/idea/" + encodeURIComponent(args.id));
  const n = i.note;
  const root = h("div", {class: "idea"});
  root.append(h("h2", {}, h("i", {class: "dot " + i.colour}), " ", i.title),
    h("div", {class: "chips"}, badge(i.status), n && n.decision ? badge(n.decision) : "", badge(i.origin, "origin"),
      i.epoch !== null ? h("span", {class: "dim"}, "epoch " + i.epoch) : "", i.failure ? badge(REASONS[i.failure] || i.failure, "failed") : ""));
  const prov = kv([["idea", i.id], ["branch", i.branch || "(none: never became runnable)"], ["commit", i.commit || ""],
    ["base", i.base || ""],
    i.parents.length ? ["parents", i.parents.map((p, k) => [k ? ", " : "", ideaLink(p)])] : null,
    i.children.length ? ["children", i.children.map((p, k) => [k ? ", " : "", ideaLink(p)])] : null,
    i.model ? ["model", i.model] : null, i.attempts_n ? ["attempts", i.attempts_n] : null,
    ["tokens", Number(i.tokens || 0).toLocaleString()], ["LLM cost", "$" + num(i.usd, 4)],
    i.trailers["Prompt-Hash"] ? ["prompt hash", i.trailers["Prompt-Hash"]] : null]);
  const git = i.git ? h("div", {class: "git"}, h("code", {id: "git-cmd"}, i.git)) : null;
  root.append(h("div", {class: "cards two"}, card("Idea", h("div", {class: "text"}, i.text)),
    card("Provenance", prov, git ? h("p", {class: "small dim"}, "check it out:") : null, git)));
  if (n) {
    const res = [kv([["status", badge(n.status)], n.value !== null ? [i.metric, h("b", {}, num(n.value)),
      n.values.length > 1 && n.std !== null ? " ± " + num(n.std) + " over " + n.values.length + " seeds" : ""] : null,
    n.baseline !== null ? ["baseline", num(n.baseline) + (n.baseline_std ? " ± " + num(n.baseline_std) : "")] : null,
    n.delta !== null ? ["Δ baseline", [deltaCell(n.delta, null, i.goal), " ", h("span", {class: "dim"}, n.delta_text)]] : null,
    n.parent_delta !== null && n.parent_delta !== undefined ? ["Δ parent", signed(n.parent_delta)] : null,
    n.decision ? ["decision", badge(n.decision)] : null, n.host ? ["host", n.host + (n.accelerator ? " · " + n.accelerator : "")] : null,
    // totals over every seed, run + evaluation (docs/notes.md "Compute fields")
    n.wall_s ? ["wall (all seeds)", dur(n.wall_s)] : null, n.gpu_s ? ["GPU time (all seeds)", dur(n.gpu_s)] : null,
    n.cpu_s ? ["CPU time (all seeds)", dur(n.cpu_s)] : null, n.sandbox ? ["sandbox", n.sandbox] : null,
    n.duplicate_of ? ["duplicate of", ideaLink(n.duplicate_of)] : null,
    n.tamper && n.tamper.length ? ["tamper", n.tamper.join(", ")] : null,
    n.flags && n.flags.length ? ["flags", n.flags.join(", ")] : null,
    n.error ? ["error", h("div", {class: "err"}, n.error)] : null])];
    const seeds = n.trials.length ? h("table", {class: "grid", id: "seeds"}, h("tr", {}, ["seed", "status", i.metric, "host", "wall", ""].map(c => h("th", {}, c))),
      n.trials.map(t => h("tr", {}, h("td", {}, t.seed), h("td", {}, badge(t.status)), h("td", {class: "num"}, num(t.value)),
        h("td", {}, (t.host || "") + (t.accelerator ? " · " + t.accelerator : "")), h("td", {}, dur(t.wall_s)),
        h("td", {class: "err small"}, t.error || (t.tamper || []).join(", "))))) : h("p", {class: "dim"}, "no trials");
    root.append(h("div", {class: "cards two"}, card("Result", ...res), card("Per seed", seeds)));
  } else if (i.leases.length) {
    root.append(card("Running", h("table", {class: "grid"}, i.leases.map(l => h("tr", {}, h("td", {}, l.trial),
      h("td", {}, l.host + "/" + l.slot), h("td", {}, l.state), h("td", {}, dur(l.elapsed_s)))))));
  } else {
    root.append(card("Result", h("p", {class: "dim"}, "no result yet: " + i.status)));
  }
  if (i.curve) {
    const el = h("div", {class: "chart", id: "learning-curve"});
    root.append(h("section", {class: "card wide"}, h("h3", {}, "Learning curve ", h("span", {class: "badge untrusted"},
      "the run's own report: may stop an idea, never its result")), el,
      i.curve.stopped_t ? h("p", {class: "small dim"}, "stopped at t = " + num(i.curve.stopped_t, 2)) : null));
    root.addEventListener("mounted", () => learningPlot(el, i.curve, i.metric));
  }
  root.append(h("section", {class: "card wide"}, h("h3", {}, "Diff" + (i.diff_truncated ? " (cut; run the git command for all of it)" : "")),
    i.diff ? diffView(i.diff) : h("p", {class: "dim"}, i.baseline ? "none: the baseline is what every idea's diff is taken against"
      : "no diff (the idea never became a commit of its own)")));
  if (i.attempts.length) {
    root.append(h("section", {class: "card wide"}, h("h3", {}, "Implementer attempts (" + i.attempts.length + ")"),
      h("ol", {class: "attempts"}, i.attempts.map(a => h("li", {}, a.method ? h("span", {class: "dim"}, "via " + a.method + ": ") : "",
        a.error ? h("pre", {class: "log"}, a.error) : h("span", {class: "ok"}, "ok"))))));
  }
  if (i.check) root.append(h("section", {class: "card wide untrusted"}, h("h3", {}, "Check output ",
    h("span", {class: "badge untrusted"}, "untrusted text")), h("pre", {class: "log untrusted"}, i.check)));
  for (const l of i.logs) {
    root.append(h("section", {class: "card wide untrusted"}, h("h3", {}, "Log ", h("span", {class: "raw"}, l.name),
      l.truncated ? " (tail)" : "", " ", h("span", {class: "badge untrusted"}, "trial output, untrusted text")),
      h("pre", {class: "log tail untrusted"}, l.text)));
  }
  root.addEventListener("mounted", () => root.querySelectorAll("pre.tail").forEach(p => { p.scrollTop = p.scrollHeight; }));
  return root;
}

connect();
render(false);
