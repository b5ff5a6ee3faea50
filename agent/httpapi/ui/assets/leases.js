// /ui/leases: the device lease history, newest first (fencing token
// descending), paged with the API's cursor (GET /v1/leases?limit=&before=),
// optionally of one serial or one run. No stream and no polling: a page is
// read when asked for (Refresh, Older leases).
import { el, replace, api, errorBox, fmtTime, link } from "./lib.js";

export const PAGE = 25;

export async function render(main, _params, ctx) {
  const q = new URLSearchParams(location.search);
  const filter = { serial: q.get("serial") || "", runId: q.get("runId") || "" };
  const abort = new AbortController();

  const serial = el("input", { id: "f-serial", name: "serial", value: filter.serial, maxlength: "255", placeholder: "emulator-5554" });
  const runId = el("input", { id: "f-run", name: "runId", value: filter.runId, maxlength: "64", placeholder: "any run" });
  const form = el("form", { class: "filters", role: "search" },
    el("label", {}, "Serial", serial), el("label", {}, "Run", runId), el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    if (serial.value.trim()) p.set("serial", serial.value.trim());
    if (runId.value.trim()) p.set("runId", runId.value.trim());
    ctx.navigate("/ui/leases" + (p.toString() ? "?" + p : ""));
  });
  const refresh = el("button", { type: "button", id: "refresh" }, "Refresh");
  const tbody = el("tbody", { id: "leases-body" });
  const table = el("div", { class: "table-wrap" }, el("table", { id: "leases" },
    el("thead", {}, el("tr", {}, ["Fencing token", "Device", "Run", "Holder", "Acquired", "Renewed", "Expires", "Released"].map((h) => el("th", { scope: "col" }, h)))),
    tbody));
  const more = el("button", { type: "button", id: "more", hidden: true }, "Older leases");
  const count = el("p", { class: "muted", id: "leases-count", "aria-live": "polite" });
  const problem = el("div", {});
  replace(main, el("h1", {}, "Leases"), form, el("div", { class: "controls" }, refresh), problem, table, el("p", {}, more), count);

  function row(l) {
    return el("tr", { "data-token": String(l.fencingToken), "data-run": l.runId || "", "data-active": l.releasedAt ? "false" : "true" },
      el("td", {}, String(l.fencingToken)),
      el("td", { class: "wrap" }, l.serial || "", l.device && l.device !== l.serial ? el("div", { class: "muted" }, l.device) : null),
      el("td", {}, l.runId ? link("/ui/runs/" + encodeURIComponent(l.runId), l.runId) : ""),
      el("td", { class: "wrap" }, l.holder || ""),
      el("td", {}, fmtTime(l.acquiredAt)),
      el("td", {}, fmtTime(l.renewedAt)),
      el("td", {}, fmtTime(l.expiresAt)),
      el("td", {}, l.releasedAt ? fmtTime(l.releasedAt) + (l.releaseReason ? " (" + l.releaseReason + ")" : "") : el("strong", {}, "active")));
  }

  let cursor = "", shown = 0;
  async function page(first) {
    const p = new URLSearchParams({ limit: String(PAGE) });
    if (filter.serial) p.set("serial", filter.serial);
    if (filter.runId) p.set("runId", filter.runId);
    if (!first && cursor) p.set("before", cursor);
    const list = await api("/v1/leases?" + p, { signal: abort.signal });
    const ls = list.leases || [];
    if (first) { replace(tbody); shown = 0; }
    tbody.append(...ls.map(row));
    shown += ls.length;
    if (!shown) replace(tbody, el("tr", { id: "no-leases" }, el("td", { colspan: "8", class: "muted" }, "No leases.")));
    cursor = list.nextCursor || "";
    more.hidden = !cursor;
    count.textContent = shown + " leases shown" + (cursor ? "; older ones follow." : ".");
    replace(problem);
  }
  const fail = (e) => { if (!abort.signal.aborted) replace(problem, errorBox(e)); };
  more.addEventListener("click", () => page(false).catch(fail));
  refresh.addEventListener("click", () => page(true).catch(fail));
  await page(true);
  return () => abort.abort();
}
