// /ui/: the runs table, newest first, paged with the API's cursor, filtered
// by status, serial and (admin) tenant; kept live by ONE stream of run
// changes (GET /v1/runs?follow=1) — no polling.
import { el, replace, api, stream, errorBox, statusBadge, fmtTime, fmtMillis, link, AuthError } from "./lib.js";

const STATUSES = ["PENDING", "RUNNING", "PAUSED", "CANCELED_REQUESTED", "CANCELED", "FINISHED", "FAILED"];
const PAGE = 50;
const ENDED = new Set(["CANCELED", "FINISHED", "FAILED"]);

export async function render(main, _params, ctx) {
  const q = new URLSearchParams(location.search);
  const filter = { status: q.get("status") || "", serial: q.get("serial") || "", tenant: q.get("tenant") || "" };
  const abort = new AbortController();

  const status = el("select", { id: "f-status", name: "status" },
    el("option", { value: "" }, "any"), STATUSES.map((s) => el("option", { value: s, selected: s === filter.status }, s)));
  const serial = el("input", { id: "f-serial", name: "serial", value: filter.serial, maxlength: "255", placeholder: "emulator-5554" });
  const tenant = el("input", { id: "f-tenant", name: "tenant", value: filter.tenant, maxlength: "64", placeholder: "any (admin)" });
  const form = el("form", { class: "filters", role: "search" },
    el("label", {}, "Status", status), el("label", {}, "Serial", serial), el("label", {}, "Tenant", tenant),
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    if (status.value) p.set("status", status.value);
    if (serial.value.trim()) p.set("serial", serial.value.trim());
    if (tenant.value.trim()) p.set("tenant", tenant.value.trim());
    ctx.navigate("/ui/" + (p.toString() ? "?" + p : ""));
  });

  const tbody = el("tbody", { id: "runs-body" });
  const table = el("div", { class: "table-wrap" }, el("table", { id: "runs" },
    el("thead", {}, el("tr", {}, ["Run", "Status", "Serial", "Tenant", "Graph", "Policy", "Created", "Updated", "Took"].map((h) => el("th", { scope: "col" }, h)))),
    tbody));
  const more = el("button", { type: "button", id: "more", hidden: true }, "Older runs");
  const live = el("p", { class: "muted", id: "live", "aria-live": "polite" }, "");
  const problem = el("div", {});
  replace(main, el("h1", {}, "Runs"), form, problem, table, el("p", {}, more), live);

  const rows = new Map(); // runId -> {tr, run}

  function cells(run) {
    return [
      el("td", {}, link("/ui/runs/" + encodeURIComponent(run.runId), run.runId)),
      el("td", {}, statusBadge(run.status)),
      el("td", { class: "wrap" }, run.serial || ""),
      el("td", { class: "wrap" }, run.tenantId || ""),
      el("td", {}, run.graph || ""),
      el("td", {}, String(run.policyVersion ?? "")),
      el("td", {}, fmtTime(run.createdAt)),
      el("td", {}, fmtTime(run.updatedAt)),
      // As the CLI's runs list: an ended run's time from submit to its end.
      el("td", { class: "took" }, ENDED.has(run.status) ? fmtMillis(Date.parse(run.updatedAt) - Date.parse(run.createdAt)) : ""),
    ];
  }
  function matches(run) {
    return (!filter.status || run.status === filter.status) && (!filter.serial || run.serial === filter.serial) &&
      (!filter.tenant || run.tenantId === filter.tenant);
  }
  function upsert(run, atTop) {
    const have = rows.get(run.runId);
    if (have) {
      if (!matches(run)) { have.tr.remove(); rows.delete(run.runId); return; }
      replace(have.tr, cells(run));
      have.run = run;
      have.tr.classList.remove("flash"); void have.tr.offsetWidth; have.tr.classList.add("flash");
      return;
    }
    if (!matches(run)) return;
    const tr = el("tr", { "data-run": run.runId, "data-status": run.status }, cells(run));
    rows.set(run.runId, { tr, run });
    if (atTop) { tr.classList.add("flash"); tbody.prepend(tr); } else tbody.append(tr);
  }
  function setStatusAttr(run) { const r = rows.get(run.runId); if (r) r.tr.setAttribute("data-status", run.status); }

  function query(extra) {
    const p = new URLSearchParams(extra);
    if (filter.status) p.set("status", filter.status);
    if (filter.serial) p.set("serial", filter.serial);
    if (filter.tenant) p.set("tenant", filter.tenant);
    return p;
  }

  let cursor = "";
  async function page() {
    const p = query({ limit: String(PAGE) });
    if (cursor) p.set("cursor", cursor);
    const list = await api("/v1/runs?" + p, { signal: abort.signal });
    for (const r of list.runs) upsert(r, false);
    cursor = list.nextCursor || "";
    more.hidden = !cursor;
    if (!rows.size) replace(tbody, el("tr", { id: "no-runs" }, el("td", { colspan: "8", class: "muted" }, "No runs yet.")));
  }
  more.addEventListener("click", () => page().catch((e) => replace(problem, errorBox(e))));
  await page();

  // Live: the stream sends each run whose row changed (submitted, status,
  // policy). Without a status filter on the stream, a run leaving the
  // filtered status is removed from the table.
  (async () => {
    let last = "";
    for (let attempt = 0; !abort.signal.aborted; attempt++) {
      try {
        const p = new URLSearchParams({ follow: "1" });
        if (filter.serial) p.set("serial", filter.serial);
        if (filter.tenant) p.set("tenant", filter.tenant);
        live.textContent = "Live: following run changes.";
        await stream("/v1/runs?" + p, ({ event, id, data }) => {
          if (id) last = id;
          if (event !== "run" || !data || !data.runId) return;
          const none = document.getElementById("no-runs");
          if (none) none.remove();
          upsert(data, true);
          setStatusAttr(data);
        }, { signal: abort.signal, lastEventId: last });
        attempt = 0;
      } catch (e) {
        if (abort.signal.aborted) return;
        if (e instanceof AuthError) { ctx.signIn(e); return; }
        live.textContent = "Live updates interrupted: " + (e.message || e) + "; retrying.";
      }
      // Reconnect after the server closed the stream (or it failed), backing
      // off to at most 30 s.
      await new Promise((res) => setTimeout(res, Math.min(30000, 1000 * 2 ** Math.min(attempt, 5))));
    }
  })();
  return () => abort.abort();
}
