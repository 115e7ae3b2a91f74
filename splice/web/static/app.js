// The live page: one server-sent "update" event per sample; the data path drawn in SVG.
"use strict";

const NS = "http://www.w3.org/2000/svg";

function el(name, attrs, text) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function drawTopology(topo) {
  const svg = document.getElementById("topology");
  svg.replaceChildren();
  const unitH = 34, unitW = 110, gap = 60;
  const rows = Math.max(1, ...topo.bricks.map(b => b.units.length));
  svg.setAttribute("height", String(rows * (unitH + 8) + 60));
  let x = 10;
  const midY = 30 + rows * (unitH + 8) / 2;
  const diamond = (cx, id) => {
    svg.appendChild(el("polygon", {points: `${cx},${midY - 12} ${cx + 12},${midY} ${cx},${midY + 12} ${cx - 12},${midY}`,
      fill: "#888", class: "gswitch", "data-block": id}));
  };
  topo.switches.forEach((id, i) => {
    diamond(x + 12, id);
    x += 24;
    const brick = topo.bricks[i];
    if (!brick) return;
    svg.appendChild(el("line", {x1: x, y1: midY, x2: x + gap / 2, y2: midY, stroke: "#888"}));
    x += gap / 2;
    svg.appendChild(el("rect", {x: x, y: 20, width: unitW + 16, height: rows * (unitH + 8) + 16,
      fill: "none", stroke: "#bbb", rx: 6}));
    svg.appendChild(el("text", {x: x + 4, y: 16}, `brick ${brick.brick}`));
    brick.units.forEach((u, j) => {
      const y = 28 + j * (unitH + 8);
      const g = el("g", {class: "unit", "data-block": u.block, "data-query": u.query || ""});
      g.appendChild(el("rect", {x: x + 8, y: y, width: unitW, height: unitH, rx: 4,
        fill: u.color || "#f3f3f3", "fill-opacity": u.query ? 0.85 : 1, stroke: "#999"}));
      g.appendChild(el("text", {x: x + 12, y: y + 14}, u.query || "free"));
      g.appendChild(el("text", {x: x + 12, y: y + 28}, `${u.rows_in.toLocaleString()} rows · q ${Math.round(u.queue_fill * 100)}%`));
      svg.appendChild(g);
    });
    x += unitW + 16;
    svg.appendChild(el("line", {x1: x, y1: midY, x2: x + gap / 2, y2: midY, stroke: "#888"}));
    x += gap / 2;
  });
  svg.setAttribute("width", String(x + 20));
}

function fmt(v) { return v === null || v === undefined ? "–" : Number(v).toLocaleString(undefined, {maximumFractionDigits: 0}); }

function drawQueries(queries) {
  const body = document.querySelector("#queries tbody");
  body.replaceChildren();
  for (const q of queries) {
    const tr = document.createElement("tr");
    tr.dataset.query = q.name;
    const cells = [
      `<span class="swatch" style="background:${q.color}"></span>${q.name}`,
      fmt(q.rows_in_per_s), fmt(q.rows_out_per_s), fmt(q.rows_out), fmt(q.watermark), fmt(q.watermark_lag),
      fmt(q.late_rows), fmt(q.dead_letter_rows), fmt(q.state_bytes)];
    for (const c of cells) { const td = document.createElement("td"); td.innerHTML = c; tr.appendChild(td); }
    const plan = document.createElement("td");
    plan.className = "plan";
    plan.textContent = q.sql || q.plan.join(" → ");
    tr.appendChild(plan);
    const act = document.createElement("td");
    const button = document.createElement("button");
    button.textContent = "Undeploy";
    button.className = "undeploy";
    button.onclick = () => undeploy(q.name);
    act.appendChild(button);
    tr.appendChild(act);
    body.appendChild(tr);
  }
}

function drawCheckpoints(ck) {
  const div = document.getElementById("checkpoints");
  div.textContent = ck.enabled
    ? `${ck.count} checkpoints; last took ${ck.last_seconds === null ? "–" : (ck.last_seconds * 1000).toFixed(1) + " ms"}, ${fmt(ck.last_bytes)} bytes; failures ${ck.failures}`
    : "this engine does not checkpoint";
}

function token() { return document.getElementById("token").value.trim(); }

async function undeploy(name) {
  const r = await fetch(`/api/queries/${encodeURIComponent(name)}`, {method: "DELETE",
    headers: {Authorization: `Bearer ${token()}`}});
  const out = document.getElementById("deploy-result");
  out.className = r.ok ? "" : "error";
  out.textContent = r.ok ? `undeployed ${name}` : (await r.json()).error;
}

document.getElementById("deploy").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const body = {sql: document.getElementById("sql").value, name: document.getElementById("qname").value};
  const r = await fetch("/api/queries", {method: "POST", body: JSON.stringify(body),
    headers: {"Content-Type": "application/json", Authorization: `Bearer ${token()}`}});
  const out = document.getElementById("deploy-result");
  const reply = await r.json();
  out.className = r.ok ? "" : "error";
  out.textContent = r.ok ? `deployed ${reply.name}` : reply.error;
});

const params = new URLSearchParams(location.search);
if (params.get("token")) document.getElementById("token").value = params.get("token");

const source = new EventSource("/api/events");
source.addEventListener("update", (ev) => {
  const state = JSON.parse(ev.data);
  document.getElementById("status").textContent = `live · ${new Date().toLocaleTimeString()}`;
  drawTopology(state.topology);
  drawQueries(state.queries);
  drawCheckpoints(state.checkpoints);
});
source.onerror = () => { document.getElementById("status").textContent = "disconnected, retrying…"; };
