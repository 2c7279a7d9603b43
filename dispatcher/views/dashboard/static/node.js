// A node's page: its heartbeat, drain mark, CPUs and memory, each GPU, its jobs and the decisions about
// it; polls /api/node/<name> every 2 s (one node's records, whatever the cluster's size).
"use strict";

const $ = id => document.getElementById(id);
const nodeName = decodeURIComponent(location.pathname.split("/").pop());

function gpuRow(g) {
  const what = g.state === "dead" ? "node dead" : g.state === "blocked" ? `zombie: ${esc(g.blocked)} (not handed out)`
    : g.state === "held" ? "held" : g.state === "drained" ? "free, drained (no job starts here)" : "free";
  return `<tr class="gpu-row ${esc(g.state)}" data-gpu="${g.index}" data-job="${esc(g.jobs.join(","))}">` +
    `<td class="num">${g.index}</td><td>${esc(g.name)}</td><td class="num">${Math.round(g.util_pct)}%</td>` +
    `<td class="num">${g.mem_used_gb}/${g.mem_total_gb} GB</td><td>${g.jobs.map(jobLink).join(", ") || "-"}</td>` +
    `<td>${esc(g.users.join(", ") || "-")}</td><td class="${g.state === "blocked" || g.state === "dead" ? "error" : ""}">${what}</td></tr>`;
}

async function refresh() {
  let n;
  try {
    n = await getJSON(`/api/node/${encodeURIComponent(nodeName)}`);
  } catch (e) {
    $("node-state").innerHTML = `<span class="error">${esc(e.message)}</span>`;
    throw e;
  }
  document.title = `dispatch · node ${n.name}`;
  $("title").textContent = `node ${n.name}`;
  const seen = n.seen_s_ago === null ? "no heartbeat recorded" : `last heartbeat ${age(n.seen_s_ago)} ago (${clock(n.seen_at)})`;
  $("node-state").innerHTML = (n.alive ? `<span class="up">up</span>` : `<span class="dead">DEAD</span>`) +
    ` · ${seen}` + (n.alive ? "" : ` <span class="muted">(a node is dead after ${n.timeout_s} s without one)</span>`) +
    (n.drain ? ` · <b>drained</b>${n.drain.reason ? ": " + esc(n.drain.reason) : ""}` +
      `<span class="muted">${n.drain.by ? " by " + esc(n.drain.by) : ""}${n.drain.at ? " at " + clock(n.drain.at) : ""}</span>` : "");
  $("node-facts").textContent = `${n.cpus_used}/${n.cpus} CPUs and ${n.mem_used_gb}/${Math.round(n.mem_gb)} GB of memory ` +
    `asked for by its jobs · ${n.gpus.length} GPUs, ${n.gpus.filter(g => g.state === "held").length} held`;
  table($("gpus"), ["#GPU", "model", "#util", "#memory", "jobs", "users", "state"], n.gpus.map(gpuRow));
  table($("node-jobs"), ["id", "name", "user", "team", "class", "state", "GPUs", "#running"], n.jobs.map(j =>
    `<tr data-job="${esc(j.id)}"><td>${jobLink(j.id)}</td><td>${esc(j.name || "-")}</td><td>${esc(j.user)}</td>` +
    `<td>${esc(j.team || "-")}</td><td>${cls(j.class)}</td><td>${state(j.state)}</td><td class="mono">${j.gpus.join(",")}</td>` +
    `<td class="num">${age(j.run_s)}</td></tr>`));
  if (!n.jobs.length) $("node-jobs").innerHTML = `<tr><td class="muted">No job holds this node's GPUs.</td></tr>`;
  table($("node-decisions"), ["time", "job", "GPUs", "what"], n.decisions.map(d =>
    `<tr><td>${clock(d.time)}</td><td>${jobLink(d.job)}</td><td class="mono">${d.gpus.join(",")}</td><td class="reason">` +
    (d.kind === "preempt" ? `preempted (${esc(d.mode)}) for ${jobLink(d.for_job)}: ${esc(d.why)}`
      : `started, score ${d.score.toFixed(1)}: ${esc(d.why)}`) + `</td></tr>`));
  if (!n.decisions.length) $("node-decisions").innerHTML = `<tr><td class="muted">No recent decision placed a job here.</td></tr>`;
  return null;  // its own age is the heartbeat's, shown above
}

poll(refresh, 2000);
