package snapshots_test

import (
	"context"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// CountRunsByStatus agrees with listing every run, on both stores.
func TestCountRunsByStatus(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) interface {
		agent.Store
		agent.RunCounter
	}{
		"embedded": func(t *testing.T) interface {
			agent.Store
			agent.RunCounter
		} {
			return testenv.Embedded(t)
		},
		"postgres": func(t *testing.T) interface {
			agent.Store
			agent.RunCounter
		} {
			return testenv.Postgres(t)
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			ctx := context.Background()
			for i, st := range []agent.RunStatus{agent.RunPending, agent.RunPending, agent.RunFinished, agent.RunFailed, agent.RunFinished, agent.RunFinished} {
				r := storetest.NewRun("t1", "emulator-5554")
				r.Status = st
				if err := s.CreateRun(ctx, r); err != nil {
					t.Fatal(i, err)
				}
			}
			by, err := s.CountRunsByStatus(ctx)
			if err != nil {
				t.Fatal(err)
			}
			runs, err := s.ListRuns(ctx, agent.Admin(), agent.RunFilter{})
			if err != nil {
				t.Fatal(err)
			}
			want := map[agent.RunStatus]int{}
			for _, r := range runs {
				want[r.Status]++
			}
			if len(by) != len(want) || by[agent.RunPending] != 2 || by[agent.RunFinished] != 3 || by[agent.RunFailed] != 1 {
				t.Errorf("CountRunsByStatus %v, listing says %v", by, want)
			}
		})
	}
}
