// Shared helpers of the inspector's pages: building elements with text only,
// the API token of the tab, an authenticated fetch that reads the agent error
// format, and a Server-Sent Events reader over fetch (EventSource cannot send
// an Authorization header, and a token never goes into a URL).

const TOKEN_KEY = "screengraph.apiToken";

// el builds an element. attrs: "class", "text", "on<event>" (a function),
// boolean attributes (true/false), anything else as an attribute string.
// Children are nodes or strings; a string always becomes a text node, so data
// never turns into markup.
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = String(v);
    else if (k === "class") e.className = v;
    else if (k.startsWith("on") && typeof v === "function") e.addEventListener(k.slice(2), v);
    else if (v === true) e.setAttribute(k, "");
    else e.setAttribute(k, String(v));
  }
  append(e, children);
  return e;
}

function append(parent, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    parent.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// replace empties node and appends children (text-safe, like el).
export function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

export function getToken() { return sessionStorage.getItem(TOKEN_KEY) || ""; }
export function setToken(t) { sessionStorage.setItem(TOKEN_KEY, t); }
export function clearToken() { sessionStorage.removeItem(TOKEN_KEY); }

// ApiError is a refused API call: status, the agent error format's message
// and errorId.
export class ApiError extends Error {
  constructor(status, message, errorId, body) {
    super(message);
    this.status = status;
    this.errorId = errorId || "";
    this.body = body;
  }
}

// AuthError: the API answered 401 (no token, or a token it does not know).
export class AuthError extends ApiError {}

function headers(extra) {
  const h = new Headers(extra || {});
  const t = getToken();
  if (t) h.set("Authorization", "Bearer " + t);
  return h;
}

async function errorOf(resp) {
  let body = null, msg = resp.status + " " + resp.statusText, id = "";
  try {
    body = await resp.json();
    const e0 = body && Array.isArray(body.errors) && body.errors[0];
    msg = (e0 && e0.message) || (body && body.error) || msg;
    id = (e0 && e0.error_id) || "";
  } catch (_) { /* not the agent error format: keep the status line */ }
  const C = resp.status === 401 ? AuthError : ApiError;
  return new C(resp.status, msg, id, body);
}

// api calls the HTTP API: path is "/v1/…"; opts.body (an object) is sent as
// JSON. Resolves to the decoded JSON body; rejects with ApiError (AuthError
// on 401) carrying the API's message.
export async function api(path, opts = {}) {
  const init = { method: opts.method || "GET", headers: headers({ Accept: "application/json" }), signal: opts.signal, cache: "no-store" };
  if (opts.body !== undefined) {
    init.headers.set("Content-Type", "application/json");
    init.body = JSON.stringify(opts.body);
  }
  const resp = await fetch(path, init);
  if (!resp.ok) throw await errorOf(resp);
  return resp.json();
}

// apiBlob fetches bytes with the bearer (screenshots, logs): a Blob.
export async function apiBlob(path, signal) {
  const resp = await fetch(path, { headers: headers(), signal, cache: "no-store" });
  if (!resp.ok) throw await errorOf(resp);
  return resp.blob();
}

// stream reads a Server-Sent Events response of the API with the bearer and
// calls onEvent({event, id, data}) for each event, data parsed as JSON when
// it is JSON. It resolves when the stream ends (the server closed it) and
// rejects with ApiError on a refusal or when signal aborts.
export async function stream(path, onEvent, { signal, lastEventId } = {}) {
  const h = headers({ Accept: "text/event-stream" });
  if (lastEventId) h.set("Last-Event-ID", String(lastEventId));
  const resp = await fetch(path, { headers: h, signal, cache: "no-store" });
  if (!resp.ok) throw await errorOf(resp);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "", ev = { event: "message", id: "", data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let nl;
    while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
      if (line === "") {
        if (ev.data.length) {
          const raw = ev.data.join("\n");
          let data = raw;
          try { data = JSON.parse(raw); } catch (_) { /* plain text data */ }
          onEvent({ event: ev.event, id: ev.id, data });
        }
        ev = { event: "message", id: ev.id, data: [] };
        continue;
      }
      if (line.startsWith(":")) continue; // comment (keep-alive)
      const i = line.indexOf(":");
      const field = i < 0 ? line : line.slice(0, i);
      const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
      if (field === "data") ev.data.push(val);
      else if (field === "event") ev.event = val;
      else if (field === "id") ev.id = val;
    }
  }
}

// errorBox is the page's view of a refused call: the API's message, as text.
export function errorBox(err) {
  const msg = err instanceof ApiError ? err.message : String(err && err.message || err);
  // The API's message usually starts with its error id already: say it once.
  const id = err instanceof ApiError && err.errorId && !msg.startsWith(err.errorId) ? " (" + err.errorId + ")" : "";
  return el("div", { class: "error", role: "alert" }, msg + id);
}

export function statusBadge(s) {
  return el("span", { class: "status " + String(s).replace(/[^A-Z_]/g, "") }, String(s));
}

// fmtMillis prints a duration: 850 ms, 12.3 s, 4 min 05 s.
export function fmtMillis(ms) {
  if (ms === undefined || ms === null || isNaN(ms)) return "";
  if (ms < 1000) return Math.round(ms) + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  const m = Math.floor(ms / 60000), s = Math.floor((ms % 60000) / 1000);
  return m + " min " + String(s).padStart(2, "0") + " s";
}

// fmtTime prints an ISO-8601 time as local date and time.
export function fmtTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toLocaleString();
}

// ageOf is how long ago an ISO-8601 time was, as a duration text.
export function ageOf(iso) {
  const d = new Date(iso);
  return isNaN(d) ? "" : fmtMillis(Math.max(0, Date.now() - d.getTime())) + " ago";
}

// link is an in-app link (the router handles it without a reload).
export function link(href, text, attrs = {}) {
  return el("a", { ...attrs, href, "data-route": true }, text);
}

// artifactWorker registers the inspector's service worker (sw.js: it adds
// this tab's bearer to the artifact requests a <video> makes, asking for it
// here each time) and resolves true once it controls the page; false where
// service workers are not offered (an insecure context) or it did not take
// control within 5 s. Registered once per page load.
let workerReady = null;
export function artifactWorker() {
  if (workerReady) return workerReady;
  const sw = navigator.serviceWorker;
  if (!sw || !window.isSecureContext) return (workerReady = Promise.resolve(false));
  sw.addEventListener("message", (ev) => {
    if (ev.data && ev.data.type === "screengraph.token?" && ev.ports[0]) ev.ports[0].postMessage(getToken());
  });
  workerReady = (async () => {
    try {
      await sw.register("/ui/assets/sw.js", { scope: "/ui/" });
      if (sw.controller) return true;
      return await new Promise((resolve) => {
        const timer = setTimeout(() => resolve(!!sw.controller), 5000);
        sw.addEventListener("controllerchange", () => { clearTimeout(timer); resolve(true); }, { once: true });
      });
    } catch (_) {
      return false;
    }
  })();
  return workerReady;
}
