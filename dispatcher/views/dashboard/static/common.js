// Helpers shared by the board (board.js) and the job page (job.js). No framework, no build step.
"use strict";

function esc(v) {
  return String(v === null || v === undefined ? "" : v)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function age(s) {
  if (s === null || s === undefined) return "-";
  s = Math.max(0, Math.floor(s));
  if (s < 120) return s + "s";
  if (s < 7200) return Math.floor(s / 60) + "m";
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return h + "h" + String(m).padStart(2, "0") + "m";
}

function clock(t) {
  return t ? new Date(t * 1000).toLocaleTimeString([], {hour12: false}) : "-";
}

function cls(c) { return c ? `<span class="cls ${esc(c)}">${esc(c)}</span>` : ""; }
function state(s) { return `<span class="state ${esc(s)}">${esc(s)}</span>`; }
function jobLink(id) { return `<a href="/job/${encodeURIComponent(id)}">${esc(id)}</a>`; }

async function getJSON(url, options) {
  const r = await fetch(url, options);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function table(el, header, rows) {
  el.innerHTML = `<thead><tr>${header.map(h => h.startsWith("#") ? `<th class="num">${esc(h.slice(1))}</th>`
    : `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${rows.join("")}</tbody>`;
}

// Data older than this (the scheduler's last cycle, s) greys the page out.
const STALE_S = 10;

// Call `step` now and every `ms`; the header's dot turns red while the server does not answer. `step`
// may return {at, age_s}: when the data shown was true (the scheduler's last cycle), shown in the
// header as "as of HH:MM:SS (N s ago)"; older than STALE_S, the page greys out.
function poll(step, ms, header = true) {
  const live = header && document.getElementById("live"), updated = header && document.getElementById("updated");
  async function tick() {
    try {
      const asOf = await step();
      if (!header) { setTimeout(tick, ms); return; }
      const stale = !!asOf && (asOf.age_s === null || asOf.age_s > STALE_S);
      document.body.classList.toggle("stale", stale);
      if (live) live.className = stale ? "live stale" : "live";
      if (updated) updated.textContent = !asOf ? "updated " + new Date().toLocaleTimeString([], {hour12: false})
        : asOf.age_s === null ? "no scheduler has run: nothing is decided"
        : `as of ${clock(asOf.at)} (${age(asOf.age_s)} ago)` + (stale ? ": is the scheduler running?" : "");
    } catch (e) {
      if (live) live.className = "live stale";
      if (updated) updated.textContent = "not updating: " + e.message;
    }
    setTimeout(tick, ms);
  }
  tick();
}

// A job action from the page (cancel, requeue: the dashboard's --allow-cancel), after the caller's confirm():
// POSTed with the CSRF token; with identity on, as the user and token typed in the inputs that
// whoInputs(cfg, p) made. Resolves to the outcome; throws the server's one-line refusal.
function whoInputs(cfg, p) {
  return cfg.identity ? `<input id="${p}-user" placeholder="user" size="10">` +
    `<input id="${p}-token" type="password" placeholder="token" size="16">` : "";
}
async function jobAction(cfg, kind, id, p) {
  const who = cfg.identity ? {user: document.getElementById(`${p}-user`).value,
                              token: document.getElementById(`${p}-token`).value} : {};
  const r = await getJSON(`/api/job/${encodeURIComponent(id)}/${kind}`, {method: "POST",
    headers: {"Content-Type": "application/json", "X-Dispatch-CSRF": cfg.csrf}, body: JSON.stringify(who)});
  return r.outcome;
}
