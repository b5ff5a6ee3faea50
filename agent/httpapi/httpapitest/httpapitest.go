// Package httpapitest serves the real HTTP API for tests, as serve does:
// httpapi over a started service driving a one-node graph through a real
// engine, on the store the test gives (the embedded store in the API's and
// the client's tests). Gates lets a test node hold each run until the test
// lets it end.
package httpapitest

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/service"
)

// Gates holds one gate (a channel) per run: a test node waits on its run's
// Gate, the test closes it to let the run go on. The zero value is ready.
type Gates struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// Gate returns the gate of run id, made on first use.
func (g *Gates) Gate(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]chan struct{}{}
	}
	c, ok := g.m[id]
	if !ok {
		c = make(chan struct{})
		g.m[id] = c
	}
	return c
}

// Store is what Start serves over: runs, events and device leases.
type Store interface {
	agent.Store
	agent.Leases
}

// Config configures Start.
type Config struct {
	Store Store
	// Node is the only node of the graph "test", where every run starts.
	Node    agent.Node
	Prepare service.Preparer
	// Service and API adjust the service's and the HTTP API's configs
	// (devices, artifacts; tokens, limits, readiness) before use; may be nil.
	Service func(*service.Config)
	API     func(*httpapi.Config)
	// Plain serves httpapi.New's handler on a plain httptest server instead
	// of httpapi.NewServer's (its timeouts and limits).
	Plain bool
}

// Server is the API Start serves.
type Server struct {
	URL     string
	Service *service.Service
	Graph   *agent.Graph
}

// Start serves the API of c until the test ends (then the server closes and
// the service shuts down within 10 s). The service: holder serve:test,
// scheduler tick 20 ms, lease TTL 5 s; the engine: policy v1, polling 10 ms.
// It fails the test when the graph, the service or its start is refused.
func Start(t testing.TB, c Config) *Server {
	t.Helper()
	g, err := agent.NewGraph("test", c.Node.Name(), c.Node)
	if err != nil {
		t.Fatal(err)
	}
	sc := service.Config{Store: c.Store, Leases: c.Store, Prepare: c.Prepare, NewID: func() string { return ulid.Make().String() },
		Holder: "serve:test", HolderPrefix: "serve:", Tick: 20 * time.Millisecond, LeaseTTL: 5 * time.Second}
	if c.Service != nil {
		c.Service(&sc)
	}
	svc, err := service.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	eng := &agent.Engine{Store: svc.Store(), Policies: agenttest.NewPolicies(&agenttest.Policy{V: 1}), PollInterval: 10 * time.Millisecond}
	svc.SetRunner(agent.GraphRunner{Engine: eng, Graph: g})
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := httpapi.Config{Service: svc, Graph: g, Gatherer: prometheus.NewRegistry()}
	if c.API != nil {
		c.API(&cfg)
	}
	h := httpapi.New(cfg)
	srv := httptest.NewUnstartedServer(h)
	if !c.Plain {
		srv.Config = httpapi.NewServer(h, cfg.Limits)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		svc.Shutdown(ctx)
	})
	return &Server{URL: srv.URL, Service: svc, Graph: g}
}
