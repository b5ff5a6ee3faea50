// Package servicetest adapts test closures to the service's ports, the way
// http.HandlerFunc adapts a function to http.Handler. The daemon wires named
// implementations (nodes.SetupPreparer, adbdevice.Reachable,
// adbdevice.BootCompletedProbe); tests script a port with a closure.
package servicetest

import (
	"context"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
)

// Prepare is a service.Preparer calling the function; a run it returns with
// no tenant gets the tenant Submit passed, as the daemon's Preparer does for
// a request naming none.
type Prepare func(ctx context.Context, runID string, body []byte) (agent.Run, error)

var _ service.Preparer = Prepare(nil)

// Prepare calls f.
func (f Prepare) Prepare(ctx context.Context, runID, tenant string, body []byte) (agent.Run, error) {
	run, err := f(ctx, runID, body)
	if err == nil && run.TenantID == "" {
		run.TenantID = tenant
	}
	return run, err
}

// Reach is a service.Reachability calling the function.
type Reach func(ctx context.Context) ([]service.Candidate, error)

var _ service.Reachability = Reach(nil)

// Candidates calls f.
func (f Reach) Candidates(ctx context.Context) ([]service.Candidate, error) { return f(ctx) }

// Probe is a service.Prober calling the function.
type Probe func(ctx context.Context, serial string) error

var _ service.Prober = Probe(nil)

// Probe calls f.
func (f Probe) Probe(ctx context.Context, serial string) error { return f(ctx, serial) }
