// The front page's fair share over time: GPUs held per team (each team's guarantee, where the policy
// gives one, dashed in its colour) or per user, from the samples (/api/history, every 15 s). A sample
// recorded before samples carried them leaves a gap.
"use strict";

(() => {
  const canvas = document.getElementById("share-chart");
  if (!canvas) return;
  const by = document.getElementById("share-by");
  let last = null;

  function draw() {
    if (!last) return;
    const [samples, teams] = last, kind = by.value;
    // an older sample has no {name: GPUs}: a gap, unless nothing was held then (every line at 0)
    const known = samples.map(s => Object.keys(s[kind] || {}).length > 0 || s.held === 0);
    const total = {};
    samples.forEach(s => Object.entries(s[kind] || {}).forEach(([k, v]) => { total[k] = (total[k] || 0) + v; }));
    const names = Object.keys(total).sort((a, b) => total[b] - total[a] || a.localeCompare(b)).slice(0, PALETTE.length);
    const label = n => n !== "" ? n : kind === "teams" ? "(no team)" : "(no user)";
    const series = names.map((n, i) => ({name: label(n), color: PALETTE[i],
      values: samples.map((s, j) => known[j] ? (s[kind] || {})[n] || 0 : null)}));
    if (kind === "teams") {
      for (const t of teams) {
        const i = names.indexOf(t.team === "(none)" ? "" : t.team);
        if (t.guarantee !== null && t.guarantee !== undefined) {
          series.push({name: `${t.team} guarantee`, color: i >= 0 ? PALETTE[i] : "#888", dash: true,
                       values: samples.map(() => t.guarantee)});
        }
      }
    }
    const max = Math.max(1, ...series.flatMap(s => s.values.filter(v => v !== null)));
    lineChart(canvas, samples.map(s => s.t_ms), series, {max: 4 * Math.ceil(max * 1.1 / 4), legend: document.getElementById("share-legend"),
      empty: "No samples yet: the scheduler records one every 15 s."});
    const t = samples.length > 1 ? (samples[samples.length - 1].t_ms - samples[0].t_ms) / 1000 : 0;
    document.getElementById("share-range").textContent = t ? `GPUs held, ${age(t)} of samples` : "";
  }

  async function refresh() {
    const [h, b] = await Promise.all([getJSON("/api/history?hours=6"), getJSON("/api/board")]);
    last = [h.samples, (b.usage && b.usage.teams) || []];
    draw();
  }

  by.onchange = draw;
  poll(refresh, 15000, false);
})();
