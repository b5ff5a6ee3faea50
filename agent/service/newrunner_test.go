package service_test

import (
	"context"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
)

// Config.NewRunner builds the Runner once, in New, over the store the
// engine must commit through (Service.Store: commits there wake
// followers), so a composition root sets nothing after New.
func TestNewRunnerGetsTheServiceStore(t *testing.T) {
	st := newFixture(t).store
	var got agent.Store
	svc, err := service.New(service.Config{Store: st, Leases: st, Prepare: servicetest.Prepare(prepare),
		NewID: func() string { return ulid.Make().String() }, Holder: "test",
		NewRunner: func(s agent.Store) service.Runner {
			got = s
			return service.RunnerFunc(func(context.Context, string) (agent.RunStatus, error) { return agent.RunFinished, nil })
		}})
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got != svc.Store() {
		t.Fatalf("NewRunner got %v, want the service's store %v", got, svc.Store())
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatalf("Start with the Runner NewRunner built: %v", err)
	}
	if err := svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
