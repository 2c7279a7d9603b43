// A job's page: `dispatch why`, its spec, timeline, attempts and output; polls /api/job/<id> every 2 s.
"use strict";

const $ = id => document.getElementById(id);
const jobId = decodeURIComponent(location.pathname.split("/").pop());
const FINAL = ["succeeded", "failed", "cancelled"];
let cfg = null, logAtBottom = true;

function why(out) {
  const j = out.job, o = out.outcome;
  let html = `<div>${state(j.state)} ${cls(j.priority)} ` +
    (j.node ? `on <span class="mono">${esc(j.node)}:${j.gpus.join(",")}</span> ` : "") +
    (j.reason ? `<span class="muted">· ${esc(j.reason)}</span>` : "") + `</div>`;
  if (j.warning) {  // its node agent's idle-GPU warning (policy idle_warn)
    html += `<div class="alert" style="margin-top:8px"><b>idle</b>${esc(j.warning)}` +
      (j.idle_since_at ? ` <span class="muted">· since ${clock(j.idle_since_at)}</span>` : "") + `</div>`;
  }
  if (o) {
    const total = Object.values(out.weights || {}).reduce((a, b) => a + b, 0) || 1;
    html += `<div class="why" style="margin-top:8px"><b>${esc(o.code.replace(/_/g, " "))}</b>: ${esc(o.reason)}`;
    if (o.terms && Object.keys(o.terms).length) {
      html += `<div class="mono" style="margin-top:4px">score ${o.score.toFixed(1)} = (` +
        Object.entries(o.terms).map(([k, v]) => `${esc(k)} ${v.toFixed(1)}×${out.weights[k] || 0}`).join(" + ") +
        `) / ${+total.toFixed(3)}</div>`;
    }
    if (o.rank) html += `<div class="muted">rank ${o.rank} of ${out.pending} pending · profile ${esc(out.profile)} · ${out.live_nodes} live nodes</div>`;
    html += `</div>`;
  }
  if (out.promise) {
    const p = out.promise;
    html += `<div class="muted" style="margin-top:4px">promise: waited ${age(p.waited_s)} of the ${esc(p.class)} ` +
      `class's ${age(p.target_s)} target (${Math.round(100 * p.share)}%)</div>`;
  }
  for (const r of out.reservations || []) {
    if (r.job !== j.id) html += `<div class="muted">reservation: job ${jobLink(r.job)} holds ${esc(r.node)} GPUs ` +
      `${r.gpus.join(",")} from ~${age(r.starts_in_s)}</div>`;
  }
  for (const d of out.decisions) {
    html += `<div class="muted" style="margin-top:4px">decision ${clock(d.time)}: ${esc(d.words)}</div>`;
  }
  if (out.as_of) {
    const a = out.as_of;
    html += `<div class="${a.stale ? "error" : "muted"}" style="margin-top:4px">as of the scheduler's last cycle, ` +
      (a.at ? `${clock(a.at)} (${age(a.age_s)} ago)` : "none yet") + (a.stale ? ": stale, is the scheduler running?" : "") +
      ` · <a href="#" id="what-if">run the policy now</a></div>`;
  }
  $("why").innerHTML = html;
  const link = $("what-if");
  if (link) link.onclick = async ev => {
    ev.preventDefault();
    $("what-if-out").textContent = "running the policy on the whole queue…";
    try {
      const f = await getJSON(`/api/job/${encodeURIComponent(jobId)}?fresh=1`), fo = f.outcome;
      $("what-if-out").innerHTML = fo ? `<div class="why"><b>now: ${esc(fo.code.replace(/_/g, " "))}</b>: ${esc(fo.reason)}` +
        (fo.rank ? ` <span class="muted">(rank ${fo.rank} of ${f.pending})</span>` : "") + `</div>` : "";
    } catch (e) {
      $("what-if-out").innerHTML = `<span class="error">${esc(e.message)}</span>`;
    }
  };
}

function spec(j) {
  const rows = [["name", j.name || "-"], ["user", j.user], ["team", j.team || "-"], ["class", j.priority],
    ["command", j.command.join(" ")], ["GPUs", j.gpus_requested + (j.gpu_types.length ? " × " + j.gpu_types.join("|") : "")],
    ["GPU memory", j.gpu_mem_gb ? j.gpu_mem_gb + " GB each" : "-"], ["CPUs", j.cpus], ["memory", j.mem_gb ? j.mem_gb + " GB" : "-"],
    ["estimate", j.est_s ? age(j.est_s) : "-"], ["checkpointable", j.checkpointable ? "yes" : "no"],
    ["attempt", j.attempt], ["preemptions", j.preemptions], ["exit code", exitWords(j)]];
  $("spec").innerHTML = rows.map(([k, v]) => `<dt>${esc(k)}</dt><dd class="${k === "command" ? "mono" : ""}">${esc(v)}</dd>`).join("");
}

// With --allow-cancel: "cancel job" while it has not ended, "requeue job" once it has.
function cancelBox(j) {
  const box = $("cancel-box"), kind = FINAL.includes(j.state) ? "requeue" : "cancel";
  if (!cfg.allow_cancel) { box.innerHTML = ""; return; }
  if (box.dataset.kind === kind) return;
  box.dataset.kind = kind;
  box.innerHTML = `<span class="controls" style="margin:0">${whoInputs(cfg, "c")}` +
    `<button id="c-go">${kind} job</button><span id="c-msg"></span></span>`;
  $("c-go").onclick = async () => {
    if (!confirm(kind === "cancel" ? `Cancel job ${jobId}? Its running attempt is stopped and it will not run again.`
      : `Requeue job ${jobId}? It goes back to the queue under the same id and runs again.`)) return;
    try {
      $("c-msg").textContent = " " + await jobAction(cfg, kind, jobId, "c");
    } catch (e) {
      $("c-msg").innerHTML = ` <span class="error">${esc(e.message)}</span>`;
    }
  };
}

async function refresh() {
  const out = await getJSON(`/api/job/${encodeURIComponent(jobId)}`);
  const j = out.job;
  document.title = `dispatch · job ${out.label}`;
  $("title").textContent = `job ${out.label}${j.name ? " · " + j.name : ""} · ${j.user}`;
  why(out); spec(j); cancelBox(j);
  table($("timeline"), ["time", "what"], out.timeline.map(e => `<tr><td>${clock(e.t)}</td><td>${esc(e.what)}</td></tr>`));
  table($("attempts"), ["#", "outcome", "node", "GPUs", "started", "ended", "reason"], j.attempts.map(a =>
    `<tr><td>${a.attempt}</td><td>${state(a.outcome)}</td><td>${esc(a.node || "-")}</td><td>${a.gpus.join(",")}</td>` +
    `<td>${clock(a.started_at)}</td><td>${clock(a.ended_at)}</td><td class="reason">${esc(a.reason)}</td></tr>`));
  if (!j.attempts.length) $("attempts").innerHTML = `<tr><td class="muted">No attempt has ended.</td></tr>`;
  const log = $("log");
  logAtBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.textContent = out.log_tail || "(no output yet)";
  if (logAtBottom) log.scrollTop = log.scrollHeight;
  return out.as_of || null;  // a pending job's answer is the scheduler's last cycle's
}

(async () => { cfg = await getJSON("/api/config"); poll(refresh, 2000); })();
