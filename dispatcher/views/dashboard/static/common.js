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
// a job's exit as the tables of the CLI show it: its code, or the shell's 128+N and the signal's name
function exitWords(j) {
  if (j.exit_code === null || j.exit_code === undefined) return "-";
  return j.signal ? esc(`${j.exit_status} (${j.signal})`) : esc(j.exit_code);
}
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

// Data older than this (the scheduler's last cycle, s) greys the page out, where the server does not say
// (its `stale`: views/fresh.py, the threshold `top` and `why` use).
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
      const stale = !!asOf && (asOf.stale ?? (asOf.age_s === null || asOf.age_s > STALE_S));
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

function nodeLink(name) { return `<a href="/node/${encodeURIComponent(name)}">${esc(name)}</a>`; }

// Lines over time on a canvas (CSS height `h`): `times` (ms), `series` [{name, color, values (null: a gap),
// dash}], values from 0 to `max` on the left axis (`unit` after the numbers). Draws the legend into
// `legend` (an element) when given. Returns false (and says so on the canvas) with under two times.
function lineChart(canvas, times, series, {max = 1, unit = "", h = 220, legend = null, empty = "No samples yet."} = {}) {
  const ctx = canvas.getContext("2d");
  canvas.width = canvas.clientWidth * devicePixelRatio; canvas.height = h * devicePixelRatio;
  ctx.scale(devicePixelRatio, devicePixelRatio);
  const w = canvas.width / devicePixelRatio, L = 40, R = 16, T = 10, B = 24;
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#6b7480";
  if (legend) legend.innerHTML = series.map(s => `<span style="--c:${s.color}">${esc(s.name)}</span>`).join("");
  if (times.length < 2) { ctx.fillText(empty, L, h / 2); return false; }
  const t0 = times[0], t1 = times[times.length - 1];
  const x = t => L + (w - L - R) * (t - t0) / Math.max(1, t1 - t0), y = v => T + (h - T - B) * (1 - v / max);
  ctx.strokeStyle = "#e2e5ea"; ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = max * i / 4;
    ctx.beginPath(); ctx.moveTo(L, y(v)); ctx.lineTo(w - R, y(v)); ctx.stroke();
    ctx.fillText(+v.toFixed(1) + unit, 6, y(v) + 4);
    const t = t0 + (t1 - t0) * i / 4;
    ctx.fillText(new Date(t).toLocaleTimeString([], {hour12: false, hour: "2-digit", minute: "2-digit"}), x(t) - 14, h - 6);
  }
  for (const s of series) {
    ctx.beginPath(); ctx.strokeStyle = s.color; ctx.lineWidth = s.dash ? 1.5 : 2; ctx.setLineDash(s.dash ? [6, 4] : []);
    let drawing = false;
    s.values.forEach((v, i) => {
      if (v === null || v === undefined) { drawing = false; return; }
      (drawing ? ctx.lineTo : ctx.moveTo).call(ctx, x(times[i]), y(v)); drawing = true;
    });
    ctx.stroke();
  }
  ctx.setLineDash([]);
  return true;
}

// The colour of the i-th line of a chart.
const PALETTE = ["#2f6fde", "#e07b10", "#23925a", "#cc3340", "#7b5cc4", "#0c8a99", "#b5487e", "#7a6a1f",
                 "#4a525c", "#5fa8e8", "#f0a35e", "#74c493", "#e8737e", "#a98fe0", "#5cc0cc", "#d88bb4"];
