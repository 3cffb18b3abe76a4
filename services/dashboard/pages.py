"""The dashboard's one page: plain HTML, a stylesheet and a small script, served as they are (no
front-end build step, nothing fetched from the internet).

The script opens one ``EventSource`` on ``/events`` (server push: a JSON snapshot of the view
whenever it changes, never a polling loop) and draws every section from it: services,
campaigns (an epoch table and SVG curves), the checkpoint lineage as an SVG graph with the three
pointers marked, replay lanes, RAIL and the episode feed. The feed's filters reopen the event
stream with the filters in its query; a click on an episode fetches ``/api/episode/<id>`` once
and shows its steps, reward breakdown, teacher signal, comparison and screenshots.
"""

from __future__ import annotations

__all__ = ["PAGE"]

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>aios-rl dashboard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d232a; background: #f6f7f9; }
  header { background: #1d232a; color: #fff; padding: 10px 18px; display: flex; gap: 16px;
           align-items: baseline; }
  header h1 { font-size: 18px; margin: 0; }
  #conn { font-size: 12px; opacity: .8; }
  main { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; padding: 14px; }
  section { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: 10px 14px;
            overflow: auto; }
  section.wide { grid-column: 1 / 3; }
  h2 { font-size: 15px; margin: 4px 0 10px; }
  table { border-collapse: collapse; width: 100%; font-size: 13px; }
  th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #eef0f3;
           vertical-align: top; }
  th { color: #56606b; font-weight: 600; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .muted { color: #7a8591; }
  .tag { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px;
         background: #eef0f3; margin-right: 4px; }
  .better, .success, .promote { background: #dff5e3; }
  .worse, .failure, .blocked, .rollback { background: #fbe0e0; }
  .same, .partial, .hold { background: #fdf3d8; }
  tr.episode { cursor: pointer; }
  tr.episode:hover { background: #f0f4ff; }
  pre { white-space: pre-wrap; background: #f6f7f9; padding: 6px; border-radius: 4px;
        max-height: 260px; overflow: auto; margin: 4px 0; }
  .step { border-top: 1px solid #eef0f3; padding: 6px 0; }
  .chosen { font-weight: 600; }
  .hint { color: #1f6f3a; }
  svg text { font: 11px system-ui, sans-serif; }
  select { margin-right: 8px; }
  img.evidence { max-width: 100%; border: 1px solid #dde1e6; }
</style>
</head>
<body>
<header><h1>aios-rl</h1><span id="conn">connecting...</span>
  <span class="muted" style="margin-left:auto">read-only view of the bus</span></header>
<main>
  <section><h2>Services</h2><div id="services" data-testid="services"></div></section>
  <section><h2>Replay lanes and dead letters</h2><div id="lanes" data-testid="lanes"></div></section>
  <section class="wide"><h2>Campaigns</h2><div id="campaigns" data-testid="campaigns"></div></section>
  <section><h2>Checkpoint lineage</h2><div id="lineage" data-testid="lineage"></div></section>
  <section><h2>RAIL</h2><div id="rail" data-testid="rail"></div></section>
  <section class="wide"><h2>Episodes</h2>
    <div>
      <select id="f-environment" data-testid="filter-environment">
        <option value="">every environment</option><option>shell</option>
        <option>browser</option><option>orchestrator</option></select>
      <select id="f-outcome" data-testid="filter-outcome">
        <option value="">every outcome</option><option>success</option><option>partial</option>
        <option>failure</option><option>blocked</option></select>
      <select id="f-lane" data-testid="filter-lane">
        <option value="">every lane</option><option>positive</option><option>neutral</option>
        <option>negative</option><option>diagnostic_only</option></select>
    </div>
    <div id="episodes" data-testid="episodes"></div>
  </section>
  <section class="wide" id="detail-box" hidden><h2>Episode <span id="detail-id"></span></h2>
    <div id="detail" data-testid="episode-detail"></div></section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g,
  (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const pct = (v) => v === null || v === undefined ? "-" : (100 * v).toFixed(1) + "%";
const num = (v, d = 3) => v === null || v === undefined ? "-" : Number(v).toFixed(d);
const tag = (v) => v ? `<span class="tag ${esc(v)}">${esc(v)}</span>` : "-";
const short = (id) => id ? esc(String(id).slice(0, 12)) : "-";

function table(head, rows) {
  return `<table><tr>${head.map((h) => `<th>${h}</th>`).join("")}</tr>` +
    rows.join("") + "</table>";
}

function services(s) {
  if (!s.services.length) return '<p class="muted">no service answers $SRV discovery</p>';
  return table(["service", "instance", "version", "health", "consumer lag"],
    s.services.map((r) => `<tr><td>${esc(r.name)}</td><td class="muted">${short(r.instance)}</td>
      <td>${esc(r.version)}</td><td>${r.healthy ? tag("up") : tag("down")}</td>
      <td class="num">${r.lag}</td></tr>`));
}

function lanes(s) {
  const rows = [];
  for (const [lane, envs] of Object.entries(s.lanes))
    for (const [env, n] of Object.entries(envs))
      rows.push(`<tr><td>${esc(lane)}</td><td>${esc(env)}</td><td class="num">${n}</td></tr>`);
  const dead = Object.entries(s.dead_letters).map(([k, n]) =>
    `<tr><td>dead letters</td><td>${esc(k)}</td><td class="num">${n}</td></tr>`);
  if (!rows.length && !dead.length) return '<p class="muted">no replay episodes yet</p>';
  return table(["lane", "environment", "episodes"], rows.concat(dead));
}

function curve(c, key, label) {
  const ys = c[key].filter((v) => v !== null);
  if (ys.length < 1) return "";
  const w = 260, h = 90, pad = 22;
  const lo = Math.min(0, ...ys), hi = Math.max(1, ...ys);
  const n = c.epoch.length;
  const x = (i) => pad + (n <= 1 ? 0 : i * (w - 2 * pad) / (n - 1));
  const y = (v) => h - pad - (v - lo) * (h - 2 * pad) / (hi - lo || 1);
  const pts = c[key].map((v, i) => v === null ? null : `${x(i)},${y(v)}`).filter(Boolean);
  return `<svg width="${w}" height="${h}" data-testid="curve-${key}">
    <text x="4" y="12">${esc(label)}</text>
    <line x1="${pad}" y1="${h - pad}" x2="${w - pad}" y2="${h - pad}" stroke="#ccd"/>
    <polyline fill="none" stroke="#3465a4" stroke-width="2" points="${pts.join(" ")}"/>
    ${pts.map((p) => `<circle cx="${p.split(",")[0]}" cy="${p.split(",")[1]}" r="3"
      fill="#3465a4"/>`).join("")}
    <text x="${pad}" y="${h - 6}">epoch ${c.epoch[0] ?? ""}</text>
    <text x="${w - pad - 40}" y="${h - 6}">${c.epoch[n - 1] ?? ""}</text></svg>`;
}

function campaigns(s) {
  const ids = Object.keys(s.campaigns);
  if (!ids.length) return '<p class="muted">no campaign yet</p>';
  return ids.map((cid) => {
    const c = s.campaigns[cid];
    const rows = c.epochs.map((e) => {
      const envs = Object.entries(e.per_env).map(([env, v]) =>
        `${esc(env)} ${pct(v.success)} / ${num(v.mean_reward, 2)}`).join("<br>");
      const moves = e.pointer_moves.map((m) =>
        `${esc(m.pointer)}: ${short(m.old)} &rarr; ${short(m.new)}`).join("<br>");
      const r = e.rollouts || {};
      return `<tr data-testid="epoch-row" data-epoch="${e.epoch}"><td class="num">${e.epoch}</td>
        <td>${esc(e.phase)}</td><td>${tag(e.verdict)}</td><td>${tag(e.decision)}</td>
        <td class="num">${e.received}/${e.scheduled}</td><td class="num">${pct(e.success)}</td>
        <td class="num">${num(e.mean_reward)}</td><td class="num">${pct(e.heldout)}</td>
        <td>${envs || "-"}</td>
        <td class="num">${e.lanes.better}/${e.lanes.same}/${e.lanes.worse}/${e.lanes.failed}</td>
        <td>${esc(r.strategy || "")} ${r.base ?? 0}+${r.continuations ?? 0}</td>
        <td class="muted">${moves || "-"}</td></tr>`;
    });
    return `<div data-testid="campaign" data-campaign="${esc(cid)}"><h3>${esc(cid)}</h3>
      ${curve(c.curves, "success", "rollout success")}
      ${curve(c.curves, "heldout", "held-out success")}
      ${curve(c.curves, "mean_reward", "mean reward")}
      ${table(["epoch", "phase", "verdict", "decision", "episodes", "success", "reward", "held-out",
               "per environment (success / reward)", "better/same/worse/failed",
               "rollouts (base+cont.)", "pointer moves"], rows)}</div>`;
  }).join("");
}

function lineage(s) {
  const g = s.lineage;
  if (!g.nodes.length) return '<p class="muted">no checkpoint yet</p>';
  const rowOf = {}, depthRows = {};
  g.nodes.forEach((n) => {
    depthRows[n.seq] = (depthRows[n.seq] || 0) + 1;
    rowOf[n.id] = depthRows[n.seq] - 1;
  });
  const pos = (n) => [30 + n.seq * 120, 20 + rowOf[n.id] * 80];
  const byId = Object.fromEntries(g.nodes.map((n) => [n.id, n]));
  const maxSeq = Math.max(...g.nodes.map((n) => n.seq));
  const maxRow = Math.max(...Object.values(rowOf));
  const w = 100 + maxSeq * 120, h = 90 + maxRow * 80;
  const edges = g.edges.map(([a, b]) => {
    const [x1, y1] = pos(byId[a]), [x2, y2] = pos(byId[b]);
    return `<line x1="${x1}" y1="${y1}" x2="${x2}" y2="${y2}" stroke="#99a"/>`;
  }).join("");
  const nodes = g.nodes.map((n) => {
    const [x, y] = pos(n);
    const fill = n.markers.includes("active") ? "#3465a4" : n.markers.length ? "#8fb3e0" : "#ccd";
    return `<g data-testid="checkpoint" data-id="${esc(n.id)}" data-markers="${n.markers.join(" ")}">
      <circle cx="${x}" cy="${y}" r="9" fill="${fill}"/>
      <text x="${x - 22}" y="${y + 24}">${short(n.id).slice(0, 8)}</text>
      ${n.markers.map((m, i) => `<text x="${x - 22}" y="${y + 38 + 13 * i}"
        fill="#1f4f8f">${esc(m)}</text>`).join("")}</g>`;
  }).join("");
  const p = g.pointers;
  return `<svg width="${w}" height="${h}">${edges}${nodes}</svg>
    <p class="muted">active ${short(p.active)} · pre_update_ref ${short(p.pre_update_ref)} ·
      last_stable ${short(p.last_stable)}${p.reason ? " · last move: " + esc(p.reason) : ""}</p>`;
}

function rail(s) {
  const r = s.rail.state;
  if (!r || !Object.keys(r).length) return '<p class="muted">RAIL is not running</p>';
  const actions = Object.entries(r.actions || {}).map(([k, v]) =>
    `${esc(k)}: ${Object.entries(v).map(([a, n]) => esc(a) + " " + n).join(", ")}`).join("<br>");
  return table(["mode", "traces", "sign agreement", "MAE online / frozen", "eta", "actions"],
    [`<tr><td>${tag(r.mode)}</td><td class="num">${r.traces_seen}</td>
      <td class="num">${num(r.sign_agreement)}</td>
      <td class="num">${num(r.mae_online)} / ${num(r.mae_frozen)}</td>
      <td class="num">${num(r.eta)}</td><td>${actions || "-"}</td></tr>`]);
}

function episodes(s) {
  if (!s.episodes.length) return '<p class="muted">no compared episode yet</p>';
  return table(["episode", "env", "task", "epoch", "outcome", "reward", "comparison", "lane",
                "steps"],
    s.episodes.map((e) => `<tr class="episode" data-testid="episode-row"
        data-id="${esc(e.episode_id)}"><td>${esc(e.episode_id)}</td><td>${esc(e.environment)}</td>
      <td class="muted">${short(e.task_id)}</td><td class="num">${e.epoch}</td>
      <td>${tag(e.outcome)}</td><td class="num">${num(e.reward)}</td><td>${tag(e.verdict)}</td>
      <td>${esc(e.lane || "-")}</td><td class="num">${e.steps}</td></tr>`));
}

function detail(d) {
  const steps = d.steps.map((s) => `<div class="step" data-testid="step">
      <b>step ${s.index}</b> <span class="muted">log-prob ${num(s.logprob)} · entropy
      ${num(s.entropy)}${s.replayed ? " · replayed prefix" : ""}</span>
      <pre>${esc(s.observation)}</pre>
      <div>${s.candidates.map((c, i) => `<div class="${i === s.action_index ? "chosen" : ""}">
        ${i === s.action_index ? "&#9656; " : "&nbsp; "}${esc(c)}</div>`).join("") ||
        `<div class="chosen">&#9656; ${esc(s.action)}</div>`}</div>
      ${s.hints.map((h) => `<div class="hint">teacher: better ${esc(h.better_action)}
        ${h.note ? "(" + esc(h.note) + ")" : ""}</div>`).join("")}</div>`).join("");
  const t = d.teacher_signal, c = d.comparison, r = d.reward_breakdown;
  const shots = d.evidence.filter((e) => e.kind === "screenshot").map((e) =>
    `<img class="evidence" alt="${esc(e.name)}"
      src="/evidence/${encodeURIComponent(e.name)}">`).join("");
  return `<p>${tag(d.outcome)} reward ${num(d.reward)} (environment ${num(d.env_reward)}) ·
      ${esc(d.environment)} task ${esc(d.task_id)} · checkpoint ${short(d.checkpoint_id)} ·
      group ${esc(d.group_id)}</p>
    <p>reward breakdown: ${r ? Object.entries(r).map(([k, v]) => esc(k) + " " + num(v))
      .join(", ") : "-"}</p>
    <p>teacher: ${t ? `${esc(t.backend)} ${tag(t.verdict)} score ${num(t.score)} —
      ${esc(t.rationale)}` : esc(d.teacher_status || "none")}</p>
    <p>comparison: ${c ? `${tag(c.verdict)} delta ${num(c.delta)} against
      ${short(c.reference_checkpoint)} — ${esc(c.reason)}` : "-"}</p>
    <p class="muted">stage latencies: ${Object.entries(d.latencies).map(([k, v]) =>
      esc(k) + " " + (1000 * v).toFixed(0) + " ms").join(", ") || "-"}</p>
    ${shots}${steps}`;
}

let source = null;
function connect() {
  if (source) source.close();
  const q = new URLSearchParams();
  for (const k of ["environment", "outcome", "lane"]) {
    const v = $("f-" + k).value;
    if (v) q.set(k, v);
  }
  source = new EventSource("/events?" + q.toString());
  source.onopen = () => { $("conn").textContent = "live"; };
  source.onerror = () => { $("conn").textContent = "reconnecting..."; };
  source.onmessage = (ev) => {
    const s = JSON.parse(ev.data);
    $("services").innerHTML = services(s);
    $("lanes").innerHTML = lanes(s);
    $("campaigns").innerHTML = campaigns(s);
    $("lineage").innerHTML = lineage(s);
    $("rail").innerHTML = rail(s);
    $("episodes").innerHTML = episodes(s);
    document.body.dataset.version = s.version;
  };
}
for (const k of ["environment", "outcome", "lane"]) $("f-" + k).onchange = connect;
$("episodes").addEventListener("click", async (ev) => {
  const row = ev.target.closest("tr.episode");
  if (!row) return;
  const id = row.dataset.id;
  const res = await fetch("/api/episode/" + encodeURIComponent(id));
  $("detail-box").hidden = false;
  $("detail-id").textContent = id;
  $("detail").innerHTML = res.ok ? detail(await res.json())
    : `<p class="muted">${esc(await res.text())}</p>`;
  $("detail-box").scrollIntoView();
});
connect();
</script>
</body>
</html>
"""
