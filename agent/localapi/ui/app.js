// Chronos agent dashboard: reads the local API, follows /api/events and
// sends changes with the session cookie and the X-Chronos-UI header.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = { jobs: new Map(), auth: false, readsOpen: true, view: "jobs", jobId: null, openRun: null };

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

function time(t) {
  if (!t) return "-";
  const d = new Date(t);
  return isNaN(d) ? t : d.toLocaleString();
}

function badge(status, reason) {
  if (!status) return el("span", { class: "reason", text: "-" });
  return el("span", { class: "st st-" + status, title: reason || status, text: status });
}

// Auth -----------------------------------------------------------------

function showAuth(auth) {
  state.auth = auth;
  $("#auth-state").textContent = auth ? "authenticated" : "read-only";
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
    $("#login-error").textContent = e.message;
  }
});

$("#logout").addEventListener("click", async () => {
  await api("POST", "/api/logout").catch(() => {});
  showAuth(false);
  say("Logged out: changes need the token again.");
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
function pauseJob(id) {
  const reason = $("#pause-reason").value.trim();
  act("Paused " + id + ".", () => api("POST", "/api/jobs/" + encodeURIComponent(id) + "/pause", { reason })).then(showJob);
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
    b("pause", "Pause", pauseJob, j.state === "paused" || j.state === "finished"),
    b("resume", "Resume", resumeJob, j.state !== "paused"),
    b("remove", "Remove", removeJob, false, "danger"),
  ];
}

function jobRow(j) {
  const next = j.next_fires && j.next_fires.length ? time(j.next_fires[0]) : (j.state === "paused" ? "paused" : "-");
  return el("tr", { "data-test": "job-row", "data-job-id": j.id },
    el("td", {}, el("a", { href: "#/jobs/" + encodeURIComponent(j.id), "data-test": "job-link", text: j.id }),
      j.name ? el("div", { class: "reason", text: j.name }) : null),
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
    ["time zone", j.timezone || "agent default"], ["state", j.state + (j.paused_reason ? " (" + j.paused_reason + ")" : "")],
    ["next fires", (j.next_fires || []).map(time).join(", ") || "-"], ["last run", time(j.last_run_at)],
    ["last status", (j.last_status || "-") + (j.last_error ? ": " + j.last_error : "")],
    ["payload", j.payload && j.payload.shell ? (j.payload.shell.command || (j.payload.shell.argv || []).join(" ")) : (j.payload && j.payload.http ? j.payload.http.url : "-")],
    ["policies", "misfire " + j.misfire + ", overlap " + j.overlap + ", window " + j.window + ", on interrupt " + j.on_interrupt]];
  $("#job-details").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
  $("#job-page-pause").hidden = j.state === "paused" || j.state === "finished";
  $("#job-page-resume").hidden = j.state !== "paused";
}

function runRow(r) {
  const live = r.live;
  return el("tr", { "data-test": "run-row", "data-run-id": r.run_id, "data-state": r.state },
    el("td", { class: "mono", text: r.run_id }),
    el("td", { text: r.trigger || "-" }),
    el("td", { text: time(r.slot) }),
    el("td", { "data-test": "run-state" }, badge(r.state, r.reason)),
    el("td", { text: r.duration_ms != null ? (r.exit_code ? "exit " + r.exit_code : "ok") + " in " + r.duration_ms + " ms" : "-" }),
    el("td", { class: "reason", "data-test": "run-reason", text: r.reason || r.error || "" }),
    el("td", { class: "actions" },
      el("button", { type: "button", "data-test": "run-open", onclick: () => openRun(r.run_id), text: "Output" }),
      live ? el("button", { type: "button", "data-test": "run-cancel", "data-mutates": true, disabled: !state.auth, class: "danger",
        onclick: () => cancelRun(r.run_id), text: "Cancel" }) : null));
}

async function loadRuns() {
  if (!state.jobId) return;
  try {
    const list = await api("GET", "/api/runs?limit=50&job_id=" + encodeURIComponent(state.jobId));
    $("#runs-table tbody").replaceChildren(...list.runs.map(runRow));
  } catch (e) {
    say("Cannot read the runs: " + e.message, true);
  }
}

async function openRun(id) {
  state.openRun = id;
  try {
    const r = await api("GET", "/api/runs/" + encodeURIComponent(id));
    $("#output-title").hidden = false;
    $("#output-title").textContent = "Output of " + id + " (" + r.state + ")" + (r.output_truncated ? ", last part only" : "");
    const out = $("#run-output");
    out.hidden = false;
    out.textContent = r.output_text || r.output_error || "(no output)";
  } catch (e) {
    say("Cannot read run " + id + ": " + e.message, true);
  }
}

function cancelRun(id) {
  act("Cancelling run " + id + ".", () => api("POST", "/api/runs/" + encodeURIComponent(id) + "/cancel", {}));
}

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
  return el("li", { "data-test": "live-item", "data-run-id": e.run_id, "data-state": e.state },
    el("span", { class: "reason", text: time(e.time) }),
    el("a", { href: "#/jobs/" + encodeURIComponent(e.job_id), text: e.job_id }),
    el("span", { class: "mono", text: e.run_id }),
    badge(e.state, e.reason),
    el("span", { class: "reason", text: [e.trigger, e.reason || e.error].filter(Boolean).join(" · ") }));
}

function onRunLine(e) {
  const list = $("#live-list");
  const old = list.querySelector('[data-run-id="' + CSS.escape(e.run_id) + '"]');
  if (old) old.remove();
  list.prepend(liveItem(e));
  while (list.children.length > liveMax) list.lastChild.remove();
  if (state.view === "job" && state.jobId === e.job_id) {
    loadRuns();
    if (state.openRun === e.run_id) openRun(e.run_id);
  }
}

let stream = null;
function startStream() {
  if (stream) stream.close();
  stream = new EventSource("/api/events");
  const st = $("#stream-state");
  stream.onopen = () => { st.textContent = "live"; };
  stream.onerror = () => { st.textContent = "reconnecting"; };
  stream.addEventListener("run", (m) => onRunLine(JSON.parse(m.data)));
  stream.addEventListener("job", (m) => { const j = JSON.parse(m.data); state.jobs.set(j.id, j); renderJobs(); });
  stream.addEventListener("job_removed", (m) => { state.jobs.delete(JSON.parse(m.data).id); renderJobs(); });
  stream.addEventListener("reset", () => { loadAll(); loadRuns(); });
}

// Views ------------------------------------------------------------------

function route() {
  const h = location.hash || "#/jobs";
  const m = h.match(/^#\/jobs\/(.+)$/);
  state.view = m ? "job" : h === "#/live" ? "live" : h === "#/add" ? "add" : "jobs";
  state.jobId = m ? decodeURIComponent(m[1]) : null;
  $("#view-jobs").hidden = state.view !== "jobs";
  $("#view-job").hidden = state.view !== "job";
  $("#view-live").hidden = state.view !== "live";
  $("#view-add").hidden = state.view !== "add";
  if (state.view === "job") {
    state.openRun = null;
    $("#run-output").hidden = true;
    $("#output-title").hidden = true;
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
      say("This agent's dashboard needs the admin token to read as well.", true);
    }
  } catch (e) {
    say("The agent does not answer: " + e.message, true);
  }
})();
