package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/nodes"
)

// BenchmarkEvidenceVsAppiumAlone (issue 14): on one warm session of the
// setup chain, interleaved under the same load, each iteration
//   - ours: the evidence of a successful run, the engine's Capturer with the
//     default policy (screenshot through adb `exec-out screencap -p`, the UI
//     hierarchy through the session's page source, both hashed and written
//     to the content-addressed blob store);
//   - Appium alone: GET /session/{id}/screenshot (base64 PNG, decoded) and
//     GET /session/{id}/source on the same session, as a client would.
//
// It reports both means and ours / Appium alone ("x-of-appium", target <= 1).
// Ours is a capture of its own (the warm-up run's evidence took what its
// WaitIdle kept), as after a failure or without WaitIdle's screen; the
// success path's cost is BenchmarkWarmChainEvidenceCost's.
func BenchmarkEvidenceVsAppiumAlone(b *testing.B) {
	_, h, _, id := warmChainHost(b)
	ctx := context.Background()
	run, err := h.Store.GetRun(ctx, agent.Admin(), id)
	if err != nil {
		b.Fatal(err)
	}
	snap, err := h.Store.LatestSnapshot(ctx, agent.Admin(), id)
	if err != nil {
		b.Fatal(err)
	}
	var st agent.RunState
	if err := json.Unmarshal(snap.State, &st); err != nil {
		b.Fatal(err)
	}
	pol, err := h.Policies.Policy(ctx, st.PolicyVersion)
	if err != nil {
		b.Fatal(err)
	}
	var ed struct {
		DRC struct {
			Session string `json:"driverSessionId"`
		} `json:"deviceRuntimeContext"`
	}
	if err := json.Unmarshal(st.Outputs["EnsureDevice"], &ed); err != nil || ed.DRC.Session == "" {
		b.Fatalf("no session in EnsureDevice's output: %v", err)
	}
	req := agent.EvidenceRequest{Run: run, Node: "WaitIdle", StepOrdinal: 3, Attempt: 1, Policy: pol, Outputs: st.Outputs}
	sessionURL := h.AppiumURL + "/session/" + ed.DRC.Session
	appiumGet := func(path string) ([]byte, error) {
		resp, err := http.Get(sessionURL + path)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var v struct {
			Value json.RawMessage `json:"value"`
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Unmarshal(body, &v) != nil {
			return nil, fmt.Errorf("GET %s: %d %.200s", path, resp.StatusCode, body)
		}
		var s string
		if err := json.Unmarshal(v.Value, &s); err != nil {
			return nil, err
		}
		return []byte(s), nil
	}
	var ours, alone time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		arts, lines := h.Engine.Evidence.Capture(ctx, req)
		if len(arts) != 2 {
			b.Fatalf("evidence: %d artifacts, want screenshot and ui_hierarchy: %+v", len(arts), lines)
		}
		t1 := time.Now()
		shot, err := appiumGet("/screenshot")
		if err != nil {
			b.Fatal(err)
		}
		png, err := base64.StdEncoding.DecodeString(string(shot))
		if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
			b.Fatalf("Appium's screenshot is no PNG: %v", err)
		}
		if src, err := appiumGet("/source"); err != nil || !bytes.Contains(src, []byte("<hierarchy")) {
			b.Fatalf("Appium's page source: %v %.100s", err, src)
		}
		ours += t1.Sub(t0)
		alone += time.Since(t1)
	}
	b.ReportMetric(float64(ours.Microseconds())/1000/float64(b.N), "evidence-ms")
	b.ReportMetric(float64(alone.Microseconds())/1000/float64(b.N), "appium-alone-ms")
	b.ReportMetric(float64(ours)/float64(alone), "x-of-appium")
}

// BenchmarkWarmChainEvidenceCost: the warm chain (see BenchmarkWarmChain)
// with the default evidence of a successful run (screenshot + hierarchy
// after WaitIdle, riding on its last sample) and without any
// (Engine.Evidence nil and a graph whose WaitIdle keeps nothing, so takes no
// screenshot), interleaved, and the cost of the evidence per run.
func BenchmarkWarmChainEvidenceCost(b *testing.B) {
	_, h, c, _ := warmChainHost(b)
	ctx := context.Background()
	capturer, graph := h.Engine.Evidence, h.Graph
	bare := h.Setup
	bare.Ports.IdleScreens = nil
	plain, err := nodes.NewSetupGraph(bare)
	if err != nil {
		b.Fatal(err)
	}
	var with, without time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, ev := range []agent.Evidence{capturer, nil} {
			h.Engine.Evidence, h.Graph = ev, graph
			if ev == nil {
				h.Graph = plain
			}
			_, status, took, err := submit(ctx, h, c)
			if err != nil || status != agent.RunFinished {
				b.Fatalf("run: %s %v", status, err)
			}
			if ev != nil {
				with += took
			} else {
				without += took
			}
		}
	}
	h.Engine.Evidence, h.Graph = capturer, graph
	b.ReportMetric(float64(with.Milliseconds())/float64(b.N), "with-evidence-ms")
	b.ReportMetric(float64(without.Milliseconds())/float64(b.N), "without-evidence-ms")
	b.ReportMetric(float64(with-without)/float64(time.Millisecond)/float64(b.N), "evidence-cost-ms")
}
