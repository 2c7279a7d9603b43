// The front page: polls /api/board and one page of /api/queue every 2 s, /api/history every 15 s.
"use strict";

const $ = id => document.getElementById(id);
const view = {state: "pending", cls: "", page: 0};
const TERM_COLORS = {priority: "#cc3340", wait: "#e07b10", fairness: "#23925a", remaining: "#2f6fde",
                     fit: "#7b5cc4", attained: "#0c8a99"};

function tiles(b) {
  const t = b.totals, pct = t.gpus ? Math.round(100 * t.held / t.gpus) : 0;
  const items = [
    [`${t.nodes - t.nodes_dead}/${t.nodes}`, "nodes up"],
    [`${t.held}/${t.gpus}`, "GPUs held"],
    [`${pct}%`, "allocation"],
    [`${Math.round(t.util_pct)}%`, "GPU utilization"],
    [`${t.free - t.stranded}` + (t.stranded ? ` (+${t.stranded} stranded)` : ""), "GPUs free"],
    [`${Math.round(100 * t.frag)}%`, "fragmentation"],
    [t.pending.toLocaleString(), "pending"],
    [t.running.toLocaleString(), "running"],
    [b.alerts.length, "alerts"],
  ];
  $("tiles").innerHTML = items.map(([v, k]) => `<div class="tile"><div class="v">${esc(v)}</div>` +
                                                `<div class="k">${esc(k)}</div></div>`).join("");
}

function alerts(b) {
  $("alerts").innerHTML = b.alerts.length ? b.alerts.map(a =>
    `<div class="alert ${esc(a.severity)}"><b>${esc(a.kind.replace("_", " "))}</b>${esc(a.message)}</div>`).join("")
    : `<span class="none">No alerts.</span>`;
}

function classes(b) {
  table($("classes"), ["class", "#pending", "#held", "#running", "#GPUs asked", "#oldest wait", "why they wait"],
    b.classes.map(c => `<tr><td>${cls(c.class)}</td><td class="num">${c.pending.toLocaleString()}</td>` +
      `<td class="num">${c.held.toLocaleString()}</td>` +
      `<td class="num">${c.running}</td><td class="num">${c.gpus_pending.toLocaleString()}</td>` +
      `<td class="num">${c.oldest_job ? age(c.oldest_wait_s) + " (" + jobLink(c.oldest_job) + ")" : "-"}</td>` +
      `<td class="reason">${c.reasons.map(r => `<div>${r.count.toLocaleString()} × ${esc(r.reason)}</div>`).join("")}</td></tr>`));
  $("queue-total").textContent = `${b.totals.pending.toLocaleString()} pending, ${b.totals.running} running`;
}

function gpuCell(g) {
  const busy = g.state === "held";
  const shade = busy ? `style="background: hsl(218, 70%, ${62 - 0.32 * g.util_pct}%)"` : "";
  const what = g.state === "dead" ? "node dead" : g.state === "blocked" ? "zombie"
    : busy ? g.job.split(",").map(jobLink).join(",") + ` <span style="font-weight:normal">${esc(g.users.join(","))}</span>`
    : g.state === "drained" ? "drained" : "free";
  const memPct = g.mem_total_gb ? Math.min(100, 100 * g.mem_used_gb / g.mem_total_gb) : 0;
  const title = `${g.name} · util ${g.util_pct}% · ${g.mem_used_gb}/${g.mem_total_gb} GB` +
                (g.blocked ? ` · ${g.blocked}` : "") + (g.shared ? " · shared" : "");
  return `<div class="gpu ${g.state}" ${shade} title="${esc(title)}" data-gpu="${g.index}" data-job="${esc(g.job || "")}">` +
    `<div class="top"><span>${g.index} · ${esc(g.name.split("-")[0])}</span><span>${Math.round(g.util_pct)}%</span></div>` +
    `<div class="job">${what}</div><div class="bar"><i style="width:${memPct}%"></i></div></div>`;
}

function nodes(b) {
  $("nodes").innerHTML = b.nodes.map(n =>
    `<div class="node ${n.alive ? "" : "dead"}" data-node="${esc(n.name)}"><div class="label">` +
    `<div class="name">${nodeLink(n.name)}</div><div class="muted">${n.alive ? (n.drain ? "drained" : "up") : "DEAD"}${n.drain && n.drain.reason ? ` (${esc(n.drain.reason)})` : ""} · seen ${age(n.seen_s_ago)} ago</div>` +
    `<div class="muted">${n.cpus} CPUs · ${Math.round(n.mem_gb)} GB</div></div>` +
    `<div class="gpus">${n.gpus.map(gpuCell).join("")}</div></div>`).join("") ||
    `<span class="muted">No node has sent a heartbeat.</span>`;
}

function termBars(terms) {
  return `<div class="terms" title="${esc(Object.entries(terms).map(([k, v]) => k + " " + v.toFixed(1)).join(", "))}">` +
    Object.entries(terms).map(([k, v]) =>
      `<i style="height:${Math.max(1, 18 * v / 100)}px;background:${TERM_COLORS[k] || "#888"}"></i>`).join("") + `</div>`;
}

function where(d) { return esc(d.node) + (d.gpus.length ? ":" + d.gpus.join(",") : " (no GPU)"); }

function decisions(b) {
  table($("decisions"), ["time", "job", "where", "#score", "terms", "why"], b.decisions.map(d =>
    d.kind === "preempt"
      ? `<tr><td>${clock(d.time)}</td><td>${jobLink(d.job)}</td><td class="mono">${where(d)}</td>` +
        `<td class="num">-</td><td class="muted">${esc(d.mode)}</td>` +
        `<td class="reason">preempted for ${jobLink(d.for_job)}: ${esc(d.why)}</td></tr>`
      : `<tr><td>${clock(d.time)}</td><td>${jobLink(d.job)}</td><td class="mono">${where(d)}</td>` +
        `<td class="num">${d.score.toFixed(1)}</td><td>${termBars(d.terms)}</td><td class="reason">${esc(d.why)}</td></tr>`));
  if (!b.decisions.length) $("decisions").innerHTML = `<tr><td class="muted">No decisions yet.</td></tr>`;
}

function capacity(b) {
  table($("capacity"), ["GPU", "#nodes", "#GPUs", "#free", "#stranded", "#fits 1", "#fits 2", "#fits 4", "#fits 8"],
    b.capacity.map(r => `<tr><td>${esc(r.model)}</td><td class="num">${r.nodes}</td><td class="num">${r.gpus}</td>` +
      `<td class="num">${r.free}</td><td class="num">${r.stranded}</td>` +
      ["1", "2", "4", "8"].map(s => `<td class="num">${r.fits[s]}</td>`).join("") + `</tr>`));
  if (!b.capacity.length) $("capacity").innerHTML = `<tr><td class="muted">No live node takes jobs.</td></tr>`;
}

function usage(b) {
  const u = b.usage;
  table($("users"), ["user", "team", "#GPUs", "#running", "#pending", "share (line: fair share)"], u.users.map(r =>
    `<tr><td>${esc(r.user)}</td><td>${esc(r.team || "-")}</td><td class="num">${r.gpus}</td><td class="num">${r.running}</td>` +
    `<td class="num">${r.pending.toLocaleString()}</td><td><div class="share" title="dominant share ${(100 * r.share).toFixed(1)}%, ` +
    `fair ${(100 * r.fair_share).toFixed(1)}%"><i class="${r.share > r.fair_share ? "over" : ""}" ` +
    `style="width:${Math.min(100, 100 * r.share)}%"></i><b style="left:${Math.min(100, 100 * r.fair_share)}%"></b></div></td></tr>`));
  table($("teams"), ["team", "#GPUs held", "#running", "#pending", "#guarantee", "#limit"], u.teams.map(t =>
    `<tr><td>${esc(t.team)}</td><td class="num">${t.gpus}${t.limit !== null && t.gpus >= t.limit ? " (at limit)" : ""}</td>` +
    `<td class="num">${t.running}</td><td class="num">${t.pending.toLocaleString()}</td>` +
    `<td class="num">${t.guarantee === null ? "-" : t.guarantee}</td><td class="num">${t.limit === null ? "-" : t.limit}</td></tr>`));
}

function outcomes(b) {
  const o = b.outcomes;
  $("outcomes-window").textContent = `the newest ${o.window} finished jobs`;
  $("counts").innerHTML = Object.entries(o.counts).map(([s, n]) =>
    `<div class="state ${esc(s)}">${n}<span>${esc(s)}</span></div>`).join("");
  table($("outcome-reasons"), ["state", "#jobs", "reason"], o.reasons.map(r =>
    `<tr><td>${state(r.state)}</td><td class="num">${r.count}</td><td class="reason">${esc(r.reason)}</td></tr>`));
}

async function refreshBoard() {
  const b = await getJSON("/api/board");
  $("ns").textContent = "namespace " + b.namespace;
  const s = b.scheduler;
  $("sched").textContent = s.age_s === null ? "no scheduler has run" :
    `scheduler ${s.holder || "?"} · last cycle ${s.cycle_ms.toFixed(1)} ms, ${age(s.age_s)} ago · ${s.placed} placed · ${s.preempted} preempted`;
  tiles(b); alerts(b); classes(b); nodes(b); decisions(b); usage(b); outcomes(b); capacity(b);
  return {at: s.age_s === null ? null : b.now - s.age_s, age_s: s.age_s};
}

async function refreshQueue() {
  const q = await getJSON(`/api/queue?state=${view.state}&class=${view.cls}&page=${view.page}&per=25`);
  view.page = q.page;
  const pending = q.state === "pending";
  table($("jobs"), ["id", "name", "user", "class", "#GPUs", pending ? "#wait" : "#running", pending ? "why it waits" : "where"],
    q.jobs.map(j => `<tr data-job="${esc(j.id)}"><td>${jobLink(j.id)}</td><td>${esc(j.name || "-")}</td><td>${esc(j.user)}</td>` +
      `<td>${cls(j.priority)}</td><td class="num">${j.gpus_requested}${j.gpu_types.length ? "×" + esc(j.gpu_types.join("|")) : ""}</td>` +
      `<td class="num">${age(pending ? j.wait_s : j.run_s)}</td>` +
      `<td class="reason">${pending ? esc(j.reason || "no reason recorded yet") : `<span class="mono">${esc(j.node)}:${j.gpus.join(",")}</span> ${state(j.state)}`}</td></tr>`));
  if (!q.jobs.length) $("jobs").innerHTML = `<tr><td class="muted">No ${q.state} jobs${q.class ? " of class " + esc(q.class) : ""}.</td></tr>`;
  $("q-page").textContent = `page ${q.page + 1} of ${q.pages} (${q.total.toLocaleString()} jobs` +
    (pending && q.listed < q.total ? `; the oldest ${q.listed.toLocaleString()} are listed: dispatch queue lists them all)` : ")");
  $("q-prev").disabled = q.page === 0;
  $("q-next").disabled = q.page + 1 >= q.pages;
}

function drawChart(samples) {
  const c = $("chart"), ctx = c.getContext("2d");
  const W = c.width = c.clientWidth * devicePixelRatio, H = c.height = 220 * devicePixelRatio;
  ctx.scale(devicePixelRatio, devicePixelRatio);
  const w = W / devicePixelRatio, h = 220, L = 40, R = 44, T = 10, B = 24;
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#6b7480";
  if (samples.length < 2) {
    ctx.fillText("No samples yet: the scheduler records one every 15 s.", L, h / 2);
    $("chart-range").textContent = "";
    return;
  }
  const t0 = samples[0].t_ms, t1 = samples[samples.length - 1].t_ms;
  const x = t => L + (w - L - R) * (t - t0) / Math.max(1, t1 - t0), y = v => T + (h - T - B) * (1 - v / 100);
  const maxPending = Math.max(1, ...samples.map(s => s.pending));
  ctx.strokeStyle = "#e2e5ea"; ctx.lineWidth = 1;
  for (const v of [0, 25, 50, 75, 100]) {
    ctx.beginPath(); ctx.moveTo(L, y(v)); ctx.lineTo(w - R, y(v)); ctx.stroke();
    ctx.fillText(v + "%", 6, y(v) + 4);
  }
  ctx.fillText(maxPending.toLocaleString(), w - R + 4, y(100) + 4);
  ctx.fillText("0", w - R + 4, y(0) + 4);
  for (let i = 0; i <= 4; i++) {
    const t = t0 + (t1 - t0) * i / 4;
    ctx.fillText(new Date(t).toLocaleTimeString([], {hour12: false, hour: "2-digit", minute: "2-digit"}),
                 x(t) - 14, h - 6);
  }
  const series = [
    ["pending (right axis)", "rgba(224,123,16,.25)", s => 100 * s.pending / maxPending, true],
    ["allocation", "#2f6fde", s => s.gpus ? 100 * s.held / s.gpus : 0],
    ["GPU utilization", "#23925a", s => s.util_pct],
    ["fragmentation", "#cc3340", s => 100 * s.frag],
  ];
  for (const [, color, f, fill] of series) {
    ctx.beginPath();
    samples.forEach((s, i) => (i ? ctx.lineTo : ctx.moveTo).call(ctx, x(s.t_ms), y(f(s))));
    if (fill) {
      ctx.lineTo(x(t1), y(0)); ctx.lineTo(x(t0), y(0)); ctx.closePath(); ctx.fillStyle = color; ctx.fill();
    } else {
      ctx.strokeStyle = color; ctx.lineWidth = 2; ctx.stroke();
    }
  }
  $("chart-legend").innerHTML = series.map(([n, color]) => `<span style="--c:${color}">${esc(n)}</span>`).join("");
  $("chart-range").textContent = `${age((t1 - t0) / 1000)} of samples`;
}

async function refreshHistory() {
  drawChart((await getJSON("/api/history?hours=6")).samples);
}

async function init() {
  const cfg = await getJSON("/api/config");
  $("q-class").innerHTML += cfg.classes.map(c => `<option value="${c}">${c}</option>`).join("");
  $("q-state").onchange = e => { view.state = e.target.value; view.page = 0; refreshQueue(); };
  $("q-class").onchange = e => { view.cls = e.target.value; view.page = 0; refreshQueue(); };
  $("q-prev").onclick = () => { view.page = Math.max(0, view.page - 1); refreshQueue(); };
  $("q-next").onclick = () => { view.page += 1; refreshQueue(); };
  poll(async () => (await Promise.all([refreshBoard(), refreshQueue()]))[0], 2000);
  poll(refreshHistory, 15000, false);
}

init();
