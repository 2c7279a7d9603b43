// The header's search box, on every page: jobs by id (12, 12_3), user, team or name (a substring or a
// glob; user:, team:, name:, id: say which), from /api/search, typed into (debounced) and shown in a
// panel at the top of the page, with state and class filters and pages. Escape closes it.
"use strict";

(() => {
  const box = document.getElementById("search");
  if (!box) return;
  const STATES = ["", "active", "pending", "running", "done", "succeeded", "failed", "cancelled"];
  const CLASSES = ["", "critical", "high", "normal", "low"];
  const s = {q: "", state: "", cls: "", page: 0, timer: null, asked: 0};
  const panel = document.createElement("section");
  panel.className = "w12";
  panel.id = "search-panel";
  panel.hidden = true;
  panel.innerHTML = `<h2>Search <span class="muted" id="search-words"></span>` +
    `<span class="right"><a href="#" id="search-close">close</a></span></h2>` +
    `<div class="controls"><select id="search-state">${STATES.map(v =>
      `<option value="${v}">${v || "every state"}</option>`).join("")}</select>` +
    `<select id="search-class">${CLASSES.map(v => `<option value="${v}">${v || "every class"}</option>`).join("")}</select>` +
    `<button id="search-prev">‹ prev</button><span id="search-page" class="muted"></span>` +
    `<button id="search-next">next ›</button></div><div class="scroll"><table id="search-results"></table></div>`;
  document.querySelector("main").prepend(panel);
  const $s = id => document.getElementById(id);

  async function run() {
    const asked = ++s.asked;
    if (!s.q) { panel.hidden = true; return; }
    panel.hidden = false;
    try {
      const r = await getJSON(`/api/search?q=${encodeURIComponent(s.q)}&state=${s.state}&class=${s.cls}` +
                              `&page=${s.page}&per=25`);
      if (asked !== s.asked) return;  // a later keystroke's answer is on its way
      s.page = r.page;
      $s("search-words").textContent = `${r.total.toLocaleString()} found · ${r.words}`;
      table($s("search-results"), ["id", "name", "user", "team", "class", "state", "#GPUs", "#wait", "#run", "where"],
        r.jobs.map(j => `<tr data-job="${esc(j.id)}"><td><a href="/job/${encodeURIComponent(j.id)}">${esc(j.label)}</a></td>` +
          `<td>${esc(j.name || "-")}</td><td>${esc(j.user)}</td><td>${esc(j.team || "-")}</td><td>${cls(j.class)}</td>` +
          `<td>${state(j.state)}</td><td class="num">${j.gpus_requested}</td><td class="num">${age(j.wait_s)}</td>` +
          `<td class="num">${age(j.run_s)}</td><td class="mono">${j.node ? nodeLink(j.node) + ":" + j.gpus.join(",") : "-"}</td></tr>`));
      if (!r.jobs.length) $s("search-results").innerHTML = `<tr><td class="muted">No job matches ${esc(r.q)}.</td></tr>`;
      $s("search-page").textContent = `page ${r.page + 1} of ${r.pages}`;
      $s("search-prev").disabled = r.page === 0;
      $s("search-next").disabled = r.page + 1 >= r.pages;
    } catch (e) {
      if (asked === s.asked) $s("search-words").innerHTML = `<span class="error">${esc(e.message)}</span>`;
    }
  }

  function later(ms) { clearTimeout(s.timer); s.timer = setTimeout(run, ms); }
  box.addEventListener("input", () => { s.q = box.value.trim(); s.page = 0; later(250); });
  box.addEventListener("keydown", e => {
    if (e.key === "Enter") later(0);
    if (e.key === "Escape") { box.value = ""; s.q = ""; later(0); }
  });
  $s("search-state").onchange = e => { s.state = e.target.value; s.page = 0; later(0); };
  $s("search-class").onchange = e => { s.cls = e.target.value; s.page = 0; later(0); };
  $s("search-prev").onclick = () => { s.page = Math.max(0, s.page - 1); later(0); };
  $s("search-next").onclick = () => { s.page += 1; later(0); };
  $s("search-close").onclick = e => { e.preventDefault(); box.value = ""; s.q = ""; later(0); };
})();
