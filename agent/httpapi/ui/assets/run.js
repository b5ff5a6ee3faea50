// /ui/runs/{runId}: one run — status, device, lease, policy version, the
// timeline of its nodes, the live event stream (token_delta lines in full),
// each node's output and the error report, the evidence of each step, and
// the control buttons (enabled only when the action applies; the API's
// refusal is shown). One SSE stream (the run's events); the page re-reads
// the run when an event changes it.
import { el, replace, api, apiBlob, artifactWorker, stream, errorBox, statusBadge, fmtMillis, fmtTime, ageOf, AuthError } from "./lib.js";

const TERMINAL = new Set(["FINISHED", "FAILED", "CANCELED"]);

export async function render(main, params, ctx) {
  const id = params.runId;
  const base = "/v1/runs/" + encodeURIComponent(id);
  const abort = new AbortController();
  const blobs = [];

  const status = el("span", { id: "run-status" });
  const facts = el("dl", { class: "facts", id: "facts" });
  const lease = el("dl", { class: "facts", id: "lease" });
  const timeline = el("div", { class: "timeline", id: "timeline" });
  const failure = el("div", { id: "failure" });
  const outputs = el("div", { id: "outputs" });
  const evidence = el("div", { id: "evidence" });
  const events = el("div", { class: "log", id: "events", role: "log", "aria-live": "off", tabindex: "0" });
  const eventsNote = el("p", { class: "muted", id: "events-note" });
  const result = el("div", { id: "control-result", "aria-live": "polite" });

  const pause = el("button", { type: "button", id: "pause" }, "Pause");
  const resume = el("button", { type: "button", id: "resume" }, "Resume");
  const cancel = el("button", { type: "button", id: "cancel" }, "Cancel");
  const version = el("input", { id: "policy-version", type: "number", min: "1", step: "1", inputmode: "numeric", "aria-label": "Policy version" });
  const policy = el("button", { type: "submit", id: "policy-switch" }, "Switch policy");
  const policyForm = el("form", { class: "controls", id: "policy-form" }, el("label", {}, "Policy version", version), policy);

  replace(main,
    el("h1", {}, "Run ", el("span", { id: "run-id" }, id), " ", status),
    el("div", { class: "controls", role: "group", "aria-label": "Run control" }, pause, resume, cancel), policyForm, result,
    el("div", { class: "grid" },
      el("section", { class: "panel", "aria-labelledby": "h-run" }, el("h2", { id: "h-run" }, "Run"), facts),
      el("section", { class: "panel", "aria-labelledby": "h-lease" }, el("h2", { id: "h-lease" }, "Device lease"), lease)),
    el("section", { "aria-labelledby": "h-tl" }, el("h2", { id: "h-tl" }, "Timeline"), timeline),
    failure,
    el("section", { "aria-labelledby": "h-ev" }, el("h2", { id: "h-ev" }, "Evidence"), evidence),
    el("section", { "aria-labelledby": "h-out" }, el("h2", { id: "h-out" }, "Node outputs"), outputs),
    el("section", { "aria-labelledby": "h-log" }, el("h2", { id: "h-log" }, "Events"), eventsNote, events));

  let run = null, leaseRow = null, artifactsShown = "";
  // failed: the last agent.node.finished payload of each node that failed
  // (the state snapshot keeps only the outputs of nodes that succeeded).
  const failed = new Map();

  function setControls() {
    const s = run ? run.status : "";
    pause.disabled = !(s === "RUNNING" || s === "PENDING");
    resume.disabled = s !== "PAUSED";
    cancel.disabled = !s || TERMINAL.has(s) || s === "CANCELED_REQUESTED";
    policy.disabled = version.disabled = !s || TERMINAL.has(s);
  }

  async function control(path, body) {
    replace(result);
    try {
      const r = await api(base + path, { method: "POST", body: body === undefined ? undefined : body });
      replace(result, el("p", { class: "notice" }, "Requested " + r.kind + " (" + r.requestId + "); it takes effect between nodes."));
      refresh();
    } catch (e) {
      if (e instanceof AuthError) { ctx.signIn(e); return; }
      replace(result, errorBox(e));
    }
  }
  pause.addEventListener("click", () => control("/pause"));
  resume.addEventListener("click", () => control("/resume"));
  cancel.addEventListener("click", () => control("/cancel"));
  policyForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = Number(version.value);
    if (!Number.isInteger(v) || v < 1) { replace(result, errorBox(new Error("Policy version: a whole number from 1"))); return; }
    control("/policy", { version: v });
  });

  function fact(dl, k, v, id) { dl.append(el("dt", {}, k), el("dd", id ? { id } : {}, v === undefined || v === null ? "" : v)); }

  function renderRun(d) {
    run = d;
    setLease(d.lease || null);
    replace(status, statusBadge(d.status));
    status.setAttribute("data-status", d.status);
    replace(facts);
    fact(facts, "Tenant", d.tenantId);
    if (d.projectId) fact(facts, "Project", d.projectId);
    fact(facts, "Device", d.serial, "run-serial");
    fact(facts, "Graph", d.graph);
    fact(facts, "Policy version", String(d.policyVersion), "run-policy");
    fact(facts, "Created", fmtTime(d.createdAt));
    fact(facts, "Started", fmtTime(d.startedAt));
    fact(facts, "Ended", fmtTime(d.endedAt));
    fact(facts, "Took", d.tookMillis ? fmtMillis(d.tookMillis) : "");
    fact(facts, "Events / steps", d.events + " / " + d.steps);
    if (d.input) {
      facts.append(el("dt", {}, "Input"), el("dd", {}, el("details", {}, el("summary", {}, "Run request"), el("pre", { id: "run-input" }, JSON.stringify(d.input, null, 2)))));
    }
    setControls();
    renderTimeline(d);
    renderFailure(d);
    renderOutputs(d);
  }

  function renderTimeline(d) {
    const nodes = d.nodes || [];
    if (!nodes.length) { replace(timeline, el("p", { class: "muted" }, "No node has finished yet.")); return; }
    const t0 = Date.parse(d.startedAt || nodes[0].startedAt || nodes[0].finishedAt);
    const tEnd = Math.max(...nodes.map((n) => Date.parse(n.finishedAt) || t0), Date.parse(d.endedAt) || 0);
    const span = Math.max(1, tEnd - t0);
    replace(timeline, nodes.map((n) => {
      const start = Date.parse(n.startedAt) || (Date.parse(n.finishedAt) - n.durationMillis);
      const left = Math.max(0, Math.min(100, ((start - t0) / span) * 100));
      const width = Math.max(0.5, Math.min(100 - left, (n.durationMillis / span) * 100));
      const bar = el("div", { class: "tl-bar " + String(n.outcome).replace(/[^A-Z_]/g, "") });
      // Geometry through the CSSOM (allowed by the CSP, unlike style attributes).
      bar.style.left = left + "%";
      bar.style.width = width + "%";
      const label = n.node + (n.attempt > 1 ? " (attempt " + n.attempt + ")" : "");
      return el("div", { class: "tl-row", "data-node": n.node, "data-outcome": n.outcome },
        el("span", { class: "tl-name" }, label),
        el("div", { class: "tl-track", role: "img", "aria-label": label + ": " + n.outcome + ", " + fmtMillis(n.durationMillis) }, bar),
        el("span", { class: "tl-dur" }, fmtMillis(n.durationMillis), " ", el("span", { class: "status " + String(n.outcome).replace(/[^A-Z_]/g, "") }, n.outcome),
          n.errorId ? " " + n.errorId : ""));
    }));
  }

  // outputsOf is every node's last output: the snapshot's, and the failed
  // attempts' from their events.
  function outputsOf(d) {
    const all = { ...(d.outputs || {}) };
    for (const [node, p] of failed) {
      if (!all[node] || all[node].nodeExecutionOutcomeStatus !== "SUCCESS") {
        all[node] = { ...(p.output || {}), nodeExecutionOutcomeStatus: p.nodeExecutionOutcomeStatus,
          errorId: p.errorId, humanReadableFailureSummary: p.humanReadableFailureSummary };
      }
    }
    return all;
  }

  function renderFailure(d) {
    const rep = d.error;
    const parts = [];
    for (const [node, out] of Object.entries(outputsOf(d))) {
      if (!out || out.nodeExecutionOutcomeStatus !== "FAILURE") continue;
      parts.push(el("div", { class: "error", "data-node": node },
        el("strong", {}, node + ": "), out.humanReadableFailureSummary || "failed",
        out.errorId ? el("div", {}, "errorId: ", el("code", {}, out.errorId)) : null,
        out.appFailure ? el("div", {}, el("div", {}, "appFailure:"), el("pre", { class: "app-failure" }, JSON.stringify(out.appFailure, null, 2))) : null));
    }
    if (rep) {
      parts.push(el("details", {}, el("summary", {}, "Error report (agent error format)"), el("pre", { id: "error-report" }, JSON.stringify(rep, null, 2))));
    }
    if (!parts.length) { replace(failure); return; }
    replace(failure, el("section", { "aria-labelledby": "h-fail" }, el("h2", { id: "h-fail" }, "Why it failed"),
      rep && rep.error ? el("p", { class: "error", id: "failure-summary" }, rep.error) : null, parts));
  }

  // inChainOrder sorts [node, output] entries as the nodes ran (the timeline,
  // d.nodes, is in event order); nodes it does not name come last.
  function inChainOrder(d, entries) {
    const order = new Map();
    for (const n of d.nodes || []) if (!order.has(n.node)) order.set(n.node, order.size);
    const at = (node) => (order.has(node) ? order.get(node) : order.size);
    return entries.sort((a, b) => at(a[0]) - at(b[0]));
  }

  function renderOutputs(d) {
    const entries = inChainOrder(d, Object.entries(outputsOf(d)));
    if (!entries.length) { replace(outputs, el("p", { class: "muted" }, "No output yet.")); return; }
    replace(outputs, entries.map(([node, out]) => el("details", { "data-node": node },
      el("summary", {}, node + (out && out.nodeExecutionOutcomeStatus ? " — " + out.nodeExecutionOutcomeStatus : "")),
      el("pre", {}, JSON.stringify(out, null, 2)))));
  }

  function renderLease() {
    replace(lease);
    if (!leaseRow) { lease.append(el("dt", {}, "Lease"), el("dd", { id: "lease-holder" }, "none")); return; }
    fact(lease, "Holder", leaseRow.holder, "lease-holder");
    fact(lease, "Device", leaseRow.device || leaseRow.serial);
    fact(lease, "Fencing token", String(leaseRow.fencingToken), "lease-fencing");
    fact(lease, "Heartbeat", heartbeatText(leaseRow), "lease-heartbeat");
    fact(lease, "Expires", fmtTime(leaseRow.expiresAt));
  }

  // setLease takes the run's lease from the run's detail (lease, with the
  // daemon's heartbeatAgeMillis) or from GET /v1/leases?runId= (renewedAt).
  function setLease(l) {
    leaseRow = l ? { ...l, fetchedAt: Date.now() } : null;
    renderLease();
  }
  function heartbeatText(l) {
    if (l.releasedAt) return "released " + fmtTime(l.releasedAt) + (l.releaseReason ? " (" + l.releaseReason + ")" : "");
    if (typeof l.heartbeatAgeMillis === "number") return fmtMillis(l.heartbeatAgeMillis + (Date.now() - l.fetchedAt)) + " ago";
    return ageOf(l.renewedAt);
  }

  async function loadLease() {
    const ls = await api("/v1/leases?limit=1&runId=" + encodeURIComponent(id), { signal: abort.signal });
    const l = (ls.leases || [])[0];
    if (l) setLease(l);
  }

  async function loadEvidence() {
    let list;
    try { list = (await api(base + "/artifacts", { signal: abort.signal })).artifacts || []; } catch (e) {
      if (e instanceof AuthError) throw e;
      replace(evidence, errorBox(e));
      return;
    }
    const key = list.map((a) => a.artifactId).join(",");
    if (key === artifactsShown) return;
    artifactsShown = key;
    if (!list.length) { replace(evidence, el("p", { class: "muted" }, "No evidence kept.")); return; }
    const steps = new Map();
    for (const a of list) {
      const k = a.stepOrdinal + " " + a.node;
      if (!steps.has(k)) steps.set(k, []);
      steps.get(k).push(a);
    }
    replace(evidence, [...steps.entries()].map(([k, arts]) => {
      const [step, node] = [arts[0].stepOrdinal, arts[0].node];
      const box = el("div", { class: "evidence", "data-step": String(step) });
      for (const a of arts) box.append(artifactView(a, node, step));
      return el("div", {}, el("h3", {}, "Step " + step + " — " + node), box);
    }));
  }

  function artifactView(a, node, step) {
    const url = base + "/artifacts/" + encodeURIComponent(a.artifactId);
    if (a.kind === "video") {
      // Streamed from the artifact endpoint with byte ranges through the
      // service worker (sw.js adds the bearer); where no worker can run (a
      // page not served from a secure context), fetched whole with the
      // bearer into a blob: URL.
      const video = el("video", { controls: true, preload: "metadata", muted: true, playsinline: true, class: "run-video",
        "data-artifact": a.artifactId, "aria-label": "Video of the run up to " + node + " (step " + step + ")" });
      videoSource(url).then((src) => { video.src = src; })
        .catch((e) => video.replaceWith(errorBox(e)));
      return el("figure", { "data-kind": a.kind }, video, el("figcaption", { class: "muted" }, a.kind + " · " + a.bytes + " bytes"));
    }
    if (a.contentType === "image/png" || a.kind === "screenshot") {
      // A click (or Enter) shows it at its full size, another shrinks it back.
      const img = el("img", { alt: "Screenshot after " + node + " (step " + step + ")", class: "screenshot", "data-artifact": a.artifactId,
        tabindex: "0", role: "button", "aria-pressed": "false", title: "Click for full size" });
      const zoom = () => { const on = img.classList.toggle("full"); img.setAttribute("aria-pressed", String(on)); };
      img.addEventListener("click", zoom);
      img.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); zoom(); } });
      apiBlob(url, abort.signal).then((b) => { const u = URL.createObjectURL(b); blobs.push(u); img.src = u; })
        .catch((e) => img.replaceWith(errorBox(e)));
      return el("figure", {}, img, el("figcaption", { class: "muted" }, a.kind + " · " + a.bytes + " bytes"));
    }
    const pre = el("pre", { hidden: true, class: "artifact-text" });
    const btn = el("button", { type: "button", "aria-expanded": "false" }, "Show " + a.kind);
    btn.addEventListener("click", async () => {
      if (!pre.hidden) { pre.hidden = true; btn.setAttribute("aria-expanded", "false"); btn.textContent = "Show " + a.kind; return; }
      try {
        const b = await apiBlob(url, abort.signal);
        pre.textContent = await b.text();
        pre.hidden = false;
        btn.setAttribute("aria-expanded", "true");
        btn.textContent = "Hide " + a.kind;
      } catch (e) { pre.replaceWith(errorBox(e)); }
    });
    return el("figure", { "data-kind": a.kind }, el("figcaption", {}, a.kind + " · " + a.bytes + " bytes "), btn, pre);
  }

  // videoSource is what a <video> plays for an artifact URL: the URL itself
  // once the service worker controls this page, else a blob: URL.
  async function videoSource(url) {
    if (await artifactWorker()) return url;
    const u = URL.createObjectURL(await apiBlob(url, abort.signal));
    blobs.push(u);
    return u;
  }

  async function refresh() {
    try {
      renderRun(await api(base, { signal: abort.signal }));
      await loadEvidence();
    } catch (e) {
      if (abort.signal.aborted) return;
      if (e instanceof AuthError) { ctx.signIn(e); return; }
      replace(result, errorBox(e));
    }
  }
  let pending = null;
  function refreshSoon() {
    if (pending) return;
    pending = setTimeout(() => { pending = null; refresh(); }, 250);
  }

  function eventLine(e) {
    const p = e.payload || {};
    let text = "";
    if (e.kind === "agent.node.token_delta") text = (p.nodeName ? p.nodeName + ": " : "") + (p.text || "") + (p.percent !== undefined ? " (" + p.percent + "%)" : "");
    else if (p.nodeName) text = p.nodeName + (p.nodeExecutionOutcomeStatus ? " " + p.nodeExecutionOutcomeStatus : "") + (p.durationMillis !== undefined ? " in " + fmtMillis(p.durationMillis) : "") +
      (p.humanReadableFailureSummary ? " — " + p.humanReadableFailureSummary : "");
    else if (p.status) text = p.status + (p.humanReadableFailureSummary ? " — " + p.humanReadableFailureSummary : "");
    else if (p.policyVersion) text = "policy version " + p.policyVersion;
    return el("div", { "data-kind": e.kind, "data-seq": String(e.sequence) },
      el("span", { class: "muted" }, "#" + e.sequence + " " + fmtTime(e.ts) + " "), el("span", { class: "kind" }, e.kind), text);
  }

  // First paint, then the live stream (it replays the run's events first).
  renderRun(await api(base, { signal: abort.signal }));
  await loadEvidence();
  // The heartbeat's age ticks locally each second; the lease itself is
  // re-read every 5 s while the run holds it (slower than the API's own 1 s
  // event poll), so the age restarts at each renewal.
  let tick = 0;
  const heartbeat = setInterval(() => {
    if (!leaseRow || leaseRow.releasedAt) return;
    if (++tick % 5 === 0 && run && !TERMINAL.has(run.status)) loadLease().catch(() => {});
    const h = document.getElementById("lease-heartbeat");
    if (h) h.textContent = heartbeatText(leaseRow);
  }, 1000);

  (async () => {
    let last = "";
    for (let attempt = 0; !abort.signal.aborted; attempt++) {
      try {
        eventsNote.textContent = "Live: following this run's events.";
        await stream(base + "/events?follow=1", ({ event, id: seq, data }) => {
          if (seq) last = seq;
          if (event === "end") return;
          if (!data || typeof data !== "object") return;
          events.append(eventLine(data));
          const p = data.payload || {};
          if (data.kind === "agent.node.finished" && p.nodeName) {
            if (p.nodeExecutionOutcomeStatus === "FAILURE") failed.set(p.nodeName, p); else failed.delete(p.nodeName);
            if (run) { renderFailure(run); renderOutputs(run); }
          }
          if (data.kind !== "agent.node.token_delta" && data.kind !== "agent.node.started") refreshSoon();
        }, { signal: abort.signal, lastEventId: last });
        eventsNote.textContent = "The run has ended; every event is shown.";
        refresh();
        return;
      } catch (e) {
        if (abort.signal.aborted) return;
        if (e instanceof AuthError) { ctx.signIn(e); return; }
        eventsNote.textContent = "Live events interrupted: " + (e.message || e) + "; retrying.";
      }
      await new Promise((res) => setTimeout(res, Math.min(30000, 1000 * 2 ** Math.min(attempt, 5))));
    }
  })();

  return () => { abort.abort(); clearInterval(heartbeat); if (pending) clearTimeout(pending); blobs.forEach((u) => URL.revokeObjectURL(u)); };
}
