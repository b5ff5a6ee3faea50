// /ui/runs/{runId}: the run page (filled in below).
import { el, replace, api } from "./lib.js";

export async function render(main, params) {
  const d = await api("/v1/runs/" + encodeURIComponent(params.runId));
  replace(main, el("h1", {}, "Run " + d.runId));
}
