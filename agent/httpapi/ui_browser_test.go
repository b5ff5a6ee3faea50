package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/screengraph/screengraph-agent/agent/httpapi/ui/uitest"
)

// hostile is a run field a tenant controls that holds markup: the page
// must show it as text and never run it.
const hostile = `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">`

// In real Chromium, with tokens: the page asks for a token (the API
// answers 401), keeps it in sessionStorage only; a run submitted while /ui/
// is open appears and turns FINISHED without a reload; tenant acme's page
// never shows tenant beta's runs (neither in the table nor by its page);
// a field holding <script> shows as text and does not run; Cancel on a
// finished run is disabled, and the API's refusal shows when it is sent
// anyway (a page that had not caught up yet).
func TestUIBrowserRunsTenantsEscaping(t *testing.T) {
	e := newTenancyEnv(t)
	ctx := uitest.Browser(t)
	const wait = 20 * time.Second
	uitest.Run(t, ctx, wait, "sign-in form", uitest.CountFetches(), chromedp.Navigate(e.url+"/ui/"), chromedp.WaitVisible("#signin"))
	uitest.SavePNG(t, ctx, "signin")
	uitest.Run(t, ctx, wait, "sign in", chromedp.SendKeys("#token", e.tokens["acme"]), chromedp.Click(`#signin button[type="submit"]`),
		chromedp.WaitVisible("#runs"))

	b := e.submitAs("beta", `{"serial": "emulator-5556", "apk": "beta-secret"}`)
	a := e.submitAs("acme", `{"serial": "emulator-5558", "apk": "`+strings.ReplaceAll(hostile, `"`, `\"`)+`"}`)
	uitest.Run(t, ctx, wait, "acme's new run appears without a reload",
		chromedp.WaitVisible(`tr[data-run="`+a+`"]`))
	close(e.node.gate(a))
	uitest.Run(t, ctx, wait, "its status turns FINISHED live",
		chromedp.WaitVisible(`tr[data-run="`+a+`"][data-status="FINISHED"]`))
	close(e.node.gate(b))
	e.waitStatus(b, "FINISHED")
	// Bounded cost: while runs come and go, the page reads the list once
	// and holds one stream; it does not poll.
	var more []string
	for i := range 8 {
		id := e.submitAs("acme", `{"serial": "emulator-5554", "apk": "more"}`)
		more = append(more, id)
		if i == 0 {
			close(e.node.gate(id))
		}
	}
	for _, id := range more[1:] {
		close(e.node.gate(id))
	}
	for _, id := range more {
		uitest.Run(t, ctx, wait, "run "+id+" FINISHED live", chromedp.WaitVisible(`tr[data-run="`+id+`"][data-status="FINISHED"]`))
	}
	fetches := uitest.Eval[[]string](t, ctx, `window.__sgFetches.filter((f) => f.includes("/v1/"))`)
	// The first list answered 401 (sign-in), then one list and one stream.
	if want := []string{"GET /v1/runs?limit=50", "GET /v1/runs?limit=50", "GET /v1/runs?follow=1"}; strings.Join(fetches, "\n") != strings.Join(want, "\n") {
		t.Errorf("the runs page's API calls:\n%s\nwant:\n%s", strings.Join(fetches, "\n"), strings.Join(want, "\n"))
	}
	// b was submitted first and finished: a leaking stream would have sent it by now.
	if uitest.Eval[bool](t, ctx, `document.body.innerText.includes("`+b+`") || document.body.innerText.includes("beta")`) {
		t.Errorf("tenant acme's runs page shows tenant beta's run %s", b)
	}
	if got := uitest.Eval[string](t, ctx, `sessionStorage.getItem("screengraph.apiToken")`); got != e.tokens["acme"] {
		t.Errorf("sessionStorage token %q, want acme's", got)
	}
	if uitest.Eval[string](t, ctx, `document.cookie`) != "" || strings.Contains(uitest.Eval[string](t, ctx, `location.href`), "sg_") {
		t.Errorf("the token went into a cookie or the URL")
	}
	uitest.SavePNG(t, ctx, "runs")

	uitest.Run(t, ctx, wait, "the run's page", chromedp.Click(`tr[data-run="`+a+`"] a`),
		chromedp.WaitVisible(`#run-status[data-status="FINISHED"]`),
		chromedp.WaitVisible(`#timeline .tl-row[data-node="Fetch"]`),
		chromedp.Poll[chromedp.Void](`document.getElementById("events").textContent.includes("downloading <script>window.__xss=1</script>")`,
			chromedp.WithPollingInterval(50*time.Millisecond)))
	if v := uitest.Eval[string](t, ctx, `String(window.__xss)`); v != "undefined" {
		t.Errorf("the <script> in a run field ran: window.__xss = %s", v)
	}
	if n := uitest.Eval[int](t, ctx, `document.querySelectorAll("main script, main img:not(.screenshot)").length`); n != 0 {
		t.Errorf("%d script/img elements made from run data", n)
	}
	if !uitest.Eval[bool](t, ctx, `document.getElementById("run-input").textContent.includes("<script>window.__xss=1</script><img src=x onerror=")`) {
		t.Errorf("the run request's field is not shown as text")
	}
	if !uitest.Eval[bool](t, ctx, `document.getElementById("cancel").disabled && document.getElementById("pause").disabled && document.getElementById("resume").disabled`) {
		t.Errorf("control buttons enabled on a FINISHED run")
	}
	uitest.Run(t, ctx, wait, "cancel refused", chromedp.Evaluate[chromedp.Void](`(b => { b.disabled = false; b.click(); })(document.getElementById("cancel"))`),
		chromedp.WaitVisible(`#control-result .error`))
	if msg := uitest.Eval[string](t, ctx, `document.querySelector("#control-result .error").textContent`); !strings.Contains(msg, "already ended") {
		t.Errorf("the refusal shown is %q, want the API's 409 message", msg)
	}
	uitest.SavePNG(t, ctx, "run")
	uitest.Run(t, ctx, wait, "phone width", chromedp.EmulateViewport(390, 844))
	uitest.SavePNG(t, ctx, "run-390px")
	if w := uitest.Eval[int](t, ctx, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("at 390 px wide the run page is %d px wide (scrolls sideways)", w)
	}

	uitest.Run(t, ctx, wait, "beta's run page as acme", chromedp.Navigate(e.url+"/ui/runs/"+b), chromedp.WaitVisible(`main .error`))
	if txt := uitest.Eval[string](t, ctx, `document.querySelector("main").innerText`); !strings.Contains(txt, "not found") || strings.Contains(txt, "beta-secret") {
		t.Errorf("acme opening beta's run page: %q, want not found", txt)
	}
	uitest.SavePNG(t, ctx, "other-tenant")
}

// Keyboard and refusals on a live run: the run's link opens with Enter,
// Pause is enabled on a RUNNING run and Resume is not, a policy switch to
// submitted with Enter is accepted (this service does not check versions;
// TestUIBrowserRunsTenantsEscaping shows a refusal), and Cancel pressed with
// the space bar is accepted and the run's end shows live.
func TestUIBrowserKeyboardControls(t *testing.T) {
	e := newTenancyEnv(t)
	ctx := uitest.Browser(t)
	const wait = 20 * time.Second
	id := e.submitAs("acme", `{"serial": "emulator-5554", "apk": "k"}`)
	e.waitStatus(id, "RUNNING")
	uitest.Run(t, ctx, wait, "sign in", chromedp.Navigate(e.url+"/ui/"), chromedp.WaitVisible("#signin"),
		chromedp.SendKeys("#token", e.tokens["acme"]+"\r"), chromedp.WaitVisible(`tr[data-run="`+id+`"] a`))
	uitest.Run(t, ctx, wait, "open the run with Enter", chromedp.Focus(`tr[data-run="`+id+`"] a`), chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(`#run-status[data-status="RUNNING"]`))
	if !uitest.Eval[bool](t, ctx, `!document.getElementById("pause").disabled && document.getElementById("resume").disabled && !document.getElementById("cancel").disabled`) {
		t.Errorf("on a RUNNING run: want Pause and Cancel enabled, Resume disabled")
	}
	uitest.Run(t, ctx, wait, "the lease it holds", chromedp.Poll[chromedp.Void](`document.getElementById("lease-holder")?.textContent === "serve:test" &&
		document.getElementById("lease-fencing")?.textContent === "1" && / ago$/.test(document.getElementById("lease-heartbeat")?.textContent)`))
	uitest.Run(t, ctx, wait, "policy switch with Enter", chromedp.SendKeys("#policy-version", "2\r"),
		chromedp.Poll[chromedp.Void](`(document.querySelector("#control-result .notice") || {}).textContent?.includes("agent.policy.switch_requested")`))
	uitest.SavePNG(t, ctx, "policy-requested")
	uitest.Run(t, ctx, wait, "cancel with the space bar", chromedp.Focus("#cancel"), chromedp.KeyEvent(" "),
		chromedp.Poll[chromedp.Void](`(document.querySelector("#control-result .notice") || {}).textContent?.includes("cancel")`))
	close(e.node.gate(id))
	uitest.Run(t, ctx, wait, "the run ends, shown live", chromedp.WaitVisible(`#run-status[data-status="CANCELED"]`))
	uitest.SavePNG(t, ctx, "ended")
}

// A failed run's page says why: the failed node's humanReadableFailureSummary,
// errorId and appFailure block, and the run's error report — with the
// tenant-controlled text of the crash message shown as text, not run.
func TestUIBrowserFailureReport(t *testing.T) {
	e := newTenancyEnv(t)
	ctx := uitest.Browser(t)
	const wait = 20 * time.Second
	id := e.submitAs("acme", `{"serial": "emulator-5554", "apk": "crash:<script>window.__xss=3</script>"}`)
	close(e.node.gate(id))
	e.waitStatus(id, "FAILED")
	uitest.Run(t, ctx, wait, "sign in on the run's page", chromedp.Navigate(e.url+"/ui/runs/"+id), chromedp.WaitVisible("#signin"),
		chromedp.SendKeys("#token", e.tokens["acme"]+"\r"), chromedp.WaitVisible(`#run-status[data-status="FAILED"]`),
		chromedp.WaitVisible(`#failure .error[data-node="Fetch"]`), chromedp.WaitVisible("#failure-summary"))
	node := uitest.Eval[string](t, ctx, `document.querySelector('#failure .error[data-node="Fetch"]').textContent`)
	for _, want := range []string{"com.example.app crashed: java.lang.IllegalStateException: <script>window.__xss=3</script>", "app_crashed", `"exception": "java.lang.IllegalStateException"`} {
		if !strings.Contains(node, want) {
			t.Errorf("the failed node's report %q lacks %q", node, want)
		}
	}
	if s := uitest.Eval[string](t, ctx, `document.getElementById("failure-summary").textContent`); !strings.Contains(s, "<script>window.__xss=3</script>") {
		t.Errorf("the run's error summary %q lacks the crash text", s)
	}
	if v := uitest.Eval[string](t, ctx, `String(window.__xss)`); v != "undefined" {
		t.Errorf("the crash message's <script> ran: window.__xss = %s", v)
	}
	if !uitest.Eval[bool](t, ctx, `document.querySelector('#timeline .tl-row[data-node="Fetch"]').dataset.outcome === "FAILURE"`) {
		t.Errorf("the timeline does not show Fetch as FAILURE")
	}
	uitest.SavePNG(t, ctx, "failed")
}
