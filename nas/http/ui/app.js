// The operator dashboard: polls the operator routes with the session cookie
// and renders them; every value goes in as text, never as markup.
"use strict";

const REFRESH_MS = 3000;
const $ = (id) => document.getElementById(id);
let timer = null;

class Unauthorized extends Error {}

async function getJSON(path) {
  const r = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (r.status === 401) throw new Unauthorized();
  if (!r.ok) throw new Error(path + ": " + r.status + " " + (await errorText(r)));
  return r.json();
}

async function errorText(r) {
  try {
    const b = await r.json();
    return b.error_description || b.error || "";
  } catch (e) {
    return "";
  }
}

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

// fill replaces the rows of tbody; each cell carries its column's name as
// data-label, which narrow screens show beside the value.
function fill(tbody, rows, empty, columns) {
  const labels = Array.from(tbody.parentElement.querySelectorAll("thead th")).map((th) => th.textContent);
  const trs = rows.map((cells) => {
    const tr = document.createElement("tr");
    cells.forEach((c, i) => {
      c.dataset.label = labels[i] || "";
      tr.appendChild(c);
    });
    return tr;
  });
  if (trs.length === 0) {
    const tr = document.createElement("tr");
    const td = cell(empty, "empty");
    td.colSpan = columns;
    tr.appendChild(td);
    trs.push(tr);
  }
  // Rows that read the same are left in place: a button is not swapped
  // under the pointer as the operator clicks it.
  const sig = trs.map((tr) => tr.textContent + "\u0001" + Array.from(tr.querySelectorAll("[data-test]"), (e) => e.dataset.test).join(",")).join("\u0002");
  if (tbody.dataset.sig === sig) return;
  tbody.dataset.sig = sig;
  tbody.replaceChildren(...trs);
}

function when(t) {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d) ? t : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z").replace(/Z$/, " UTC");
}

function seconds(v) {
  if (v === null || v === undefined) return "–";
  if (v < 1) return Math.round(v * 1000) + " ms";
  return v.toFixed(v < 10 ? 2 : 1) + " s";
}

// flowState says in words what holds an agent's fires, if anything.
function flowState(f) {
  if (f.disabled_by_file) return "disabled (agents file)";
  if (f.disabled) return "disabled";
  if (f.probing) return "probing (" + f.failures + " not answered)";
  if (f.gate_until) return "waiting until " + when(f.gate_until);
  if (f.held > 0) return "at its limit";
  return "delivering";
}

// agentButton is the kill switch of one agent: Disable, or Enable for a
// disabled one (not offered when the agents file disables it); and Re-key,
// which retires the cron keys of its direct jobs (chronos agent rekey).
function agentButton(agentID, flow) {
  const td = document.createElement("td");
  if (!(flow && flow.disabled_by_file)) {
    const disabled = !!(flow && flow.disabled);
    const btn = document.createElement("button");
    btn.type = "button";
    btn.textContent = disabled ? "Enable" : "Disable";
    btn.dataset.test = disabled ? "enable-agent" : "disable-agent";
    btn.dataset.agentId = agentID;
    btn.addEventListener("click", () => setAgent(btn, agentID, disabled ? "enable" : "disable"));
    td.appendChild(btn);
  }
  const rekey = document.createElement("button");
  rekey.type = "button";
  rekey.textContent = "Re-key";
  rekey.title = "Retire the cron keys of its direct-delivery jobs: each gets a new key as the agent provisions it";
  rekey.dataset.test = "rekey-agent";
  rekey.dataset.agentId = agentID;
  rekey.addEventListener("click", () => setAgent(rekey, agentID, "rekey"));
  td.appendChild(document.createTextNode(" "));
  td.appendChild(rekey);
  return td;
}

function renderOverview(o) {
  $("g-armed").textContent = o.store.armed;
  $("g-due").textContent = o.store.due_backlog;
  $("g-leased").textContent = o.store.leased;
  $("g-dead").textContent = o.store.dead_letter;
  $("g-held").textContent = o.store.held;
  $("g-probing").textContent = o.store.probing;
  const lag = o.fire_lag;
  $("g-lag").textContent = lag.count === 0 ? "no deliveries yet"
    : [lag.p50_seconds, lag.p90_seconds, lag.p99_seconds].map(seconds).join(" / ");
  fill($("flows"), o.agent_flows.map((f) => [cell(f.agent_id, "mono"), cell(flowState(f), f.disabled ? "reason" : ""),
    cell(String(f.in_flight), "num"), cell(String(f.held), "num"), cell(String(f.parallelism), "num"),
    cell(f.rate > 0 ? String(f.rate) : "unlimited", "num"), agentButton(f.agent_id, f)]),
  "Every agent delivers freely: none is held back, probed or disabled.", 7);
  $("flows").querySelectorAll("tr").forEach((tr, i) => {
    if (o.agent_flows[i]) tr.dataset.test = "agent-flow";
  });
  $("flows-more").hidden = !o.agent_flows_truncated;
  const outcomes = Object.keys(o.deliveries).sort();
  fill($("deliveries"), outcomes.map((k) => [cell(k, "outcome-" + k), cell(String(o.deliveries[k]), "num")]),
    "No deliveries yet.", 2);
  fill($("stopped"), o.stopped_instances.map((s) => [cell(s.instance_id, "mono"), cell(when(s.stopped_at)), startButton(s.instance_id)]),
    "No instance is stopped.", 3);
}

function renderDead(d) {
  fill($("dead"), d.entries.map((e) => {
    const btn = document.createElement("button");
    btn.type = "button";
    btn.textContent = "Replay";
    btn.dataset.test = "replay";
    btn.dataset.scheduleId = e.schedule_id;
    btn.addEventListener("click", () => replay(btn, e.schedule_id));
    const act = document.createElement("td");
    act.appendChild(btn);
    return [cell(e.agent_id, "mono"), cell(e.job_id, "mono"), cell(when(e.fire_at)), cell(e.reason, "reason"),
      cell(String(e.attempts), "num"), act];
  }), "The dead letter is empty.", 6);
  $("dead").querySelectorAll("tr").forEach((tr, i) => {
    if (d.entries[i]) tr.dataset.test = "dead-entry";
  });
  $("dead-more").hidden = !d.next_cursor;
}

function renderUnarmed(u) {
  fill($("unarmed"), u.unarmed.map((j) => [cell(j.agent_id || "", "mono"), cell(j.job_id, "mono"),
    cell(j.outcome + (j.reason ? ": " + j.reason : "")), cell(when(j.outcome_at))]),
  "Every job is armed again (after " + u.unarmed_after + ").", 4);
}

async function replay(btn, scheduleID) {
  btn.disabled = true;
  try {
    const r = await fetch("/api/operator/dlq/replay", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ schedule_ids: [scheduleID] }),
    });
    if (r.status === 401) throw new Unauthorized();
    if (!r.ok) throw new Error("replay: " + r.status + " " + (await errorText(r)));
    // An entry whose job was armed again since leaves the dead letter
    // without being re-armed: say so rather than let it vanish.
    const res = await r.json();
    const dropped = (res.dropped || []).map((d) => d.schedule_id + " (" + d.job_id + "): " + d.description);
    $("notice").textContent = dropped.length ? "Not replayed, removed from the dead letter: " + dropped.join("; ") : "";
    $("notice").hidden = dropped.length === 0;
    await refresh();
  } catch (e) {
    btn.disabled = false;
    handle(e);
  }
}

// setAgent disables, enables or re-keys an agent (verb "disable", "enable"
// or "rekey").
async function setAgent(btn, agentID, verb) {
  btn.disabled = true;
  try {
    const r = await fetch("/api/operator/agents/" + encodeURIComponent(agentID) + "/" + verb, {
      method: "POST",
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    });
    if (r.status === 401) throw new Unauthorized();
    if (!r.ok) throw new Error(verb + " " + agentID + ": " + r.status + " " + (await errorText(r)));
    await refresh();
  } catch (e) {
    btn.disabled = false;
    handle(e);
  }
}

function handle(e) {
  if (e instanceof Unauthorized) {
    showLogin();
    return;
  }
  $("error").textContent = e.message;
  $("error").hidden = false;
}

async function login(ev) {
  ev.preventDefault();
  $("login-failed").hidden = true;
  try {
    const r = await fetch("/api/operator/session", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ token: $("token").value }),
    });
    if (r.status === 401 || r.status === 429) {
      const wait = r.headers.get("Retry-After");
      $("login-failed").textContent =
        r.status === 429
          ? "Too many wrong tokens from this address; try again in " + (wait || "a few") + " s."
          : "Wrong operator token.";
      $("login-failed").hidden = false;
      $("token").select();
      return;
    }
    if (!r.ok) throw new Error("log in: " + r.status + " " + (await errorText(r)));
    $("token").value = "";
    await refresh();
  } catch (e) {
    handle(e);
  }
}

// logout ends the session on the server; when that fails the page stays
// (the cookie still works) and says why, so the operator can try again.
async function logout() {
  try {
    const r = await fetch("/api/operator/session", {
      method: "DELETE",
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    });
    if (!r.ok) throw new Error("log out: " + r.status + " " + (await errorText(r)));
    showLogin();
  } catch (e) {
    handle(e);
  }
}

function showLogin() {
  $("dashboard").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("refreshed").textContent = "";
  if (timer) clearInterval(timer);
  timer = null;
  $("token").focus();
}

async function refresh() {
  try {
    const o = await getJSON("/api/operator/overview");
    if (ex.agent !== null) {
      await refreshAgent(ex.agent);
    } else {
      const [d, u] = await Promise.all([
        getJSON("/api/operator/dlq?limit=100"),
        getJSON("/api/operator/unarmed"),
        refreshExplorer(),
      ]);
      renderDead(d);
      renderUnarmed(u);
    }
    renderOverview(o);
    $("error").hidden = true;
    $("login").hidden = true;
    $("dashboard").hidden = false;
    $("logout").hidden = false;
    $("refreshed").textContent = "updated " + when(o.generated_at);
    if (!timer) timer = setInterval(refresh, REFRESH_MS);
  } catch (e) {
    handle(e);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", logout);
  refresh();
});
