package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/screengraph/screengraph-agent/agent/httpapi/ui/uitest"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// The inspector in real Chromium against `serve` with the real chain
// (simulated emulator, real adb server, real Appium): / leads to /ui/; a run
// submitted while the page is open appears without a reload; on its page,
// Pause (clicked while ProvisionApp downloads) pauses it and the page shows
// PAUSED without a reload; Resume finishes it, and the page shows the four
// nodes with their durations and the screenshot kept as evidence.
func TestServeInspector(t *testing.T) {
	slow(t, "chains through Appium to the inspector")
	ctx := uitest.Browser(t) // first: no Chromium skips (locally) before the simulator starts
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	g := newGatedAPKs(t, apk)
	d := startDaemonEnv(t, srv, []string{"SSL_CERT_FILE=" + g.CertFile(t)})

	const short = 30 * time.Second
	uitest.Run(t, ctx, short, "open /", chromedp.Navigate(d.URL()+"/"), chromedp.WaitVisible("#runs"))
	id := d.submit(t, runBody(emu.Serial(), g.URL("ui"), sha, "ALWAYS_REINSTALL", "FORCE_RESTART", nil))
	uitest.Run(t, ctx, short, "the submitted run appears without a reload", chromedp.WaitVisible(`tr[data-run="`+id+`"]`))
	uitest.SavePNG(t, ctx, "runs")
	uitest.Run(t, ctx, short, "its page", chromedp.Click(`tr[data-run="`+id+`"] a`), chromedp.WaitVisible("#run-status .status"))

	g.waitFetch(t, "ui") // ProvisionApp is downloading: the run is RUNNING
	uitest.Run(t, ctx, short, "pause", chromedp.WaitEnabled("#pause"), chromedp.Click("#pause"), chromedp.WaitVisible("#control-result .notice"))
	g.Release("ui")
	uitest.Run(t, ctx, 2*time.Minute, "PAUSED shown without a reload", chromedp.WaitVisible(`#run-status[data-status="PAUSED"]`),
		chromedp.WaitEnabled("#resume"))
	uitest.SavePNG(t, ctx, "paused")
	if uitest.Eval[bool](t, ctx, `!document.getElementById("pause").disabled`) {
		t.Errorf("Pause is enabled on a PAUSED run")
	}
	uitest.Run(t, ctx, short, "resume", chromedp.Click("#resume"))
	uitest.Run(t, ctx, 3*time.Minute, "FINISHED with four timed nodes and the screenshot",
		chromedp.WaitVisible(`#run-status[data-status="FINISHED"]`),
		chromedp.Poll[chromedp.Void](`(() => {
			const rows = [...document.querySelectorAll("#timeline .tl-row")];
			const names = rows.map((r) => r.dataset.node).join(",");
			return names === "EnsureDevice,ProvisionApp,LaunchOrAttach,WaitIdle" &&
				rows.every((r) => /^\d+(\.\d)? (ms|s)|min/.test(r.querySelector(".tl-dur").textContent) && r.dataset.outcome === "SUCCESS");
		})()`, chromedp.WithPollingInterval(100*time.Millisecond)),
		chromedp.Poll[chromedp.Void](`[...document.querySelectorAll("#evidence img.screenshot")].some((i) => i.complete && i.naturalWidth > 0 && i.src.startsWith("blob:"))`,
			chromedp.WithPollingInterval(100*time.Millisecond)))
	if !uitest.Eval[bool](t, ctx, `[...document.querySelectorAll("#events [data-kind]")].some((e) => e.dataset.kind === "agent.run.paused") &&
		[...document.querySelectorAll("#events [data-kind]")].some((e) => e.dataset.kind === "agent.run.resumed")`) {
		t.Errorf("the live event log lacks run.paused / run.resumed")
	}
	uitest.SavePNG(t, ctx, "finished")

	// Node outputs in chain order (not the outputs map's alphabetical one).
	if got := uitest.Eval[string](t, ctx, `[...document.querySelectorAll("#outputs details")].map((d) => d.dataset.node).join(",")`); got != "EnsureDevice,ProvisionApp,LaunchOrAttach,WaitIdle" {
		t.Errorf("node outputs in the order %s", got)
	}
	// The screenshot is a thumbnail; a click shows it at its full size, another shrinks it.
	const shot = `[...document.querySelectorAll("#evidence img.screenshot")].find((i) => i.naturalWidth > 0)`
	if w := uitest.Eval[int](t, ctx, shot+`.clientWidth`); w > 260 {
		t.Errorf("thumbnail %d px wide", w)
	}
	uitest.Run(t, ctx, short, "click the screenshot", chromedp.Evaluate[chromedp.Void](shot+`.click()`),
		chromedp.Poll[chromedp.Void](`(() => { const i = `+shot+`; return i.clientWidth === i.naturalWidth && i.naturalWidth > 260; })()`,
			chromedp.WithPollingInterval(50*time.Millisecond)))
	uitest.SavePNG(t, ctx, "screenshot-full-size")
	uitest.Run(t, ctx, short, "click it again", chromedp.Evaluate[chromedp.Void](shot+`.click()`),
		chromedp.Poll[chromedp.Void](shot+`.clientWidth <= 260`, chromedp.WithPollingInterval(50*time.Millisecond)))

	// The runs table has the run's time, as the CLI's runs list (TOOK).
	uitest.Run(t, ctx, short, "the runs table's Took", chromedp.Navigate(d.URL()+"/ui/"),
		chromedp.Poll[chromedp.Void](`(() => { const td = document.querySelector('tr[data-run="`+id+`"] td.took'); return !!td && /^\d+(\.\d)? (ms|s)|min/.test(td.textContent); })()`,
			chromedp.WithPollingInterval(100*time.Millisecond)))
	uitest.SavePNG(t, ctx, "runs-took")
}
