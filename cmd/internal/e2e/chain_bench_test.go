package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/policy"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// BenchmarkEngineOverheadPerNode: the engine on the real embedded store
// running a graph of 4 no-op nodes, one fresh run per iteration. ns/node is
// the run's wall time over its 4 nodes; each run also commits
// agent.run.started and agent.run.finished (6 commits per run: start, 4
// node steps with their events + snapshot, finish).
func BenchmarkEngineOverheadPerNode(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	pols, err := policy.NewStore(ctx, st)
	if err != nil {
		b.Fatal(err)
	}
	names := []string{"A", "B", "C", "D"}
	var ns []agent.Node
	for i, n := range names {
		next := agent.End
		if i+1 < len(names) {
			next = names[i+1]
		}
		ns = append(ns, &agenttest.Node{NodeName: n, Next: next})
	}
	g, err := agent.NewGraph("noop4", "A", ns...)
	if err != nil {
		b.Fatal(err)
	}
	eng := &agent.Engine{Store: st, Policies: pols}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ulid.MustNew(ulid.Now(), rand.Reader).String()
		if err := st.CreateRun(ctx, agent.Run{RunID: id, TenantID: "bench", Status: agent.RunPending, Graph: g.Name,
			PolicyVersion: pols.Current().PolicyVersion}); err != nil {
			b.Fatal(err)
		}
		status, err := eng.Run(ctx, id, g)
		if err != nil || status != agent.RunFinished {
			b.Fatalf("run %s: %s %v", id, status, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(names)), "ns/node")
}

// appiumAlone is Appium alone doing the setup: a NEW uiautomator2 session that
// starts the app (appium:appPackage, appium:appActivity=.HomeActivity,
// appium:noReset=true), then DELETE, against its own Appium server.
type appiumAlone struct {
	srv  *appium.Server
	drv  *appium.Client
	caps map[string]any
}

func newAppiumAlone(b *testing.B, adbPort int, serial string) *appiumAlone {
	ctx := context.Background()
	srv, err := appium.StartServer(ctx, appium.ServerConfig{ADBServerPort: adbPort, LogFile: filepath.Join(b.TempDir(), "appium.log")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Stop() })
	drv, err := appium.New(srv.URL, appium.Options{})
	if err != nil {
		b.Fatal(err)
	}
	caps, err := appium.Capabilities(appium.CapsConfig{Serial: serial, ADBPort: adbPort, Extra: map[string]any{
		"appium:appPackage": appPkg, "appium:appActivity": ".HomeActivity", "appium:noReset": true}})
	if err != nil {
		b.Fatal(err)
	}
	a := &appiumAlone{srv: srv, drv: drv, caps: caps}
	start := time.Now()
	if err := a.once(); err != nil {
		b.Fatal(err)
	}
	b.Logf("Appium alone: cold session (server APK installs) %v", time.Since(start).Round(time.Millisecond))
	return a
}

func (a *appiumAlone) once() error {
	ctx := context.Background()
	s, err := a.drv.CreateSession(ctx, a.caps)
	if err != nil {
		return fmt.Errorf("create: %w\n%s", err, a.srv.LogTail(40))
	}
	return a.drv.DeleteSession(ctx, s.ID)
}
