package service_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
)

// TestDaemonStopOrder: a daemon serving a run with an open event stream
// stops in order when its context ends: the stream ends at once (so the
// HTTP shutdown is in budget, not held by the follower), the run stops
// resumable with its lease released for the restart, and only then does the
// background loop's context end; Run returns after the loop did.
func TestDaemonStopOrder(t *testing.T) {
	f := newFixture(t)
	svc := f.newService("serve:test:1", nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	following := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /follow/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		following <- struct{}{}
		_ = svc.Follow(r.Context(), agent.Admin(), r.PathValue("id"), 0, func(agent.Event) error { return nil })
	})
	var mu sync.Mutex
	var logged []string
	var leaseAtBackgroundStop []agent.Lease
	backgroundDone := make(chan struct{})
	ready := make(chan struct{})
	d := service.Daemon{
		Service: svc, Server: &http.Server{Handler: mux}, Listener: ln,
		Background: []func(context.Context){func(ctx context.Context) {
			<-ctx.Done()
			leaseAtBackgroundStop = f.history("dev-a")
			close(backgroundDone)
		}},
		Ready: func() { close(ready) },
		Log: func(level slog.Level, msg string, err error) {
			mu.Lock()
			defer mu.Unlock()
			logged = append(logged, level.String()+" "+msg)
		},
		HTTPGrace: 3 * time.Second, RunsGrace: 10 * time.Second,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	<-ready

	r := submit(t, svc, "dev-a")
	f.node.waitStarted(t, r)
	resp, err := http.Get("http://" + ln.Addr().String() + "/follow/" + r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-following

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	select {
	case <-backgroundDone:
	default:
		t.Fatal("Run returned before the background loop did")
	}
	mu.Lock()
	if strings.Join(logged, "; ") != "INFO stopping: runs in flight stay resumable" {
		t.Errorf("logged %q, want the stop only (no step out of budget)", logged)
	}
	mu.Unlock()
	if h := leaseAtBackgroundStop; len(h) != 1 || h[0].ReleaseReason != agent.LeaseShutdown {
		t.Errorf("lease when the background loop stopped: %+v, want released (shutdown)", h)
	}
	if s := f.status(r); s != agent.RunRunning {
		t.Errorf("run is %s after the stop, want RUNNING (resumable)", s)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("the listener still accepts after Run returned")
	}
}

// TestDaemonStartFails: a service that cannot start (no runner) starts
// nothing: Run returns Start's error and neither serves nor runs a loop.
func TestDaemonStartFails(t *testing.T) {
	f := newFixture(t)
	svc, err := service.New(service.Config{Store: f.store, Leases: f.store, Prepare: servicetest.Prepare(prepare), Holder: "serve:test:1", NewID: func() string { return "x" }})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ran := false
	err = service.Daemon{Service: svc, Server: &http.Server{}, Listener: ln,
		Background: []func(context.Context){func(context.Context) { ran = true }},
		Ready:      func() { ran = true }}.Run(context.Background())
	if err == nil || ran {
		t.Fatalf("Run = %v, ran = %v; want Start's error and nothing run", err, ran)
	}
}
