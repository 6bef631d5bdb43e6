// sqsworker ui: vanilla JavaScript, no build step. Every value from the
// server is put in the page as text (textContent), never as HTML.
"use strict";

const CSRF = document.querySelector('meta[name="csrf-token"]').content;
const ACTIONS = document.querySelector('meta[name="actions"]').content === "on";
const main = document.getElementById("main");
// Opened from another site's link: no dead-letter queue is read (a
// listing receives its messages) until the operator clicks in the page.
let crossSiteEntry = document.querySelector('meta[name="entry"]').content === "cross-site";
document.addEventListener("click", (e) => { if (e.isTrusted) crossSiteEntry = false; }, true);
let pollTimer = null; // the queues page's poll
let view = 0;         // bumped at each navigation: stale answers are dropped

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// fill replaces a node's children, leaving out null, undefined and false.
function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": CSRF },
    body: JSON.stringify(body),
  };
  const r = await fetch(path, opts);
  let data = null;
  try { data = await r.json(); } catch (e) { /* not JSON */ }
  if (!r.ok) throw new Error((data && data.error) || (r.status + " " + r.statusText));
  return data;
}

function fmtTime(t) {
  if (!t) return "–";
  const d = new Date(t);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function ago(t) {
  if (!t) return "–";
  const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
  if (s < 90) return Math.round(s) + "s";
  if (s < 5400) return Math.round(s / 60) + "m";
  if (s < 172800) return Math.round(s / 3600) + "h";
  return Math.round(s / 86400) + "d";
}

function queueName(url) { return url ? url.slice(url.lastIndexOf("/") + 1) : ""; }

// spark draws a series as an inline SVG line over an area.
function spark(values, cls) {
  const w = 160, h = 34, ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark " + (cls || ""));
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  if (values.length < 2) return svg;
  const top = Math.max(1, ...values);
  const pts = values.map((v, i) => [(i / (values.length - 1)) * (w - 2) + 1, h - 2 - (v / top) * (h - 6)]);
  const line = pts.map((p, i) => (i ? "L" : "M") + p[0].toFixed(1) + " " + p[1].toFixed(1)).join(" ");
  const area = document.createElementNS(ns, "path");
  area.setAttribute("class", "area");
  area.setAttribute("d", line + ` L${pts[pts.length - 1][0].toFixed(1)} ${h} L${pts[0][0].toFixed(1)} ${h} Z`);
  const path = document.createElementNS(ns, "path");
  path.setAttribute("class", "line");
  path.setAttribute("d", line);
  const title = document.createElementNS(ns, "title");
  title.textContent = `now ${values[values.length - 1]}, max ${top}`;
  svg.append(area, path, title);
  return svg;
}

// rate is the net change of a series per minute over its samples: the
// queue's drain (negative) or fill.
function rate(hist, key) {
  if (hist.length < 2) return null;
  const a = hist[0], b = hist[hist.length - 1];
  const min = (new Date(b.t) - new Date(a.t)) / 60000;
  if (min <= 0) return null;
  return (b[key] - a[key]) / min;
}

// ---------- Queues ----------

function showQueues() {
  const my = view;
  fill(main, el("h1", {}, "Queues"), el("div", { id: "queues" }, el("p", { class: "muted" }, "Reading the queues…")));
  const tick = async () => {
    try {
      const d = await api("api/queues");
      if (my !== view) return;
      renderQueues(d);
      pollTimer = setTimeout(tick, Math.max(1000, d.intervalSeconds * 1000));
    } catch (e) {
      if (my !== view) return;
      fill(document.getElementById("queues"), el("p", { class: "err" }, e.message));
      pollTimer = setTimeout(tick, 5000);
    }
  };
  tick();
}

function renderQueues(d) {
  const rows = d.queues.map((q) => {
    const hist = q.history || [];
    const depth = hist.map((s) => s.visible + s.inFlight);
    const r = rate(hist, "visible");
    const dlq = q.dlq;
    return el("tr", { "data-queue": q.queue },
      el("td", {}, el("strong", {}, q.queue), q.fifo ? el("span", { class: "muted" }, " FIFO") : null),
      el("td", { class: "num" }, q.visible),
      el("td", { class: "num" }, q.inFlight),
      el("td", { class: "num" }, q.delayed),
      el("td", {}, spark(depth), el("span", { class: "muted" }, r === null ? "" : (r <= 0 ? "drains " : "grows ") + Math.abs(r).toFixed(1) + "/min")),
      el("td", {}, dlq ? (dlq.missing ? el("span", { class: "err" }, dlq.queue + " (missing)")
        : el("a", { href: "#/dlq/" + encodeURIComponent(dlq.queue), class: "dlq-link" }, dlq.queue)) : el("span", { class: "muted" }, "none")),
      el("td", { class: "num dlq-depth" }, dlq && !dlq.missing ? dlq.depth : "–"),
      el("td", {}, dlq ? spark(hist.map((s) => s.dlq), "dlq") : null),
      el("td", { title: "oldest failed-at seen by the last full listing of the dead-letter queue in this server; SQS reports the age of a queue's oldest message only as the CloudWatch metric ApproximateAgeOfOldestMessage" },
        q.oldestFailure ? ago(q.oldestFailure) : el("span", { class: "muted" }, "–")));
  });
  const table = el("table", { id: "queue-table" },
    el("thead", {}, el("tr", {}, el("th", {}, "Queue"), el("th", { class: "num" }, "Visible"), el("th", { class: "num" }, "In flight"),
      el("th", { class: "num" }, "Delayed"), el("th", {}, "Depth (window)"), el("th", {}, "Dead-letter queue"), el("th", { class: "num" }, "DLQ depth"),
      el("th", {}, "DLQ depth (window)"), el("th", {}, "Oldest failure"))),
    el("tbody", {}, rows));
  const win = Math.round(d.windowSeconds / 60);
  fill(document.getElementById("queues"),
    d.error ? el("p", { class: "err" }, "The last reading failed: " + d.error) : null,
    d.queues.length ? table : el("p", { class: "muted" }, "No queues."),
    el("p", { class: "note", id: "sampling" },
      `Read ${fmtTime(d.readAt)}. The server reads the figures every ${d.intervalSeconds}s while a page polls, and stops ${d.idleSeconds}s after the last poll: `,
      `about ${Math.round(d.requestsPerMinute)} SQS requests per minute for these queues. `,
      `Charts cover the last ${win} minutes; the rate is the net change of visible messages, not SQS's throughput (that is CloudWatch's NumberOfMessagesDeleted).`));
}

// ---------- Dead-letter queues ----------

async function showDLQIndex() {
  const my = view;
  fill(main, el("h1", {}, "Dead-letter queues"), el("p", { class: "muted" }, "Reading the queues…"));
  const input = el("input", { id: "dlq-name", placeholder: "queue name or URL", size: 40 });
  const open = el("form", { class: "bar", onsubmit: (e) => { e.preventDefault(); if (input.value) location.hash = "#/dlq/" + encodeURIComponent(input.value); } },
    input, el("button", { type: "submit" }, "Open"));
  try {
    const d = await api("api/queues");
    if (my !== view) return;
    const seen = new Map();
    for (const q of d.queues) if (q.dlq && !q.dlq.missing) seen.set(q.dlq.queue, { depth: q.dlq.depth, sources: [...((seen.get(q.dlq.queue) || {}).sources || []), q.queue] });
    const rows = [...seen.entries()].map(([name, v]) => el("tr", {},
      el("td", {}, el("a", { href: "#/dlq/" + encodeURIComponent(name) }, name)), el("td", { class: "num" }, v.depth), el("td", {}, v.sources.join(", "))));
    fill(main, el("h1", {}, "Dead-letter queues"),
      rows.length ? el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "Queue"), el("th", { class: "num" }, "Depth"), el("th", {}, "Sources"))), el("tbody", {}, rows))
        : el("p", { class: "muted" }, "None of the queues shown has a dead-letter queue."),
      el("h2", {}, "Open another"), open);
  } catch (e) {
    fill(main, el("h1", {}, "Dead-letter queues"), el("p", { class: "err" }, e.message), open);
  }
}

// state of the dead-letter page
let dq = null;

function showDLQ(name) {
  // max: the most messages a listing reads, when the operator asked for
  // more than the server's default (null: the default).
  dq = { name, list: null, max: null, selected: new Set(), filter: { classes: [], attrs: [], since: "", until: "", text: "" } };
  const cls = el("select", { id: "f-class" }, el("option", { value: "" }, "any"));
  const attr = el("input", { id: "f-attr", placeholder: "name=value", size: 16 });
  const since = el("input", { id: "f-since", placeholder: "2h ago or RFC 3339", size: 18 });
  const until = el("input", { id: "f-until", placeholder: "30m ago or RFC 3339", size: 18 });
  const text = el("input", { id: "f-text", placeholder: "body contains", size: 18 });
  const form = el("form", { class: "filters", id: "filters", onsubmit: (e) => {
    e.preventDefault();
    dq.filter = { classes: cls.value ? [cls.value] : [], attrs: attr.value ? [attr.value] : [], since: since.value, until: until.value, text: text.value };
    dq.selected.clear();
    fill(document.getElementById("detail"));
    fill(document.getElementById("plan") || document.createElement("div"));
    loadList();
  } },
  el("label", {}, "Error class", cls), el("label", {}, "Attribute", attr), el("label", {}, "Failed since", since),
  el("label", {}, "Failed before", until), el("label", {}, "Text", text), el("button", { type: "submit", class: "primary", id: "apply" }, "Apply"));
  fill(main,
    el("h1", {}, "Dead letters: ", el("span", { id: "dlq-title" }, name)),
    form,
    el("div", { id: "last-result" }),
    el("div", { id: "list" }, el("p", { class: "muted" }, "Reading the queue…")),
    el("div", { id: "actions" }),
    el("div", { id: "detail" }));
  loadList();
}

function filterQuery(f) {
  const p = new URLSearchParams({ queue: dq.name });
  for (const c of f.classes) p.append("class", c);
  for (const a of f.attrs) p.append("attr", a);
  if (f.since) p.set("since", f.since);
  if (f.until) p.set("until", f.until);
  if (f.text) p.set("text", f.text);
  if (dq.max) p.set("max", dq.max);
  return p.toString();
}

async function loadList() {
  const my = view;
  const box = document.getElementById("list");
  fill(box, el("p", { class: "muted" }, "Reading the queue…"));
  try {
    const d = await api("api/dlq/messages?" + filterQuery(dq.filter));
    if (my !== view) return;
    dq.list = d;
    const sel = document.getElementById("f-class");
    const keep = sel.value;
    // The classes read, and the one filtered on even if none is left.
    const classes = [...new Set([...d.classes, ...dq.filter.classes])].sort();
    fill(sel, el("option", { value: "" }, "any"), ...classes.map((c) => el("option", { value: c }, c)));
    sel.value = keep;
    renderList();
  } catch (e) {
    if (my !== view) return;
    fill(box, el("p", { class: "err", id: "list-error" }, e.message));
  }
}

function renderList() {
  const d = dq.list;
  const all = el("input", { type: "checkbox", id: "select-all", title: "select all listed", onchange: (e) => {
    dq.selected = new Set(e.target.checked ? d.messages.map((m) => m.id) : []);
    renderList();
  } });
  all.checked = d.messages.length > 0 && dq.selected.size === d.messages.length;
  const rows = d.messages.map((m) => {
    const box = el("input", { type: "checkbox", class: "pick", onchange: (e) => {
      if (e.target.checked) dq.selected.add(m.id); else dq.selected.delete(m.id);
      renderList();
    } });
    box.checked = dq.selected.has(m.id);
    return el("tr", { "data-id": m.id, "data-class": m.errorClass, class: dq.selected.has(m.id) ? "selected" : "" },
      el("td", {}, box),
      el("td", {}, fmtTime(m.failedAt)),
      el("td", {}, m.hasFailure ? el("span", { class: "class" }, m.errorClass || "–") : el("span", { class: "muted" }, "no metadata")),
      el("td", { class: "errtext", title: m.error }, m.error),
      el("td", { class: "num" }, m.attempts || "–"),
      el("td", {}, fmtTime(m.firstReceived)),
      el("td", {}, queueName(m.sourceQueue), m.unverified ? el("span", { class: "err", title: m.unverified }, " (unverified)") : null),
      el("td", { class: "mono" }, m.originalId),
      el("td", {}, el("button", { type: "button", class: "show", onclick: () => showMessage(m.id) }, "Body…")));
  });
  fill(document.getElementById("list"),
    el("p", { class: "muted", id: "list-summary" }, `${d.messages.length} message(s) match (${d.filter}); ${d.scanned} read`,
      d.truncated ? ` of about ${d.approximate < 0 ? "?" : d.approximate}, stopped at the listing's limit of ${d.max}` : "", d.shortfall ? "; " + d.shortfall : ""),
    d.truncated ? truncatedNotice(d) : null,
    d.notes && d.notes.length ? el("p", { class: "note" }, d.notes.join(" ")) : null,
    el("table", { id: "messages" },
      el("thead", {}, el("tr", {}, el("th", {}, all), el("th", {}, "Failed at"), el("th", {}, "Error class"), el("th", {}, "Error"),
        el("th", { class: "num" }, "Attempts"), el("th", {}, "First received"), el("th", {}, "Source"), el("th", {}, "Original ID"), el("th", {}, ""))),
      el("tbody", {}, rows)));
  renderActions();
}

// truncatedNotice says that a listing stopped at its limit, and offers to
// read more, up to the server's bound.
function truncatedNotice(d) {
  const more = el("input", { type: "number", id: "scan-max", min: 1, max: d.maxScanMax, size: 7,
    value: Math.min(d.maxScanMax, Math.max(d.max * 2, d.approximate)) });
  const read = el("form", { class: "bar", id: "read-more-form", onsubmit: (e) => {
    e.preventDefault();
    dq.max = Number(more.value);
    dq.selected.clear();
    fill(document.getElementById("plan") || document.createElement("div"));
    loadList();
  } }, el("label", {}, "Read up to ", more, ` messages (at most ${d.maxScanMax})`), el("button", { type: "submit", id: "read-more" }, "Read"));
  return el("div", { class: "warn", id: "list-truncated" }, el("p", {}, d.notice), d.max < d.maxScanMax ? read : null);
}

function renderActions() {
  const box = document.getElementById("actions");
  if (!ACTIONS) {
    fill(box, el("p", { class: "note" }, "Read-only: start sqsworker ui with --allow-actions to replay and purge."));
    return;
  }
  const n = dq.selected.size;
  const to = el("input", { id: "replay-to", placeholder: "their source queue", size: 24 });
  fill(box,
    el("div", { class: "bar" },
      el("button", { type: "button", id: "plan-filtered", disabled: !dq.list.messages.length, onclick: () => planReplay(false, to.value) },
        `Dry run: replay the ${dq.list.messages.length} filtered`),
      el("button", { type: "button", id: "plan-selected", disabled: n === 0, onclick: () => planReplay(true, to.value) },
        `Dry run: replay the ${n} selected`),
      el("label", { class: "muted" }, "to ", to)),
    dq.list.truncated ? el("p", { class: "warn", id: "plan-scope" }, `This listing read only the first ${dq.list.scanned} messages: a dry run of the filtered reads the queue again and plans up to ${dq.list.max} matching messages, which may include some not listed here. It shows exactly what would move before you confirm.`) : null,
    el("div", { id: "plan" }),
    purgePanel());
}

async function planReplay(selectedOnly, to) {
  const box = document.getElementById("plan");
  fill(document.getElementById("last-result"));
  fill(box, el("div", { class: "panel plan" }, "Dry run under way…"));
  try {
    const d = await api("api/dlq/plan", { queue: dq.name, filter: dq.filter, ids: selectedOnly ? [...dq.selected] : [], to, max: dq.list.max });
    const res = d.result;
    const rows = res.messages.map((m) => el("tr", { "data-id": m.messageId },
      el("td", { class: "mono" }, m.originalMessageId), el("td", {}, el("span", { class: "class" }, m.errorClass || "–")),
      el("td", {}, fmtTime(m.failedAt)), el("td", {}, "→ " + queueName(m.destination))));
    const stayed = (res.stayed || []).map((s) => el("li", {}, `${s.originalMessageId}: ${s.reason}`));
    const confirm = el("button", { type: "button", class: "primary", id: "confirm-replay", disabled: res.messages.length === 0,
      onclick: () => { confirm.disabled = true; runReplay(d.planId, res.messages.length); } },
    d.notice ? `Confirm: move only these ${res.messages.length} message(s)` : `Confirm: move these ${res.messages.length} message(s)`);
    fill(box, el("div", { class: "panel plan", id: "plan-panel" },
      el("strong", {}, `Dry run: ${res.matched} message(s) would move`), el("span", { class: "muted" }, ` (read ${res.scanned}; ${res.filter}). Nothing has moved yet.`),
      (d.warnings || []).map((w) => el("p", { class: "err plan-warning" }, w)),
      d.notice ? el("p", { class: "warn", id: "plan-limit" }, d.notice) : null,
      el("table", { id: "plan-table" }, el("thead", {}, el("tr", {}, el("th", {}, "Original ID"), el("th", {}, "Error class"), el("th", {}, "Failed at"), el("th", {}, "Destination"))), el("tbody", {}, rows)),
      stayed.length ? el("div", {}, el("p", { class: "err" }, `${stayed.length} would stay:`), el("ul", {}, stayed)) : null,
      res.noSource ? el("p", { class: "err" }, `${res.noSource} have no source queue: give a destination.`) : null,
      res.duplicates ? el("p", { class: "muted", id: "plan-duplicates" }, `${res.duplicates} duplicate copy(ies) of these jobs would be deleted (the same original message ID, source queue, body and attributes): each job is replayed once.`) : null,
      el("div", { class: "bar" }, confirm, el("button", { type: "button", onclick: () => fill(box) }, "Cancel")),
      el("div", { id: "replay-progress" })));
  } catch (e) {
    fill(box, el("div", { class: "panel plan err", id: "plan-error" }, e.message));
  }
}

async function runReplay(planId, total) {
  const box = document.getElementById("replay-progress");
  const bar = el("progress", { max: total, value: 0 });
  const text = el("span", { class: "muted" }, "starting…");
  fill(box, el("div", { class: "bar" }, bar, text));
  try {
    const { jobId } = await api("api/dlq/replay", { planId });
    for (;;) {
      const j = await api("api/jobs/" + jobId);
      bar.value = j.progress.Moved;
      text.textContent = `moved ${j.progress.Moved} of ${total} (read ${j.progress.Scanned})`;
      if (j.done) {
        // The result stays above the list, which is read again.
        const r = j.result || { moved: 0 };
        fill(document.getElementById("last-result"), el("div", { class: "panel plan" }, el("span", { class: j.error || r.notDeleted || r.expired ? "err" : "ok", id: "replay-result" },
          `Moved ${r.moved} message(s) to ${[...new Set((r.messages || []).map((m) => queueName(m.destination)))].join(", ") || "–"}` +
          (r.notDeleted ? `; ${r.notDeleted} copied but not deleted (in both queues)` : "") +
          (r.expired ? `; ${r.expired} not copied: their visibility timeout ran out before their turn, and another reader may hold them (replay again)` : "") +
          (r.duplicates ? `; ${r.duplicates} duplicate copy(ies) deleted` : "") +
          (j.error ? ": " + j.error : ". Recorded in the audit log.")),
          j.notice ? el("p", { class: "warn", id: "replay-notice" }, j.notice) : null));
        dq.selected.clear();
        loadList();
        return;
      }
      await new Promise((ok) => setTimeout(ok, 500));
    }
  } catch (e) {
    fill(box, el("p", { class: "err", id: "replay-result" }, e.message));
  }
}

function purgePanel() {
  const name = dq.list.queue;
  const typed = el("input", { id: "purge-confirm", placeholder: name, size: 30, autocomplete: "off" });
  const btn = el("button", { type: "button", class: "danger", id: "purge", disabled: true, onclick: async () => {
    btn.disabled = true;
    try {
      await api("api/dlq/purge", { queue: dq.name, confirm: typed.value });
      fill(out, el("span", { class: "ok" }, `Purged ${name}: SQS may take up to 60 seconds. Recorded in the audit log.`));
    } catch (e) { fill(out, el("span", { class: "err" }, e.message)); }
  } }, "Purge");
  typed.addEventListener("input", () => { btn.disabled = typed.value !== name; });
  const out = el("span", { id: "purge-result" });
  return el("div", { class: "panel danger" }, el("strong", {}, "Purge"),
    el("p", { id: "purge-warning" }, `${dq.list.purgeWarning} Type the queue name to confirm.`),
    el("div", { class: "bar" }, typed, btn, out));
}

async function showMessage(id) {
  const box = document.getElementById("detail");
  fill(box, el("div", { class: "panel" }, "Reading message " + id + "…"));
  try {
    const m = await api("api/dlq/message?" + new URLSearchParams({ queue: dq.name, id, max: dq.list.max }));
    const attrs = Object.entries(m.messageAttributes || {}).sort().map(([k, v]) => el("tr", {}, el("td", { class: "mono" }, k), el("td", { class: "mono" }, v)));
    fill(box, el("div", { class: "panel", id: "message-detail" },
      el("div", { class: "bar" }, el("strong", {}, "Message " + m.originalId), el("button", { type: "button", onclick: () => fill(box) }, "Close")),
      el("p", {}, el("span", { class: "class" }, m.errorClass || "–"), " ", m.error),
      el("h2", {}, "Body"), el("pre", { id: "message-body" }, m.body),
      el("h2", {}, "Message attributes"), el("table", {}, el("tbody", {}, attrs))));
    box.scrollIntoView({ block: "nearest" });
  } catch (e) {
    fill(box, el("div", { class: "panel err" }, e.message));
  }
}

// ---------- Audit ----------

async function showAudit() {
  const my = view;
  fill(main, el("h1", {}, "Audit log"), el("p", { class: "muted" }, "Reading…"));
  try {
    const d = await api("api/audit");
    if (my !== view) return;
    const rows = d.records.map((r) => el("tr", { "data-action": r.action },
      el("td", {}, fmtTime(r.time)), el("td", {}, r.action), el("td", {}, queueName(r.dlq)), el("td", {}, queueName(r.destination)),
      el("td", { class: "mono" }, r.originalMessageId || ""), el("td", { class: "mono" }, r.newMessageId || ""),
      el("td", {}, r.filter || (r.approximateMessages ? `about ${r.approximateMessages} message(s)` : "")),
      el("td", { title: r.callerNote || "" }, r.caller), el("td", {}, r.note || "")));
    fill(main, el("h1", {}, "Audit log"),
      el("p", { class: "muted" }, d.file ? `The last ${d.records.length} record(s) of ${d.file}, newest first.` : "No audit log file (--audit -): nothing to show."),
      el("table", { id: "audit-table" }, el("thead", {}, el("tr", {}, ["Time", "Action", "DLQ", "Destination", "Original ID", "New ID", "Filter", "Caller", "Note"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows)));
  } catch (e) {
    fill(main, el("h1", {}, "Audit log"), el("p", { class: "err" }, e.message));
  }
}

// showCrossSiteEntry stands for a dead-letter page opened from another
// site's link: the queue is read only when the operator asks.
function showCrossSiteEntry(name) {
  fill(main, el("h1", {}, "Dead letters: ", el("span", { id: "dlq-title" }, name)),
    el("p", { class: "note", id: "cross-site-note" }, "This page was opened from another site. Reading a dead-letter queue receives its messages: ",
      el("a", { href: "#/dlq/" + encodeURIComponent(name), onclick: (e) => { e.preventDefault(); crossSiteEntry = false; route(); } }, "read " + name),
      " if you meant to."));
}

// ---------- Router ----------

function route() {
  view++;
  clearTimeout(pollTimer);
  const h = location.hash || "#/queues";
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", h.startsWith(a.getAttribute("href")));
  if (h.startsWith("#/dlq/") && crossSiteEntry) showCrossSiteEntry(decodeURIComponent(h.slice(6)));
  else if (h.startsWith("#/dlq/")) showDLQ(decodeURIComponent(h.slice(6)));
  else if (h === "#/dlq") showDLQIndex();
  else if (h === "#/audit") showAudit();
  else showQueues();
}

window.addEventListener("hashchange", route);
route();
