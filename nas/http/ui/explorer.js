// The operator dashboard's explorer: charts of the delivery history (drawn
// here as SVG, nothing fetched from elsewhere), the agents paged and
// searched, the processes dispatching, and a page per agent (#agent/ID) with
// its armed fires (next first, paged, searched by job), its recent
// deliveries and its dead letters. It shares app.js's helpers (getJSON,
// cell, fill, when, seconds, agentButton, handle).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const OUTCOMES = ["delivered", "retry", "rejected", "dropped", "instance_stopped"];
const PAGE = 25;

const ex = {
  window: "hour",
  agentQuery: "",
  agentCursors: [""], // the cursor of each page shown so far; the last is the current one
  armedQuery: "",
  armedCursors: [""],
  agent: null, // the agent id of the page shown, or null for the overview
};

function svgEl(name, attrs, parent) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (parent) parent.appendChild(el);
  return el;
}

// niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

// tick formats a point's time as the x axis shows it (UTC).
function tick(t, withDay) {
  const d = new Date(t);
  const hm = String(d.getUTCHours()).padStart(2, "0") + ":" + String(d.getUTCMinutes()).padStart(2, "0");
  return withDay ? d.toISOString().slice(5, 10) + " " + hm : hm;
}

// chart draws into svg a chart of n columns: stacked bars for each series
// of kind "bar" and lines for those of kind "line". series: [{name, cls,
// kind, values}]; labels: the x label of each column; fmt: the y axis's.
function chart(svg, labels, series, fmt) {
  const W = 600, H = 180, L = 44, R = 8, T = 10, B = 22;
  svg.replaceChildren();
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.setAttribute("preserveAspectRatio", "none");
  const n = labels.length;
  const bars = series.filter((s) => s.kind === "bar");
  const lines = series.filter((s) => s.kind === "line");
  let top = 0;
  for (let i = 0; i < n; i++) {
    top = Math.max(top, bars.reduce((a, s) => a + (s.values[i] || 0), 0));
    for (const s of lines) if (s.values[i] !== null && s.values[i] !== undefined) top = Math.max(top, s.values[i]);
  }
  top = niceMax(top);
  const cw = (W - L - R) / Math.max(n, 1);
  const y = (v) => T + (H - T - B) * (1 - v / top);
  for (const f of [0, 0.5, 1]) {
    svgEl("line", { x1: L, x2: W - R, y1: y(top * f), y2: y(top * f), class: "grid-line" }, svg);
    const lab = svgEl("text", { x: L - 4, y: y(top * f) + 4, class: "axis", "text-anchor": "end" }, svg);
    lab.textContent = fmt(top * f);
  }
  const every = Math.max(1, Math.ceil(n / 6));
  for (let i = 0; i < n; i += every) {
    const lab = svgEl("text", { x: L + i * cw + cw / 2, y: H - 6, class: "axis", "text-anchor": "middle" }, svg);
    lab.textContent = labels[i];
  }
  for (let i = 0; i < n; i++) {
    let base = 0;
    for (const s of bars) {
      const v = s.values[i] || 0;
      if (v <= 0) continue;
      const r = svgEl("rect", { x: L + i * cw + cw * 0.1, width: Math.max(cw * 0.8, 1), y: y(base + v), height: y(base) - y(base + v),
        class: "bar " + s.cls }, svg);
      svgEl("title", {}, r).textContent = labels[i] + " " + s.name + ": " + fmt(v);
      base += v;
    }
  }
  for (const s of lines) {
    let d = "";
    s.values.forEach((v, i) => {
      if (v === null || v === undefined) return;
      d += (d === "" ? "M" : "L") + (L + i * cw + cw / 2).toFixed(1) + " " + y(v).toFixed(1);
    });
    if (d) svgEl("path", { d: d, class: "line " + s.cls }, svg);
    s.values.forEach((v, i) => {
      if (v === null || v === undefined) return;
      const c = svgEl("circle", { cx: (L + i * cw + cw / 2).toFixed(1), cy: y(v).toFixed(1), r: 2.5, class: "dot " + s.cls }, svg);
      svgEl("title", {}, c).textContent = labels[i] + " " + s.name + ": " + fmt(v);
    });
  }
}

// legend fills el with a key per series.
function legend(el, series) {
  el.replaceChildren(...series.map((s) => {
    const span = document.createElement("span");
    const sw = document.createElement("i");
    sw.className = "swatch " + s.cls;
    span.appendChild(sw);
    span.appendChild(document.createTextNode(s.name));
    return span;
  }));
}

function count(v) {
  return v >= 1000 ? (v / 1000).toFixed(v >= 10000 ? 0 : 1) + "k" : String(Math.round(v * 10) / 10);
}

function renderHistory(h) {
  const day = h.window === "day";
  const labels = h.points.map((p) => tick(p.at, false));
  const per = day ? "per 10 min" : "per minute";
  const outcomes = OUTCOMES.map((o) => ({ name: o.replace("_", " "), cls: "o-" + o, kind: "bar", values: h.points.map((p) => p.outcomes[o] || 0) }));
  chart($("chart-deliveries"), labels, outcomes, count);
  legend($("legend-deliveries"), outcomes);
  $("per-deliveries").textContent = per;
  const lag = [
    { name: "p50", cls: "l-p50", kind: "line", values: h.points.map((p) => p.lag_p50_seconds) },
    { name: "p99", cls: "l-p99", kind: "line", values: h.points.map((p) => p.lag_p99_seconds) },
  ];
  chart($("chart-lag"), labels, lag, seconds);
  legend($("legend-lag"), lag);
  const failures = [
    { name: "retries", cls: "o-retry", kind: "bar", values: h.points.map((p) => p.retries) },
    { name: "dead-lettered", cls: "o-rejected", kind: "bar", values: h.points.map((p) => p.dead_lettered) },
  ];
  chart($("chart-failures"), labels, failures, count);
  legend($("legend-failures"), failures);
  $("per-failures").textContent = per;
  const due = [{ name: "fires due", cls: "o-due", kind: "bar", values: h.due }];
  const dueLabels = h.due.map((_, i) => tick(new Date(new Date(h.due_from).getTime() + i * 3600e3).toISOString(), false));
  chart($("chart-due"), dueLabels, due, count);
  $("g-lag-store").textContent = h.lag_p50_seconds === null ? "no deliveries" : seconds(h.lag_p50_seconds) + " / " + seconds(h.lag_p99_seconds);
  $("g-lag-window").textContent = (day ? "last day" : "last hour") + ", all processes";
  const total = (k) => h.totals[k] || 0;
  $("history-totals").textContent = OUTCOMES.map((o) => o.replace("_", " ") + " " + total(o)).join(" · ");
  $("history-totals").dataset.delivered = String(total("delivered"));
  document.querySelectorAll("[data-window]").forEach((b) => b.classList.toggle("on", b.dataset.window === h.window));
}

function stateCell(a) {
  const td = cell(a.state, "state state-" + a.state);
  if (a.state === "probing") td.textContent = "probing (" + a.flow.failures + " not answered)";
  if (a.state === "waiting" && a.flow.gate_until) td.textContent = "waiting until " + when(a.flow.gate_until);
  if (a.flow.disabled_by_file) td.textContent = "disabled (agents file)";
  return td;
}

function lastCell(d) {
  if (!d) return cell("none kept", "muted");
  return cell(when(d.at) + " · " + d.outcome + (d.outcome === "delivered" ? " · " + seconds(d.lag_seconds) + " late" : ""),
    "outcome-" + d.outcome);
}

function agentLink(id) {
  const td = document.createElement("td");
  td.className = "mono";
  const a = document.createElement("a");
  a.href = "#agent/" + encodeURIComponent(id);
  a.textContent = id;
  a.dataset.test = "agent-link";
  td.appendChild(a);
  return td;
}

function renderAgents(page) {
  fill($("agents"), page.agents.map((a) => [agentLink(a.agent_id), cell(String(a.armed), "num"), stateCell(a),
    lastCell(a.last_delivery), agentButton(a.agent_id, a.flow)]),
  ex.agentQuery ? "No agent matches." : "NAS knows no agent yet.", 5);
  pager("agents", page, ex.agentCursors);
}

// pager sets the "x–y of N" of a list and its buttons.
function pager(name, page, cursors) {
  const first = (cursors.length - 1) * PAGE;
  const shown = (page.agents || page.armed).length;
  $(name + "-range").textContent = page.total === 0 ? "" : (first + 1) + "–" + (first + shown) + " of " + page.total;
  $(name + "-prev").disabled = cursors.length <= 1;
  $(name + "-next").disabled = !page.next_cursor;
  $(name + "-next").dataset.cursor = page.next_cursor || "";
}

function renderProcesses(p) {
  fill($("processes"), p.processes.map((x) => [cell(x.kind), cell(x.host, "mono"), cell(String(x.pid), "num"),
    cell(String(x.dispatchers), "num"), cell(when(x.started_at)), cell(x.last_claim ? when(x.last_claim) : "none yet"),
    cell(String(x.delivered), "num")]),
  "No process dispatches fires: NAS runs with relay.dispatchers 0 and no chronos relay process is alive.", 7);
  $("processes").querySelectorAll("tr").forEach((tr, i) => {
    if (p.processes[i]) tr.dataset.test = "process";
  });
}

// startButton starts a stopped instance again.
function startButton(instanceID) {
  const td = document.createElement("td");
  const btn = document.createElement("button");
  btn.type = "button";
  btn.textContent = "Start";
  btn.dataset.test = "start-instance";
  btn.addEventListener("click", async () => {
    btn.disabled = true;
    try {
      const r = await fetch("/api/operator/instances/" + encodeURIComponent(instanceID) + "/start", {
        method: "POST", credentials: "same-origin", headers: { Accept: "application/json" },
      });
      if (r.status === 401) throw new Unauthorized();
      if (!r.ok) throw new Error("start " + instanceID + ": " + r.status + " " + (await errorText(r)));
      await refresh();
    } catch (e) {
      btn.disabled = false;
      handle(e);
    }
  });
  td.appendChild(btn);
  return td;
}

function agentsPath() {
  const q = new URLSearchParams({ limit: String(PAGE) });
  if (ex.agentQuery) q.set("q", ex.agentQuery);
  const c = ex.agentCursors[ex.agentCursors.length - 1];
  if (c) q.set("cursor", c);
  return "/api/operator/agents?" + q;
}

function armedPath(id) {
  const q = new URLSearchParams({ limit: String(PAGE) });
  if (ex.armedQuery) q.set("job", ex.armedQuery);
  const c = ex.armedCursors[ex.armedCursors.length - 1];
  if (c) q.set("cursor", c);
  return "/api/operator/agents/" + encodeURIComponent(id) + "/armed?" + q;
}

// DAY_EVERY_MS is how often the day's history is read again: its points
// are ten minutes long, and reading a day costs the store 1440 reads.
const DAY_EVERY_MS = 30000;
const histCache = { window: null, at: 0, data: null };

// readHistory reads the history of the window shown: the hour's on every
// refresh, the day's at most every DAY_EVERY_MS.
async function readHistory() {
  const now = Date.now();
  if (histCache.data && histCache.window === ex.window && ex.window === "day" && now - histCache.at < DAY_EVERY_MS) {
    return histCache.data;
  }
  const data = await getJSON("/api/operator/history?window=" + ex.window);
  Object.assign(histCache, { window: ex.window, at: now, data: data });
  return data;
}

// refreshExplorer reads and renders what the explorer shows of the
// overview page.
async function refreshExplorer() {
  const [h, agents, procs] = await Promise.all([
    readHistory(),
    getJSON(agentsPath()),
    getJSON("/api/operator/processes"),
  ]);
  renderHistory(h);
  renderAgents(agents);
  renderProcesses(procs);
}

// jobCell is a job id that, clicked, narrows every table of the agent's
// page to that job.
function jobCell(job) {
  const td = document.createElement("td");
  td.className = "mono";
  const a = document.createElement("a");
  a.href = "#";
  a.textContent = job;
  a.title = "Show only this job";
  a.dataset.test = "job-link";
  a.addEventListener("click", (ev) => {
    ev.preventDefault();
    $("armed-search").value = job;
    ex.armedQuery = job;
    ex.armedCursors = [""];
    refresh();
  });
  td.appendChild(a);
  return td;
}

// ofJob reports whether job matches the job search of the agent's page.
function ofJob(job) {
  return ex.armedQuery === "" || job.toLowerCase().includes(ex.armedQuery.toLowerCase());
}

// refreshAgent reads and renders the page of agent id.
async function refreshAgent(id) {
  const [a, armed, dead] = await Promise.all([
    getJSON("/api/operator/agents/" + encodeURIComponent(id)),
    getJSON(armedPath(id)),
    getJSON("/api/operator/dlq?limit=100&agent_id=" + encodeURIComponent(id)),
  ]);
  const s = a.agent;
  $("agent-title").textContent = s.agent_id;
  $("agent-actions").replaceChildren(...agentButton(s.agent_id, s.flow).childNodes);
  $("agent-armed").textContent = String(s.armed);
  $("agent-state").replaceChildren(document.createTextNode(stateCell(s).textContent));
  $("agent-last").textContent = s.last_delivery ? lastCell(s.last_delivery).textContent : "none kept";
  $("agent-flow").textContent = s.flow.in_flight + " in flight, " + s.flow.held + " held, parallelism " + s.flow.parallelism +
    ", rate " + (s.flow.rate > 0 ? s.flow.rate + "/s" : "unlimited");
  fill($("agent-armed-list"), armed.armed.map((f) => [jobCell(f.job_id), cell(when(f.fire_at)),
    cell(f.attempt > 0 ? "retry " + f.attempt + (f.last_error ? ": " + f.last_error : "") : (f.direct ? "direct" : "mediated"), f.last_error ? "reason" : ""),
    cell(f.instance_id, "mono")]),
  ex.armedQuery ? "No armed job matches." : "The agent holds no armed fire.", 4);
  $("agent-armed-list").querySelectorAll("tr").forEach((tr, i) => {
    if (armed.armed[i]) tr.dataset.test = "armed-fire";
  });
  pager("armed", armed, ex.armedCursors);
  const recent = a.recent.filter((d) => ofJob(d.job_id));
  fill($("agent-recent"), recent.map((d) => [cell(when(d.at)), jobCell(d.job_id), cell(d.outcome, "outcome-" + d.outcome),
    cell(String(d.attempt), "num"), cell(seconds(d.lag_seconds), "num"), cell(d.reason || "", d.reason ? "reason" : "")]),
  ex.armedQuery ? "No delivery of a matching job kept." : "No delivery kept (the last 25 hours).", 6);
  $("agent-recent").querySelectorAll("tr").forEach((tr, i) => {
    if (recent[i]) tr.dataset.test = "recent-delivery";
  });
  const deadOf = dead.entries.filter((e) => ofJob(e.job_id));
  fill($("agent-dead"), deadOf.map((e) => {
    const btn = document.createElement("button");
    btn.type = "button";
    btn.textContent = "Replay";
    btn.dataset.test = "agent-replay";
    btn.addEventListener("click", () => replay(btn, e.schedule_id));
    const act = document.createElement("td");
    act.appendChild(btn);
    return [jobCell(e.job_id), cell(when(e.fire_at)), cell(when(e.failed_at)), cell(e.reason, "reason"),
      cell(String(e.attempts), "num"), act];
  }), ex.armedQuery ? "No dead letter of a matching job." : "No dead letter.", 6);
  $("agent-dead").querySelectorAll("tr").forEach((tr, i) => {
    if (deadOf[i]) tr.dataset.test = "agent-dead-entry";
  });
}

// route shows the page the location's hash names: #agent/ID, else the
// overview.
function route() {
  const m = location.hash.match(/^#agent\/(.+)$/);
  const id = m ? decodeURIComponent(m[1]) : null;
  if (id !== ex.agent) {
    ex.agent = id;
    ex.armedQuery = "";
    ex.armedCursors = [""];
    $("armed-search").value = "";
  }
  $("agent-view").hidden = id === null;
  $("overview-view").hidden = id !== null;
  window.scrollTo(0, 0);
}

function debounce(f, ms) {
  let t = null;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => f(...args), ms);
  };
}

document.addEventListener("DOMContentLoaded", () => {
  route();
  window.addEventListener("hashchange", () => {
    route();
    refresh();
  });
  document.querySelectorAll("[data-window]").forEach((b) => b.addEventListener("click", () => {
    ex.window = b.dataset.window;
    refresh();
  }));
  $("agent-search").addEventListener("input", debounce(() => {
    ex.agentQuery = $("agent-search").value.trim();
    ex.agentCursors = [""];
    refresh();
  }, 250));
  $("armed-search").addEventListener("input", debounce(() => {
    ex.armedQuery = $("armed-search").value.trim();
    ex.armedCursors = [""];
    refresh();
  }, 250));
  for (const [name, cursors] of [["agents", () => ex.agentCursors], ["armed", () => ex.armedCursors]]) {
    $(name + "-next").addEventListener("click", () => {
      cursors().push($(name + "-next").dataset.cursor);
      refresh();
    });
    $(name + "-prev").addEventListener("click", () => {
      if (cursors().length > 1) cursors().pop();
      refresh();
    });
  }
});
