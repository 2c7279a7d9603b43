// The page of ended jobs: /api/finished (store/ended.py's indexes), a page at a time, by state and user;
// with --allow-cancel, a requeue button for each failed or cancelled job. Polls every 5 s.
"use strict";

const $ = id => document.getElementById(id);
const PER = 25;
const view = {state: "failed", user: "", page: 0};
let cfg = null;

async function refresh() {
  const f = await getJSON(`/api/finished?state=${view.state}&user=${encodeURIComponent(view.user)}` +
    `&page=${view.page}&per=${PER}`);
  const act = cfg.allow_cancel;
  table($("finished"), ["id", "name", "user", "class", "state", "#exit", "ended", "#attempt", "reason", ...(act ? [""] : [])],
    f.jobs.map(j => `<tr data-job="${esc(j.id)}"><td>${jobLink(j.id)}</td><td>${esc(j.name || "-")}</td>` +
      `<td>${esc(j.user)}</td><td>${cls(j.priority)}</td><td>${state(j.state)}</td>` +
      `<td class="num">${exitWords(j)}</td><td>${clock(j.finished_at)}</td>` +
      `<td class="num">${j.attempt}</td><td class="reason">${esc(j.reason || "-")}</td>` +
      (act ? `<td>${j.state === "succeeded" ? "" : `<button class="requeue" data-id="${esc(j.id)}">requeue</button>`}</td>` : "") +
      `</tr>`));
  if (!f.jobs.length) $("finished").innerHTML = `<tr><td class="muted">No ${f.state === "all" ? "ended" : esc(f.state)} ` +
    `jobs${f.user ? " of " + esc(f.user) : ""}${f.page ? " on this page" : ""}.</td></tr>`;
  $("f-page").textContent = `page ${f.page + 1}` + (f.total !== null ? ` of ${Math.max(1, Math.ceil(f.total / f.per))} ` +
    `(${f.total.toLocaleString()} jobs)` : "") + (f.cut ? ` (only the newest ${f.look_limit.toLocaleString()} ended jobs looked at)` : "");
  $("f-prev").disabled = f.page === 0;
  $("f-next").disabled = !f.more;
  for (const b of document.querySelectorAll("button.requeue")) b.onclick = () => requeue(b.dataset.id);
  return null;
}

async function requeue(id) {
  if (!confirm(`Requeue job ${id}? It goes back to the queue under the same id and runs again.`)) return;
  try {
    $("r-msg").textContent = `job ${id}: ` + await jobAction(cfg, "requeue", id, "r");
    await refresh();
  } catch (e) {
    $("r-msg").innerHTML = `<span class="error">job ${esc(id)}: ${esc(e.message)}</span>`;
  }
}

(async () => {
  cfg = await getJSON("/api/config");
  if (cfg.allow_cancel) $("r-who").innerHTML = whoInputs(cfg, "r");
  $("f-state").onchange = e => { view.state = e.target.value; view.page = 0; refresh(); };
  $("f-user").onchange = e => { view.user = e.target.value.trim(); view.page = 0; refresh(); };
  $("f-prev").onclick = () => { view.page = Math.max(0, view.page - 1); refresh(); };
  $("f-next").onclick = () => { view.page += 1; refresh(); };
  poll(refresh, 5000);
})();
