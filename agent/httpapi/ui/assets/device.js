// /ui/devices/{serial}: one device — its state, readiness, the run and lease
// holding it — and its screen, live. The screen is ONE streaming response,
// GET /v1/devices/{serial}/screen (multipart/x-mixed-replace, a PNG per
// frame), read with fetch so the bearer goes in the Authorization header,
// never in a URL (an <img src> could not send it). Bounded cost: the stream
// is open only while the tab is visible; a frame that arrives while the
// previous one is still being decoded replaces the waiting one (frames are
// dropped, never queued); a refused or ended stream is opened again after a
// growing pause (1 s to 30 s), and the daemon decides again who may watch.
import { el, replace, api, errorBox, statusBadge, fmtTime, ageOf, link, getToken, ApiError, AuthError } from "./lib.js";

// MAX_FRAME_BYTES bounds a part the page accepts (the daemon's own cap is
// 16 MiB); MAX_HEADER_BYTES a part's headers.
const MAX_FRAME_BYTES = 32 << 20, MAX_HEADER_BYTES = 8192;

export async function render(main, params, ctx) {
  const serial = params.serial;
  const abort = new AbortController();
  const facts = el("div", { class: "panel", id: "device-facts" }, el("p", { class: "muted" }, "…"));
  const img = el("img", { id: "screen", class: "live-screen", alt: "Live screen of " + serial, hidden: true });
  const state = el("p", { class: "muted", id: "screen-state", "aria-live": "polite" }, "Opening the live screen…");
  const problem = el("div", { id: "screen-problem" });
  replace(main,
    el("p", {}, link("/ui/devices", "← Devices")),
    el("h1", {}, "Device ", el("span", { id: "device-serial" }, serial)),
    el("div", { class: "device-layout" },
      el("section", { class: "panel screen-panel", "aria-label": "Live screen" }, el("h2", {}, "Screen, live"), state, problem, img),
      facts));

  async function loadFacts() {
    const list = await api("/v1/devices", { signal: abort.signal });
    const d = (list.devices || []).find((x) => x.serial === serial);
    if (!d) { replace(facts, el("p", { class: "muted" }, "This daemon's adb server does not list " + serial + ".")); return; }
    const l = d.lease;
    replace(facts, el("h2", {}, "Device"), el("dl", { class: "facts" },
      el("dt", {}, "State"), el("dd", {}, d.state || ""),
      el("dt", {}, "Model"), el("dd", {}, (d.model || "") + (d.apiLevel ? " · API " + d.apiLevel : "")),
      el("dt", {}, "Readiness"), el("dd", {}, statusBadge(String(d.readiness || "").toUpperCase())),
      el("dt", {}, "Quarantine"), el("dd", {}, d.quarantined ? (d.quarantineReason || "quarantined") : "no"),
      el("dt", {}, "Run"), el("dd", { id: "device-run" }, d.heldBy ? link("/ui/runs/" + encodeURIComponent(d.heldBy), d.heldBy, { class: "run-link" }) : "none"),
      el("dt", {}, "Lease"), el("dd", {}, l ? "holder " + (l.holder || "") + ", fencing token " + l.fencingToken + ", renewed " + ageOf(l.renewedAt) + ", expires " + fmtTime(l.expiresAt) : "free")));
  }

  // Frames: the newest waits while the image decodes the previous one.
  let shownURL = "", waiting = null, decoding = false, frames = 0;
  const times = [];
  function show(blob, seq) {
    if (decoding) { waiting = { blob, seq }; return; }
    decoding = true;
    const url = URL.createObjectURL(blob);
    img.dataset.frame = String(seq);
    img.src = url;
    img.decode().catch(() => {}).finally(() => {
      if (shownURL) URL.revokeObjectURL(shownURL);
      shownURL = url;
      img.hidden = false;
      frames++;
      img.dataset.frames = String(frames);
      const now = performance.now();
      times.push(now);
      while (times.length && now - times[0] > 2000) times.shift();
      state.textContent = "Live · " + (times.length / 2).toFixed(1) + " frames/s · frame " + seq;
      decoding = false;
      if (waiting) { const w = waiting; waiting = null; show(w.blob, w.seq); }
    });
  }

  // watch reads one stream until it ends: "lease_changed", an error part, or
  // the server closing it. It rejects with ApiError on a refusal.
  let streamAbort = null;
  async function watch() {
    streamAbort = new AbortController();
    const onAbort = () => streamAbort.abort();
    abort.signal.addEventListener("abort", onAbort);
    try {
      const h = new Headers({ Accept: "multipart/x-mixed-replace" });
      const t = getToken();
      if (t) h.set("Authorization", "Bearer " + t);
      const resp = await fetch("/v1/devices/" + encodeURIComponent(serial) + "/screen", { headers: h, signal: streamAbort.signal, cache: "no-store" });
      if (!resp.ok) {
        let body = null, msg = resp.status + " " + resp.statusText, id = "";
        try {
          body = await resp.json();
          const e0 = body && Array.isArray(body.errors) && body.errors[0];
          msg = (e0 && e0.message) || msg; id = (e0 && e0.error_id) || "";
        } catch (_) { /* keep the status line */ }
        throw new (resp.status === 401 ? AuthError : ApiError)(resp.status, msg, id, body);
      }
      replace(problem);
      return await readParts(resp.body.getReader());
    } finally {
      abort.signal.removeEventListener("abort", onAbort);
    }
  }

  // readParts parses multipart/x-mixed-replace by each part's
  // Content-Length. Resolves to the last JSON part (the stream's end) or null.
  async function readParts(reader) {
    let buf = new Uint8Array(0);
    const dec = new TextDecoder();
    const more = async () => {
      const { value, done } = await reader.read();
      if (done) return false;
      const n = new Uint8Array(buf.length + value.length);
      n.set(buf); n.set(value, buf.length);
      buf = n;
      return true;
    };
    const find = (a, seq) => {
      outer: for (let i = 0; i + seq.length <= a.length; i++) {
        for (let j = 0; j < seq.length; j++) if (a[i + j] !== seq[j]) continue outer;
        return i;
      }
      return -1;
    };
    const CRLF2 = [13, 10, 13, 10];
    for (;;) {
      let end;
      while ((end = find(buf, CRLF2)) < 0) {
        if (buf.length > MAX_HEADER_BYTES) throw new Error("live screen: a part's headers exceed " + MAX_HEADER_BYTES + " bytes");
        if (!(await more())) return null;
      }
      const head = dec.decode(buf.subarray(0, end)).split("\r\n").filter((l) => l !== "");
      if (head.length && /--$/.test(head[0]) && head.length === 1) return null; // closing boundary
      const hdr = {};
      for (const line of head.slice(1)) {
        const i = line.indexOf(":");
        if (i > 0) hdr[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      const n = Number(hdr["content-length"]);
      if (!Number.isInteger(n) || n < 0 || n > MAX_FRAME_BYTES) throw new Error("live screen: a part without a valid Content-Length");
      const start = end + 4;
      while (buf.length < start + n + 2) if (!(await more())) return null;
      const body = buf.slice(start, start + n);
      buf = buf.slice(start + n + 2);
      if ((hdr["content-type"] || "").startsWith("application/json")) {
        try { return JSON.parse(dec.decode(body)); } catch (_) { return null; }
      }
      show(new Blob([body], { type: "image/png" }), hdr["screengraph-frame"] || "");
    }
  }

  let timer = null, attempt = 0, running = false;
  async function loop() {
    if (running || abort.signal.aborted || document.hidden) return;
    running = true;
    try {
      loadFacts().catch((e) => { if (e instanceof AuthError) ctx.signIn(e); });
      state.textContent = "Opening the live screen…";
      const last = await watch();
      attempt = 0;
      if (last && last.end === "lease_changed") {
        state.textContent = "The device's lease changed hands: the screen closed; opening it again…";
        img.dataset.ended = "lease_changed";
      } else if (last && last.errors) {
        replace(problem, errorBox(new ApiError(0, last.errors[0].message, last.errors[0].context && last.errors[0].context.error_id, last)));
        attempt++;
      }
    } catch (e) {
      if (abort.signal.aborted || (streamAbort && streamAbort.signal.aborted && document.hidden)) { running = false; return; }
      if (e instanceof AuthError) { running = false; ctx.signIn(e); return; }
      img.hidden = true;
      state.textContent = "No live screen.";
      replace(problem, errorBox(e));
      attempt++;
    }
    running = false;
    if (abort.signal.aborted || document.hidden) return;
    timer = setTimeout(loop, Math.min(30000, 1000 * 2 ** Math.min(attempt, 5)));
  }

  // A hidden tab holds no stream: the daemon's loop stops with the last viewer.
  function onVisibility() {
    if (document.hidden) {
      if (streamAbort) streamAbort.abort();
      if (timer) { clearTimeout(timer); timer = null; }
      state.textContent = "Paused while the tab is hidden.";
    } else if (!running) {
      if (timer) { clearTimeout(timer); timer = null; }
      loop();
    }
  }
  document.addEventListener("visibilitychange", onVisibility);
  loop();

  return () => {
    abort.abort();
    if (streamAbort) streamAbort.abort();
    if (timer) clearTimeout(timer);
    document.removeEventListener("visibilitychange", onVisibility);
    if (shownURL) URL.revokeObjectURL(shownURL);
  };
}
