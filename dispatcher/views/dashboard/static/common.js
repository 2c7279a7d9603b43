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

// Call `step` now and every `ms`; the header's dot turns red while the server does not answer.
function poll(step, ms) {
  const live = document.getElementById("live"), updated = document.getElementById("updated");
  async function tick() {
    try {
      await step();
      if (live) live.className = "live";
      if (updated) updated.textContent = "updated " + new Date().toLocaleTimeString([], {hour12: false});
    } catch (e) {
      if (live) live.className = "live stale";
      if (updated) updated.textContent = "not updating: " + e.message;
    }
    setTimeout(tick, ms);
  }
  tick();
}
