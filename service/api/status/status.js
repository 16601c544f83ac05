// The status page: read-only, everything from this service's own API (no build step, nothing from elsewhere).
// Polls every 2 s; the window's countdown ticks every second. Text only goes in through textContent.
"use strict";

const EVERY_MS = 2000;
const TOKEN_KEY = "hsstore.token";
let closesAt = null;

const $ = (id) => document.getElementById(id);

function headers() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function read(path) {
  const answer = await fetch(path, { headers: headers() });
  if (answer.status === 401 || answer.status === 403) {
    askForToken(answer.status === 401 ? "that token was refused" : "that token lacks the read scope");
    throw new Error("unauthorized");
  }
  if (!answer.ok) {
    const body = await answer.json().catch(() => ({}));
    throw new Error(body.error ? body.error.message : `${path}: HTTP ${answer.status}`);
  }
  return answer.json();
}

function askForToken(said) {
  $("token-form").hidden = false;
  $("token-said").textContent = said || "";
}

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function fill(tbody, items, render) {
  tbody.replaceChildren();
  for (const item of items) render(tbody.insertRow(), item);
}

function number(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US", { maximumFractionDigits: 0 });
}

function bytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB", "PB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function short(hash) {
  return hash.replace(/^sha256:/, "").slice(0, 12);
}

function showWindow(state) {
  const badge = $("window-state");
  badge.textContent = state.open ? "open" : "shut";
  badge.className = `badge ${state.open ? "good" : "idle"}`;
  closesAt = state.open && state.closes_at ? Date.parse(state.closes_at) : null;
  const why = { always: "always open (no schedule, no hand-over)", schedule: "by the schedule", manual: "opened by hand" };
  $("window-why").textContent = state.open ? why[state.source] || "" :
    state.next_opens_at ? `next opens ${new Date(state.next_opens_at).toISOString().replace(".000Z", "Z")}` : "";
  $("window-gpu").textContent = state.gpu_held === null || state.gpu_held === undefined ? "" :
    state.gpu_held ? "· the GPU is hsstore's" : "· the GPU is SGLang's";
  $("window-canary").textContent = state.sglang_canary ? `· SGLang's canary: ${state.sglang_canary}` : "";
  tick();
}

function tick() {
  const out = $("window-countdown");
  if (closesAt === null) { out.textContent = ""; return; }
  const left = Math.max(0, Math.round((closesAt - Date.now()) / 1000));
  const m = Math.floor(left / 60), s = left % 60;
  out.textContent = `closes in ${m}:${String(s).padStart(2, "0")}`;
  out.dataset.seconds = String(left);
}

function showJobs(list) {
  $("jobs-none").hidden = list.jobs.length > 0;
  fill($("jobs-rows"), list.jobs, (row, job) => {
    row.id = `job-${job.id}`;
    row.dataset.done = String(job.done);
    cell(row, job.id.slice(0, 12), "mono");
    cell(row, job.waiting_for_window ? "waiting for a window" : job.state, `state-${job.state}`);
    const bar = document.createElement("progress");
    bar.max = Math.max(job.total, 1);
    bar.value = job.done + job.failed;
    row.insertCell().append(bar);
    cell(row, number(job.done));
    cell(row, number(job.pending));
    cell(row, number(job.failed), job.failed ? "bad" : "");
    cell(row, job.tokens_per_s ? number(job.tokens_per_s) : "–");
    cell(row, job.created_at.replace(/\.\d+Z$/, "Z"));
  });
}

function showWorkers(list) {
  $("workers-none").hidden = list.workers.length > 0;
  fill($("workers-rows"), list.workers, (row, lease) => {
    cell(row, lease.worker.split(" [")[0], "mono").title = lease.worker;  // its label; the process in the tooltip
    cell(row, lease.job_id.slice(0, 12), "mono");
    cell(row, number(lease.items));
    cell(row, `${Math.round(lease.expires_in_s)} s`);
  });
}

function showStore(health) {
  fill($("store-rows"), health.tallies, (row, t) => {
    cell(row, short(t.model_revision), "mono");
    cell(row, t.backend);
    cell(row, short(t.featureset_id), "mono");
    cell(row, number(t.entries));
    cell(row, number(t.tokens));
    cell(row, bytes(t.bytes));
    cell(row, number(t.flagged), t.flagged ? "warn" : "");
    cell(row, number(t.damaged), t.damaged ? "bad" : "");
    cell(row, number(t.suspect), t.suspect ? "warn" : "");
    cell(row, number(t.unchecked));
  });
  const attention = health.attention.length;
  $("store-attention").textContent = attention ?
    `${attention} version(s) need an operator's eye: hsstore health lists them` : "Nothing needs an operator's eye.";
}

async function offerHashes() {
  const page = await read("/v1/entries?limit=20");
  const list = $("compare-hashes");
  list.replaceChildren(...[...new Set(page.entries.map((m) => m.prompt_hash))].map((hash) => {
    const option = document.createElement("option");
    option.value = hash;
    return option;
  }));
}

const SVG = "http://www.w3.org/2000/svg";

function draw(report) {
  const chart = $("fidelity-chart");
  const rowH = 18, left = 90, width = 600;
  chart.replaceChildren();
  chart.setAttribute("height", String(report.layers.length * rowH + 24));
  const lowest = Math.min(0.99, ...report.layers.map((l) => l.cosine_min));
  const x = (v) => left + ((v - lowest) / (1 - lowest)) * width;
  report.layers.forEach((layer, i) => {
    const y = i * rowH + 4;
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("x", "0"); label.setAttribute("y", String(y + 12));
    label.textContent = `layer ${layer.layer}`;
    const bar = document.createElementNS(SVG, "rect");
    bar.setAttribute("x", String(left)); bar.setAttribute("y", String(y));
    bar.setAttribute("width", String(Math.max(1, x(layer.cosine_mean) - left))); bar.setAttribute("height", "12");
    bar.setAttribute("class", layer.bitwise_equal_fraction === 1 ? "equal" : "cos");
    const low = document.createElementNS(SVG, "line");
    low.setAttribute("x1", String(x(layer.cosine_min))); low.setAttribute("x2", String(x(layer.cosine_min)));
    low.setAttribute("y1", String(y - 1)); low.setAttribute("y2", String(y + 13)); low.setAttribute("class", "min");
    const title = document.createElementNS(SVG, "title");
    title.textContent = `cosine mean ${layer.cosine_mean.toFixed(6)}, min ${layer.cosine_min.toFixed(6)}`;
    bar.append(title);
    chart.append(label, bar, low);
  });
  const axis = document.createElementNS(SVG, "text");
  axis.setAttribute("x", String(left)); axis.setAttribute("y", String(report.layers.length * rowH + 20));
  axis.textContent = `cosine from ${lowest.toFixed(4)} to 1 (bar: mean, tick: min; green: bit for bit)`;
  chart.append(axis);
  $("fidelity-table").hidden = false;
  fill($("fidelity-rows"), report.layers, (row, l) => {
    cell(row, String(l.layer));
    cell(row, l.cosine_mean.toFixed(6));
    cell(row, l.cosine_min.toFixed(6));
    cell(row, l.max_abs_diff.toPrecision(3));
    cell(row, `${(100 * l.bitwise_equal_fraction).toFixed(1)}%`);
  });
}

async function compare(event) {
  event.preventDefault();
  const hash = $("compare-hash").value.trim(), a = $("compare-a").value, b = $("compare-b").value;
  $("compare-said").textContent = "comparing…";
  try {
    const report = await read(`/v1/compare/${encodeURIComponent(hash)}?a=${a}&b=${b}`);
    draw(report);
    $("compare-said").textContent = `${report.num_tokens} tokens, ${report.a} against ${report.b}`;
  } catch (error) {
    $("compare-said").textContent = error.message;
  }
}

async function refresh() {
  try {
    const [window_, jobs, workers, health] = await Promise.all([
      read("/v1/window"), read("/v1/jobs"), read("/v1/workers"), read("/v1/health?limit=20"),
    ]);
    showWindow(window_);
    showJobs(jobs);
    showWorkers(workers);
    showStore(health);
    $("updated").textContent = `updated ${new Date().toISOString().slice(11, 19)} UTC`;
    $("updated").className = "quiet";
    document.body.dataset.loaded = "true";
  } catch (error) {
    if (error.message !== "unauthorized") {
      $("updated").textContent = `could not read: ${error.message}`;
      $("updated").className = "bad";
    }
  }
}

function start() {
  for (const id of ["compare-a", "compare-b"]) {
    const select = $(id);
    for (const backend of document.body.dataset.backends.split(",")) select.add(new Option(backend, backend));
  }
  $("compare-a").value = "fla";  // the API's defaults
  $("compare-b").value = "torch";
  $("compare-form").addEventListener("submit", compare);
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value);
    $("token-form").hidden = true;
    begin();
  });
  if (document.body.dataset.auth === "required" && !sessionStorage.getItem(TOKEN_KEY)) {
    askForToken("");
    return;
  }
  begin();
}

let polling = false;

function begin() {
  refresh().then(() => offerHashes().catch(() => {}));
  if (polling) return;
  polling = true;
  setInterval(refresh, EVERY_MS);
  setInterval(tick, 1000);
}

start();
