// /ui/devices: each device of the daemon's adb server with its state,
// readiness, quarantine, the run and lease holding it, and its last
// screenshot (of a run the caller sees; fetched with the bearer into a blob
// URL). Bounded cost: ONE stream per tab (the run changes,
// GET /v1/runs?follow=1) says when to re-read the list; otherwise the list is
// re-read every REFRESH_MS (adb state changes have no stream), only while
// the tab is visible. A screenshot is fetched once per device, and again
// only after a run on that device changed.
import { el, replace, api, apiBlob, stream, errorBox, statusBadge, fmtTime, ageOf, link, ApiError, AuthError } from "./lib.js";

// REFRESH_MS: the fallback re-read of GET /v1/devices (no faster than the
// daemon's own quarantine probe, 5 s; adb state changes are not streamed).
export const REFRESH_MS = 15000;
// SOON_MS coalesces the re-reads a burst of run changes asks for.
const SOON_MS = 1000;
const TERMINAL = new Set(["FINISHED", "FAILED", "CANCELED"]);

export async function render(main, _params, ctx) {
  const abort = new AbortController();
  const blobs = new Map(); // serial -> {url, runId, stale}
  const tbody = el("tbody", { id: "devices-body" });
  const table = el("div", { class: "table-wrap" }, el("table", { id: "devices" },
    el("thead", {}, el("tr", {}, ["Serial", "State", "Readiness", "Quarantine", "Run", "Lease", "Last screenshot"].map((h) => el("th", { scope: "col" }, h)))),
    tbody));
  const problem = el("div", { id: "devices-problem" });
  const live = el("p", { class: "muted", id: "live", "aria-live": "polite" }, "");
  const refreshBtn = el("button", { type: "button", id: "refresh" }, "Refresh");
  replace(main, el("h1", {}, "Devices"), el("div", { class: "controls" }, refreshBtn), problem, table, live);

  function leaseCell(d) {
    const l = d.lease;
    if (!l) return el("td", { class: "muted" }, "free");
    return el("td", { class: "wrap" },
      el("div", {}, "holder ", el("span", { class: "lease-holder" }, l.holder || "")),
      el("div", {}, "fencing token ", el("span", { class: "lease-fencing" }, String(l.fencingToken))),
      el("div", { class: "muted" }, "renewed ", el("span", { "data-renewed": l.renewedAt || "" }, ageOf(l.renewedAt)),
        ", expires " + fmtTime(l.expiresAt)));
  }

  function shotCell(d) {
    const td = el("td", { class: "shot" });
    const b = blobs.get(d.serial);
    if (b && b.url) {
      td.append(el("img", { class: "screenshot", src: b.url, alt: "Last screenshot of " + d.serial + (b.runId ? " (run " + b.runId + ")" : "") }));
    } else {
      td.append(el("span", { class: "muted" }, b && b.none ? "none" : "…"));
    }
    return td;
  }

  function row(d) {
    return el("tr", { "data-serial": d.serial, "data-readiness": d.readiness || "", "data-quarantined": d.quarantined ? "true" : "false", "data-run": d.heldBy || "" },
      el("th", { scope: "row", class: "wrap" }, link("/ui/devices/" + encodeURIComponent(d.serial), d.serial, { class: "device-link" }), d.model ? el("div", { class: "muted" }, d.model + (d.apiLevel ? " · API " + d.apiLevel : "")) : null),
      el("td", {}, d.state || ""),
      el("td", {}, statusBadge(String(d.readiness || "").toUpperCase())),
      d.quarantined ? el("td", { class: "wrap quarantine" }, el("strong", {}, "quarantined"), el("div", {}, d.quarantineReason || "")) : el("td", { class: "muted" }, "no"),
      el("td", {}, d.heldBy ? link("/ui/runs/" + encodeURIComponent(d.heldBy), d.heldBy, { class: "run-link" }) : el("span", { class: "muted" }, "none")),
      leaseCell(d),
      shotCell(d));
  }

  // screenshot (re)fetches a device's last screenshot when it has none yet
  // or a run on it changed since: one request per device, not per refresh.
  async function screenshot(d) {
    const have = blobs.get(d.serial);
    if (have && !have.stale) return;
    blobs.set(d.serial, { ...(have || {}), stale: false });
    try {
      const resp = await apiBlob("/v1/devices/" + encodeURIComponent(d.serial) + "/screenshot", abort.signal);
      const url = URL.createObjectURL(resp);
      if (have && have.url) URL.revokeObjectURL(have.url);
      blobs.set(d.serial, { url, stale: false });
    } catch (e) {
      if (abort.signal.aborted) return;
      if (e instanceof AuthError) throw e;
      if (!(e instanceof ApiError && e.status === 404)) { replace(problem, errorBox(e)); return; }
      if (have && have.url) URL.revokeObjectURL(have.url);
      blobs.set(d.serial, { none: true, stale: false });
    }
    const tr = tbody.querySelector(`tr[data-serial="${CSS.escape(d.serial)}"]`);
    if (tr) tr.lastChild.replaceWith(shotCell(d));
  }

  let loading = null, again = false;
  async function load() {
    if (loading) { again = true; return loading; }
    loading = (async () => {
      do {
        again = false;
        const list = await api("/v1/devices", { signal: abort.signal });
        const devs = list.devices || [];
        replace(problem);
        if (!devs.length) replace(tbody, el("tr", { id: "no-devices" }, el("td", { colspan: "7", class: "muted" }, "No devices on this daemon's adb server.")));
        else replace(tbody, devs.map(row));
        await Promise.all(devs.map((d) => screenshot(d)));
      } while (again && !abort.signal.aborted);
    })().finally(() => { loading = null; });
    return loading;
  }

  let soon = null;
  function loadSoon() {
    if (soon) return;
    soon = setTimeout(() => { soon = null; load().catch(fail); }, SOON_MS);
  }
  function fail(e) {
    if (abort.signal.aborted) return;
    if (e instanceof AuthError) { ctx.signIn(e); return; }
    replace(problem, errorBox(e));
  }
  refreshBtn.addEventListener("click", () => load().catch(fail));

  await load();

  const timer = setInterval(() => { if (!document.hidden) load().catch(fail); }, REFRESH_MS);
  const ages = setInterval(() => {
    for (const s of tbody.querySelectorAll("[data-renewed]")) if (s.dataset.renewed) s.textContent = ageOf(s.dataset.renewed);
  }, 1000);

  // Live: a run submitted, started, paused or ended changes a device's lease
  // (and may quarantine it): mark that device's screenshot stale and re-read.
  const known = new Map(); // runId -> status|updatedAt, as the stream last sent it
  (async () => {
    let last = "";
    for (let attempt = 0; !abort.signal.aborted; attempt++) {
      try {
        live.textContent = "Live: following run changes; the list is also re-read every " + REFRESH_MS / 1000 + " s.";
        await stream("/v1/runs?follow=1", ({ event, id, data }) => {
          if (id) last = id;
          if (event !== "run" || !data || !data.runId) return;
          // The stream starts with every run of its window. A run seen for
          // the first time changes nothing here when it has ended, waits
          // for a device (PENDING) or already shows as a device's holder;
          // any later change of a run does.
          const key = data.status + "|" + data.updatedAt, was = known.get(data.runId);
          if (known.size > 4000) known.clear(); // runs long gone from the window
          known.set(data.runId, key);
          if (was === key) return;
          if (was === undefined && (TERMINAL.has(data.status) || data.status === "PENDING" ||
            tbody.querySelector(`tr[data-run="${CSS.escape(data.runId)}"]`))) return;
          const b = blobs.get(data.serial);
          if (b) b.stale = true;
          loadSoon();
        }, { signal: abort.signal, lastEventId: last });
        attempt = 0;
      } catch (e) {
        if (abort.signal.aborted) return;
        if (e instanceof AuthError) { ctx.signIn(e); return; }
        live.textContent = "Live updates interrupted: " + (e.message || e) + "; retrying.";
      }
      await new Promise((res) => setTimeout(res, Math.min(30000, 1000 * 2 ** Math.min(attempt, 5))));
    }
  })();

  return () => {
    abort.abort();
    clearInterval(timer);
    clearInterval(ages);
    if (soon) clearTimeout(soon);
    for (const b of blobs.values()) if (b.url) URL.revokeObjectURL(b.url);
  };
}
