// Chronos agent dashboard: reads the local API, follows /api/events and
// sends changes with the session cookie and the X-Chronos-UI header.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = { jobs: new Map(), auth: false, readsOpen: false, view: "jobs", jobId: null, openRun: null, openChain: null,
  // The job page's runs: the cursors of the pages seen (cursors[page] fetches page), the state
  // filter, the page size, and the fanout parents shown expanded.
  runs: { cursors: [""], page: 0, next: "", status: "", size: 20, expanded: new Set() } };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function say(text, bad) {
  const m = $("#message");
  m.textContent = text;
  m.className = bad ? "bad" : "";
}

async function api(method, path, body) {
  const opts = { method, credentials: "same-origin", headers: { "X-Chronos-UI": "1" } };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(path, opts);
  if (res.status === 204) return null;
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    if (res.status === 401) showAuth(false);
    const err = new Error(data.error_description || data.error || res.statusText);
    err.status = res.status;
    throw err;
  }
  return data;
}

// browserZone is the zone of this browser, for times of jobs that name none.
const browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
const zoneFormats = new Map();

// time formats t in zone (an IANA name; the browser's when empty) as
// "2026-06-02 09:00:00 Europe/Paris": every time shown says its zone.
function time(t, zone) {
  if (!t) return "-";
  const d = new Date(t);
  if (isNaN(d)) return t;
  zone = zone || browserZone;
  let f = zoneFormats.get(zone);
  if (!f) {
    try {
      f = new Intl.DateTimeFormat("en-CA", { timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit",
        hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
    } catch (e) {
      return time(t, "UTC");
    }
    zoneFormats.set(zone, f);
  }
  const p = Object.fromEntries(f.formatToParts(d).map((x) => [x.type, x.value]));
  return p.year + "-" + p.month + "-" + p.day + " " + p.hour + ":" + p.minute + ":" + p.second + " " + zone;
}

// jobZone is the zone a job's times are shown in: its own, else the browser's.
function jobZone(id) {
  const j = state.jobs.get(id);
  return (j && j.timezone) || "";
}

function badge(status, reason) {
  if (!status) return el("span", { class: "reason", text: "-" });
  return el("span", { class: "st st-" + status, title: reason || status, text: status });
}

function kindOf(j) { return j.job_kind || "plain"; }

// terminal reports whether a run state ends the run.
function terminal(st) { return st && st !== "claimed" && st !== "running"; }

// Auth -----------------------------------------------------------------

function showAuth(auth) {
  state.auth = auth;
  // Every read needs the token too: without a session nothing is shown.
  $("#auth-state").textContent = auth ? "authenticated" : "locked";
  $("#logout").hidden = !auth;
  $("#login").hidden = auth;
  document.querySelectorAll("[data-mutates]").forEach((b) => { b.disabled = !auth; });
}

async function checkSession() {
  const s = await api("GET", "/api/session");
  state.readsOpen = s.reads_open;
  showAuth(s.authenticated);
  return s;
}

$("#login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("#login-error").textContent = "";
  try {
    await api("POST", "/api/login", { token: $("#login-token").value.trim() });
    $("#login-token").value = "";
    showAuth(true);
    say("Logged in.");
    await loadAll();
    startStream();
  } catch (e) {
    // A refused token is wiped, so the next attempt starts from an empty field.
    $("#login-token").value = "";
    $("#login-error").textContent = e.message;
  }
});

$("#logout").addEventListener("click", async () => {
  await api("POST", "/api/logout").catch(() => {});
  showAuth(false);
  if (stream) { stream.close(); stream = null; }
  $("#stream-state").textContent = "off";
  state.jobs.clear();
  renderJobs();
  say("Logged out: log in with the admin token to see the jobs and runs again.");
});

// Jobs -----------------------------------------------------------------

async function act(what, fn) {
  try {
    const out = await fn();
    say(what);
    return out;
  } catch (e) {
    say(what.replace(/\.$/, "") + " failed: " + e.message, true);
    return null;
  }
}

function showJob(j) {
  if (j) { state.jobs.set(j.id, j); renderJobs(); }
}
// pauseJob pauses id with the reason of the job page's field.
function pauseJob(id) {
  pauseWith(id, $("#pause-reason").value.trim());
}
function pauseWith(id, reason) {
  act("Paused " + id + ".", () => api("POST", "/api/jobs/" + encodeURIComponent(id) + "/pause", { reason })).then(showJob);
}
// rowPause asks for the reason in the job's row of the jobs table, where
// its Pause was pressed, and pauses on the second button.
function rowPause(id, button) {
  const cell = button.closest("td");
  if (cell.querySelector('[data-test="row-pause-reason"]')) return;
  const input = el("input", { "data-test": "row-pause-reason", placeholder: "reason (optional)", "aria-label": "Reason for pausing " + id });
  const box = el("div", { class: "row-pause" }, input,
    el("button", { type: "button", "data-test": "row-pause-confirm", "data-mutates": true, onclick: () => { box.remove(); pauseWith(id, input.value.trim()); }, text: "Pause " + id }),
    el("button", { type: "button", onclick: () => box.remove(), text: "Cancel" }));
  cell.append(box);
  input.focus();
}
function resumeJob(id) {
  act("Resumed " + id + ".", () => api("POST", "/api/jobs/" + encodeURIComponent(id) + "/resume")).then(showJob);
}
function runJob(id) {
  act("Started a run of " + id + ".", () => api("POST", "/api/jobs/" + encodeURIComponent(id) + "/run", { force: false, wait: false }))
    .then((r) => { if (r && r.skipped) say("Run of " + id + " was not started: " + (r.reason || "skipped"), true); });
}
// removeJob asks for a second press (within 5 s) of the same button.
function removeJob(id, button) {
  if (button && button.dataset.confirm !== "yes") {
    button.dataset.confirm = "yes";
    const label = button.textContent;
    button.textContent = "Press again to remove";
    setTimeout(() => { button.dataset.confirm = ""; button.textContent = label; }, 5000);
    return;
  }
  act("Removed " + id + ".", () => api("DELETE", "/api/jobs/" + encodeURIComponent(id))).then(() => {
    if (state.view === "job" && state.jobId === id) location.hash = "#/jobs";
  });
}

function jobButtons(j, prefix) {
  const b = (name, label, fn, hide, cls) => el("button", { type: "button", "data-test": prefix + name, "data-mutates": true,
    class: cls, disabled: !state.auth, hidden: hide, onclick: (ev) => fn(j.id, ev.currentTarget), text: label });
  return [
    b("run", "Run now", runJob, false),
    b("pause", "Pause", rowPause, j.state === "paused" || j.state === "finished"),
    b("resume", "Resume", resumeJob, j.state !== "paused"),
    b("remove", "Remove", removeJob, false, "danger"),
  ];
}

function jobRow(j) {
  const next = j.next_fires && j.next_fires.length ? time(j.next_fires[0], j.timezone) : (j.state === "paused" ? "paused" : "-");
  return el("tr", { "data-test": "job-row", "data-job-id": j.id },
    el("td", {}, el("a", { href: "#/jobs/" + encodeURIComponent(j.id), "data-test": "job-link", text: j.id }),
      j.name ? el("div", { class: "reason", text: j.name }) : null),
    el("td", { "data-test": "job-kind" }, el("span", { class: "kind kind-" + kindOf(j), text: kindOf(j) })),
    el("td", {}, el("code", { text: j.schedule }), el("div", { class: "reason", "data-test": "job-describe", text: j.describe || "" })),
    el("td", { "data-test": "job-next", text: next }),
    el("td", {}, el("span", { class: "state-" + j.state, "data-test": "job-state", text: j.state }),
      j.paused_reason ? el("div", { class: "reason", text: j.paused_reason }) : null),
    el("td", { "data-test": "job-last-status" }, badge(j.last_status, j.last_error),
      j.last_error ? el("div", { class: "reason", text: j.last_error }) : null),
    el("td", { class: "actions" }, ...jobButtons(j, "job-")));
}

function renderJobs() {
  const body = $("#jobs-table tbody");
  body.replaceChildren(...[...state.jobs.values()].sort((a, b) => a.id.localeCompare(b.id)).map(jobRow));
  $("#no-jobs").hidden = state.jobs.size > 0;
  if (state.view === "job") renderJobPage();
}

async function loadAll() {
  try {
    const list = await api("GET", "/api/jobs");
    state.jobs = new Map(list.jobs.map((j) => [j.id, j]));
    renderJobs();
  } catch (e) {
    say("Cannot read the jobs: " + e.message, true);
  }
}

// Job page -------------------------------------------------------------

function renderJobPage() {
  const j = state.jobs.get(state.jobId);
  $("#view-job").setAttribute("data-job-id", state.jobId || "");
  if (!j) {
    $("#job-title").textContent = "Job " + state.jobId + " (not found or removed)";
    $("#job-details").replaceChildren();
    return;
  }
  $("#job-title").textContent = "Job " + j.id + (j.name ? " — " + j.name : "");
  const rows = [["schedule", j.schedule + " (" + j.kind + ")"], ["understood as", j.describe || "-"],
    ["time zone", j.timezone || "agent default (times shown in " + browserZone + ")"], ["state", j.state + (j.paused_reason ? " (" + j.paused_reason + ")" : "")],
    ["next fires", (j.next_fires || []).map((t) => time(t, j.timezone)).join(", ") || "-"], ["last run", time(j.last_run_at, j.timezone)],
    ["last status", (j.last_status || "-") + (j.last_error ? ": " + j.last_error : "")],
    ["payload", j.payload && j.payload.shell ? (j.payload.shell.command || (j.payload.shell.argv || []).join(" ")) : (j.payload && j.payload.http ? j.payload.http.url : "-")],
    ["policies", "misfire " + j.misfire + ", overlap " + j.overlap + ", window " + j.window + ", on interrupt " + j.on_interrupt],
    ["job kind", kindOf(j)]];
  if (j.flex) rows.push(["flex", j.flex + ": each slot's fire may come up to " + j.flex + " after it"]);
  if (j.workflow) {
    const w = j.workflow;
    rows.push(["workflow", "window " + (w.window || "-") + ", on missing " + (w.on_missing || "skip") + ", on dep fail " + (w.on_dep_fail || "skip")]);
  }
  if (j.fanout) {
    const f = j.fanout;
    rows.push(["fanout", "inputs from " + f.inputs_from + ", concurrency " + (f.concurrency || 1) +
      (f.per_item_timeout ? ", per item timeout " + f.per_item_timeout : "") + ", partial tolerance " + (f.partial_tolerance || 0) +
      ", item variable " + (f.item_var || "FANOUT_ITEM")]);
    if (f.reducer) rows.push(["reducer", f.reducer.command + " (runs on " + (f.reducer.run_on || "success") + ")"]);
  }
  $("#job-details").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
  renderDeps(j);
  $("#job-page-pause").hidden = j.state === "paused" || j.state === "finished";
  $("#pause-line").hidden = $("#job-page-pause").hidden;
  $("#job-page-resume").hidden = j.state !== "paused";
}

// renderDeps shows a workflow's depends_on, a status dot per dependency.
function renderDeps(j) {
  const deps = j.workflow ? (j.dependencies || j.workflow.depends_on.map((id) => ({ job_id: id, state: "missing" }))) : [];
  $("#job-deps-box").hidden = !j.workflow;
  $("#job-deps").replaceChildren(...deps.map((d) => el("li", { "data-test": "dep", "data-dep-id": d.job_id, "data-state": d.state },
    el("span", { class: "dot dot-" + d.state, "data-test": "dep-dot", title: d.state, "aria-label": d.state }),
    el("a", { href: "#/jobs/" + encodeURIComponent(d.job_id), text: d.job_id }),
    el("span", { class: "reason", text: d.state === "missing" ? "no finished run in the window" : d.state + (d.run_id ? " (" + d.run_id + ")" : "") }))));
}

function result(r) {
  return r.duration_ms != null ? (r.exit_code ? "exit " + r.exit_code : "ok") + " in " + r.duration_ms + " ms" : "-";
}

function runActions(r) {
  return el("td", { class: "actions" },
    el("button", { type: "button", "data-test": "run-open", "aria-expanded": state.openRun === r.run_id ? "true" : "false",
      onclick: () => (state.openRun === r.run_id ? closeRun() : openRun(r.run_id)), text: state.openRun === r.run_id ? "Hide output" : "Output" }),
    r.live ? el("button", { type: "button", "data-test": "run-cancel", "data-mutates": true, disabled: !state.auth, class: "danger",
      onclick: () => cancelRun(r.run_id), text: "Cancel" }) : null);
}

function runRow(r) {
  const zone = jobZone(r.job_id);
  const parent = r.role === "parent";
  const open = state.runs.expanded.has(r.run_id);
  return el("tr", { "data-test": "run-row", "data-run-id": r.run_id, "data-state": r.state, "data-role": r.role },
    el("td", { class: "mono", text: r.run_id }, parent ? el("div", {},
      el("button", { type: "button", class: "link", "data-test": "run-expand", "data-expanded": open ? "true" : "false", "aria-expanded": open ? "true" : "false",
        onclick: () => toggleChildren(r.run_id), text: (open ? "\u25be" : "\u25b8") + " fanout: " + (open ? "hide" : "show") + " items" })) : null),
    el("td", { text: r.trigger || "-" }),
    el("td", { "data-test": "run-slot", text: time(r.slot, zone) }),
    el("td", { "data-test": "run-state" }, badge(r.state, r.reason)),
    el("td", { text: result(r) }),
    el("td", { class: "reason", "data-test": "run-reason", text: r.reason || r.error || "" }),
    runActions(r));
}

// childRow is a fanout child or reducer, nested under its parent's row.
function childRow(r) {
  const label = r.role === "reducer" ? "reducer" : "item";
  return el("tr", { "data-test": "run-child", class: "child child-" + r.role, "data-run-id": r.run_id, "data-parent-run-id": r.parent_run_id,
    "data-role": r.role, "data-item": r.item || "", "data-state": r.state },
    el("td", { class: "nest" }, el("span", { class: "reason", text: "\u21b3 " + label + " " }),
      r.role === "reducer" ? null : el("code", { "data-test": "run-item", text: r.item })),
    el("td", { class: "mono reason", text: r.run_id }),
    el("td", { text: r.role }),
    el("td", { "data-test": "run-state" }, badge(r.state, r.reason)),
    el("td", { text: result(r) }),
    el("td", { class: "reason", "data-test": "run-reason", text: r.reason || r.error || "" }),
    runActions(r));
}

let runsSeq = 0;
let runsTimer = null;

// scheduleRuns reloads the job page's runs soon, once for a burst of lines.
function scheduleRuns() {
  if (runsTimer) return;
  runsTimer = setTimeout(() => { runsTimer = null; loadRuns(); }, 150);
}

// resetRuns goes back to the first page of the job's runs.
function resetRuns() {
  Object.assign(state.runs, { cursors: [""], page: 0, next: "", expanded: new Set() });
  state.openRun = null;
}

function runsQuery(limit, cursor, status) {
  let q = "/api/runs?top_level=true&limit=" + limit + "&job_id=" + encodeURIComponent(state.jobId);
  if (status) q += "&status=" + encodeURIComponent(status);
  if (cursor) q += "&cursor=" + encodeURIComponent(cursor);
  return q;
}

// loadRuns shows one page of the job's runs (newest first, whole runs:
// a fanout's children are fetched when its row is expanded), the open
// run's output under its row, and the chart of recent runs.
async function loadRuns() {
  if (!state.jobId) return;
  const seq = ++runsSeq;
  const rs = state.runs;
  try {
    const [list, recent] = await Promise.all([
      api("GET", runsQuery(rs.size, rs.cursors[rs.page], rs.status)),
      api("GET", runsQuery(chartRuns, "", "")),
    ]);
    const expanded = [...rs.expanded].filter((id) => list.runs.some((r) => r.run_id === id));
    const kids = new Map(await Promise.all(expanded.map(async (id) => {
      const g = await api("GET", "/api/runs/" + encodeURIComponent(id) + "/children").catch(() => ({ children: [] }));
      return [id, g.children];
    })));
    let detail = null;
    if (state.openRun) detail = await api("GET", "/api/runs/" + encodeURIComponent(state.openRun)).catch((e) => ({ fetchError: e.message }));
    if (seq !== runsSeq) return;
    rs.next = list.next_cursor || "";
    const rows = [];
    const add = (row, r) => {
      rows.push(row);
      if (detail && r.run_id === state.openRun) rows.push(outputRow(r.run_id, detail));
    };
    for (const r of list.runs) {
      add(runRow(r), r);
      for (const c of kids.get(r.run_id) || []) add(childRow(c), c);
    }
    $("#runs-table tbody").replaceChildren(...rows);
    $("#no-runs").hidden = list.runs.length > 0;
    $("#runs-page").textContent = "page " + (rs.page + 1) + (rs.status ? ", " + rs.status + " only" : "");
    $("#runs-newer").disabled = rs.page === 0;
    $("#runs-older").disabled = !rs.next;
    drawChart(recent.runs);
  } catch (e) {
    say("Cannot read the runs: " + e.message, true);
  }
}

function toggleChildren(id) {
  if (state.runs.expanded.has(id)) state.runs.expanded.delete(id);
  else state.runs.expanded.add(id);
  loadRuns();
}

// outputRow is the row right under run id: its output, standard output and
// standard error side by side when the agent kept them apart.
function outputRow(id, r) {
  const zone = jobZone(r.job_id || state.jobId);
  const title = "Output of " + id + (r.state ? " (" + r.state + (r.last_at ? ", " + time(r.last_at, zone) : "") + ")" : "") +
    (r.output_truncated ? ", last part only" : "");
  let body;
  if (r.fetchError) {
    body = el("p", { class: "error", text: "Cannot read run " + id + ": " + r.fetchError });
  } else if (r.streams_apart) {
    body = el("div", { class: "streams" },
      el("div", {}, el("h4", { text: "stdout" }), el("pre", { "data-test": "run-stdout", text: r.stdout_text || "(nothing)" })),
      el("div", {}, el("h4", { text: "stderr" }), el("pre", { "data-test": "run-stderr", class: "stderr", text: r.stderr_text || "(nothing)" })));
  } else {
    body = el("div", {}, el("h4", { text: (r.output_text ? "stdout and stderr together (recorded as one stream)" : "") }),
      el("pre", { "data-test": "run-combined", text: r.output_text || r.output_error || "(no output)" }));
  }
  return el("tr", { "data-test": "run-output-row", class: "output-row", "data-run-id": id },
    el("td", { colspan: 7 }, el("div", { "data-test": "run-output", class: "output-panel" },
      el("div", { class: "output-head" }, el("strong", { text: title }),
        el("button", { type: "button", "data-test": "run-output-close", onclick: closeRun, text: "Close" })), body)));
}

async function openRun(id) {
  state.openRun = id;
  await loadRuns();
  const row = document.querySelector('[data-test="run-output-row"][data-run-id="' + CSS.escape(id) + '"]');
  if (row) row.scrollIntoView({ block: "nearest" });
}

function closeRun() {
  state.openRun = null;
  loadRuns();
}

// The chart: the job's last chartRuns runs, oldest left, a bar each, its
// height the duration and its colour the outcome. Drawn here as SVG.
const chartRuns = 50;
const chartColours = { succeeded: "#2e9b4f", failed: "#c8372b", partial: "#8bb23a", running: "#3b7bd8", claimed: "#3b7bd8",
  interrupted: "#e0892f", cancelled: "#59626b", skipped: "#b8c0c8", missed: "#d9a21b", duplicate: "#8a63c4" };

function drawChart(runs) {
  const svg = $("#runs-chart");
  const ns = svg.namespaceURI; // the SVG namespace, from the element in the page
  const mk = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text) e.textContent = text;
    return e;
  };
  const zone = jobZone(state.jobId);
  const list = runs.slice().reverse();
  const W = 600, H = 120, top = 8, bottom = 18, left = 44;
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  const maxMs = Math.max(1, ...list.map((r) => r.duration_ms || 0));
  const slot = (W - left) / Math.max(list.length, 10);
  const kids = [mk("line", { x1: left, y1: H - bottom, x2: W, y2: H - bottom, class: "axis" }),
    mk("text", { x: left - 4, y: top + 8, "text-anchor": "end", class: "tick" }, fmtMs(maxMs)),
    mk("text", { x: left - 4, y: H - bottom, "text-anchor": "end", class: "tick" }, "0")];
  list.forEach((r, i) => {
    const ms = r.duration_ms || 0;
    const h = Math.max(2, (H - top - bottom) * ms / maxMs);
    const bar = mk("rect", { x: left + i * slot + 1, y: H - bottom - h, width: Math.max(2, slot - 2), height: h,
      fill: chartColours[r.state] || "#9aa4ae", "data-test": "chart-bar", "data-run-id": r.run_id, "data-state": r.state });
    bar.append(mk("title", {}, r.run_id + ": " + r.state + ", " + (r.duration_ms != null ? fmtMs(ms) : "no duration") + ", " + time(r.first_at || r.slot, zone)));
    bar.addEventListener("click", () => openRun(r.run_id));
    kids.push(bar);
  });
  svg.replaceChildren(...kids);
  const counts = {};
  for (const r of list) counts[r.state] = (counts[r.state] || 0) + 1;
  $("#runs-chart-caption").textContent = list.length
    ? "The last " + list.length + " runs, oldest left: bar height is the duration (longest " + fmtMs(maxMs) + "), colour the outcome — " +
      Object.entries(counts).map(([k, v]) => v + " " + k).join(", ") + (list.length ? ". From " + time(list[0].first_at || list[0].slot, zone) + "." : "")
    : "No runs yet.";
}

function fmtMs(ms) {
  return ms >= 60000 ? (ms / 60000).toFixed(1) + " min" : ms >= 1000 ? (ms / 1000).toFixed(1) + " s" : ms + " ms";
}

function cancelRun(id) {
  act("Cancelling run " + id + ".", () => api("POST", "/api/runs/" + encodeURIComponent(id) + "/cancel", {}));
}

$("#runs-filter").addEventListener("change", (ev) => { state.runs.status = ev.target.value; resetRuns(); loadRuns(); });
$("#runs-page-size").addEventListener("change", (ev) => { state.runs.size = Number(ev.target.value); resetRuns(); loadRuns(); });
$("#runs-older").addEventListener("click", () => {
  const rs = state.runs;
  if (!rs.next) return;
  rs.cursors[rs.page + 1] = rs.next;
  rs.page++;
  loadRuns();
});
$("#runs-newer").addEventListener("click", () => {
  if (state.runs.page === 0) return;
  state.runs.page--;
  loadRuns();
});

for (const [name, fn] of [["run", runJob], ["pause", pauseJob], ["resume", resumeJob], ["remove", removeJob]]) {
  const b = $("#job-page-" + name);
  b.setAttribute("data-mutates", "");
  b.addEventListener("click", (ev) => fn(state.jobId, ev.currentTarget));
}

// Add a job ------------------------------------------------------------

$("#add-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("#add-error").textContent = "";
  const v = (id) => $(id).value.trim();
  const spec = { schedule: v("#add-schedule"), payload: { kind: "shell", shell: { command: v("#add-command") } } };
  if (v("#add-id")) spec.id = v("#add-id");
  if (v("#add-name")) spec.name = v("#add-name");
  if (v("#add-tz")) spec.timezone = v("#add-tz");
  if (v("#add-overlap")) spec.overlap = v("#add-overlap");
  if ($("#add-paused").checked) { spec.paused = true; spec.paused_reason = "created paused"; }
  try {
    const j = await api("POST", "/api/jobs", spec);
    state.jobs.set(j.id, j);
    $("#add-form").reset();
    say("Added job " + j.id + ": " + (j.describe || j.schedule) + ".");
    location.hash = "#/jobs/" + encodeURIComponent(j.id);
  } catch (e) {
    $("#add-error").textContent = e.message;
  }
});
$("[data-test=add-submit]").setAttribute("data-mutates", "");

// Live runs: the event stream ---------------------------------------------

const liveMax = 200;

function liveItem(e) {
  return el("li", { "data-test": "live-item", "data-run-id": e.run_id, "data-state": e.state, "data-role": e.role },
    el("span", { class: "reason", text: time(e.time, jobZone(e.job_id)) }),
    el("a", { href: "#/jobs/" + encodeURIComponent(e.job_id), text: e.job_id }),
    el("span", { class: "mono", text: e.run_id }),
    badge(e.state, e.reason),
    e.role === "child" ? el("span", { class: "reason", text: "item " }, el("code", { text: e.item })) : null,
    e.role === "reducer" ? el("span", { class: "reason", text: "reducer" }) : null,
    el("span", { class: "reason", text: [e.trigger, e.reason || e.error].filter(Boolean).join(" · ") }));
}

function liveChain(e) {
  const c = e.chain || {};
  return el("li", { "data-test": "live-chain", "data-chain-id": c.id || e.job_id, "data-event": e.state },
    el("span", { class: "reason", text: time(e.time) }),
    el("a", { href: "#/chains", text: "chain " + (c.id || e.job_id) }),
    el("span", { class: "st st-chain", text: e.state }),
    c.step ? el("span", { class: "mono reason", text: c.step }) : null,
    el("span", { class: "reason", text: e.reason || "" }));
}

function onRunLine(e) {
  const list = $("#live-list");
  const old = list.querySelector('[data-test="live-item"][data-run-id="' + CSS.escape(e.run_id) + '"]');
  if (old) old.remove();
  list.prepend(liveItem(e));
  while (list.children.length > liveMax) list.lastChild.remove();
  if (state.view !== "job") return;
  if (state.jobId === e.job_id) scheduleRuns();
  // A dependency's run ended: the workflow's dots change.
  const j = state.jobs.get(state.jobId);
  if (j && j.workflow && terminal(e.state) && !e.parent_run_id && j.workflow.depends_on.includes(e.job_id)) {
    api("GET", "/api/jobs/" + encodeURIComponent(j.id)).then(showJob).catch(() => {});
  }
}

function onChainLine(e) {
  const list = $("#live-list");
  list.prepend(liveChain(e));
  while (list.children.length > liveMax) list.lastChild.remove();
  if (state.view === "chains") scheduleChains();
}

// Chains -------------------------------------------------------------------

let chainsTimer = null;
function scheduleChains() {
  if (chainsTimer) return;
  chainsTimer = setTimeout(() => { chainsTimer = null; loadChains(); }, 150);
}

function chainStepItem(st) {
  return el("li", { "data-test": "chain-step", "data-step-id": st.job_id, "data-status": st.status },
    el("span", { class: "mono", text: st.stage + " · depth " + st.depth + " · attempt " + st.attempt }), " ",
    badge(st.status, st.reason),
    st.reason ? el("span", { class: "reason", text: " " + st.reason }) : null);
}

function chainRow(c) {
  const until = c.closed_at ? "closed " + time(c.closed_at) : "expires " + time(c.expires_at);
  const reason = c.closed_reason ? (c.outcome ? c.outcome + ": " : "") + c.closed_reason : (c.cooling_until ? "cooling down until " + time(c.cooling_until) : "");
  return el("tr", { "data-test": "chain-row", "data-chain-id": c.id, "data-state": c.state },
    el("td", {}, el("span", { class: "mono", text: c.id }), el("div", { class: "reason", text: "class " + c.class }),
      el("ol", { class: "steps" }, ...(c.steps || []).map(chainStepItem))),
    el("td", { "data-test": "chain-state" }, el("span", { class: "cs cs-" + c.state, text: c.state })),
    el("td", { text: c.children + "/" + c.limits.max_children + " steps, depth " + c.depth_reached + "/" + c.limits.max_depth }),
    el("td", { text: until }),
    el("td", { class: "reason", "data-test": "chain-reason", text: reason }),
    el("td", { class: "actions" }, el("button", { type: "button", "data-test": "chain-open", onclick: () => openChain(c.id), text: "Story" })));
}

function breakerRow(b) {
  const open = b.state === "open";
  return el("tr", { "data-test": "breaker-row", "data-class": b.class, "data-state": b.state },
    el("td", { class: "mono", text: b.class }),
    el("td", {}, el("span", { class: "cs cs-breaker-" + b.state, text: b.state })),
    el("td", { "data-test": "breaker-resume", text: open && b.resume_at ? time(b.resume_at) : "-" }),
    el("td", { class: "reason", text: (b.reason || "") + (b.last_run_ids && b.last_run_ids.length ? " · last runs " + b.last_run_ids.join(", ") : "") }),
    el("td", { text: String(b.openings) }),
    el("td", { class: "actions" }, open ? el("button", { type: "button", "data-test": "breaker-reset", "data-mutates": true, disabled: !state.auth,
      onclick: () => resetBreaker(b.class), text: "Reset" }) : null));
}

async function loadChains() {
  try {
    const [cl, bl] = await Promise.all([api("GET", "/api/chains"), api("GET", "/api/chain-breakers")]);
    $("#chains-table tbody").replaceChildren(...cl.chains.map(chainRow));
    $("#no-chains").hidden = cl.chains.length > 0;
    $("#breakers-table tbody").replaceChildren(...bl.breakers.map(breakerRow));
    $("#no-breakers").hidden = bl.breakers.length > 0;
    if (state.openChain) openChain(state.openChain);
  } catch (e) {
    say("Cannot read the chains: " + e.message, true);
  }
}

async function openChain(id) {
  state.openChain = id;
  try {
    const c = await api("GET", "/api/chains/" + encodeURIComponent(id));
    const box = $("#chain-story");
    box.hidden = false;
    const byParent = new Map();
    for (const st of c.steps) {
      const k = st.spawned_by || "";
      if (!byParent.has(k)) byParent.set(k, []);
      byParent.get(k).push(st);
    }
    const tree = (parent) => el("ul", { class: "tree" }, ...(byParent.get(parent) || []).map((st) => el("li", { "data-test": "story-step", "data-step-id": st.job_id, "data-status": st.status },
      el("span", { class: "mono", text: st.job_id }), " ", badge(st.status, st.reason),
      el("div", { class: "reason", text: "fire " + time(st.fire_at) + (st.run ? " · run " + st.run.run_id + " " + st.run.state + " (" + result(st.run) + ")" : "") + (st.reason ? " · " + st.reason : "") }),
      st.run ? el("button", { type: "button", "data-test": "story-run-open", onclick: () => showStepOutput(st.run.run_id), text: "Output" }) : null,
      byParent.has(st.job_id) ? tree(st.job_id) : null)));
    box.replaceChildren(
      el("h3", { text: "Chain " + c.id + " (class " + c.class + "): " + c.state }),
      el("p", { class: "reason", text: "created " + time(c.created_at) + ", expires " + time(c.expires_at) + (c.closed_reason ? ", closed: " + c.closed_reason : "") }),
      el("h4", { text: "Transitions" }),
      el("ol", { class: "transitions" }, ...c.transitions.map((tr) => el("li", { "data-test": "chain-transition" },
        el("span", { class: "reason", text: time(tr.at) + " " }), el("code", { text: tr.from + " \u2192 " + tr.to }), el("span", { class: "reason", text: " " + tr.trigger })))),
      el("h4", { text: "Steps" }), tree(""),
      el("pre", { id: "chain-output", "data-test": "chain-output", hidden: true }));
  } catch (e) {
    say("Cannot read chain " + id + ": " + e.message, true);
  }
}

async function showStepOutput(runId) {
  try {
    const r = await api("GET", "/api/runs/" + encodeURIComponent(runId));
    const out = $("#chain-output");
    out.hidden = false;
    out.textContent = r.output_text || r.output_error || "(no output)";
  } catch (e) {
    say("Cannot read run " + runId + ": " + e.message, true);
  }
}

function resetBreaker(cls) {
  act("Reset the breaker of " + cls + ".", () => api("POST", "/api/chain-breakers/" + encodeURIComponent(cls) + "/reset")).then(loadChains);
}

let stream = null;
function startStream() {
  if (stream) stream.close();
  stream = new EventSource("/api/events");
  const st = $("#stream-state");
  stream.onopen = () => { st.textContent = "live"; };
  stream.onerror = () => { st.textContent = "reconnecting"; };
  stream.addEventListener("run", (m) => onRunLine(JSON.parse(m.data)));
  stream.addEventListener("chain", (m) => onChainLine(JSON.parse(m.data)));
  stream.addEventListener("job", (m) => { const j = JSON.parse(m.data); state.jobs.set(j.id, j); renderJobs(); });
  stream.addEventListener("job_removed", (m) => { state.jobs.delete(JSON.parse(m.data).id); renderJobs(); });
  stream.addEventListener("reset", () => { loadAll(); loadRuns(); if (state.view === "chains") loadChains(); });
}

// Views ------------------------------------------------------------------

function route() {
  const h = location.hash || "#/jobs";
  const m = h.match(/^#\/jobs\/(.+)$/);
  state.view = m ? "job" : h === "#/live" ? "live" : h === "#/add" ? "add" : h === "#/chains" ? "chains" : "jobs";
  state.jobId = m ? decodeURIComponent(m[1]) : null;
  $("#view-jobs").hidden = state.view !== "jobs";
  $("#view-job").hidden = state.view !== "job";
  $("#view-live").hidden = state.view !== "live";
  $("#view-add").hidden = state.view !== "add";
  $("#view-chains").hidden = state.view !== "chains";
  if (state.view === "chains") loadChains();
  if (state.view === "job") {
    resetRuns();
    renderJobPage();
    loadRuns();
  }
}
window.addEventListener("hashchange", route);

(async function main() {
  try {
    const s = await checkSession();
    route();
    if (s.reads_open || s.authenticated) {
      await loadAll();
      startStream();
    } else {
      $("#stream-state").textContent = "off";
      say("Log in with the agent's admin token (the file ui-token in its home, or ui_token_file) to see its jobs and runs.");
    }
  } catch (e) {
    say("The agent does not answer: " + e.message, true);
  }
})();
