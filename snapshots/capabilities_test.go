package snapshots_test

import (
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
)

// Each store declares what its outbox offers in one Capabilities value, and
// the relay's mode follows from it: the embedded store streams (one relay,
// a cursor in commit order, one-write marks), Postgres is drained by claims
// (a fleet's relays together), a store that declares nothing (the
// in-memory one, a wrapper hiding its store) goes pass by pass.
func TestCapabilitiesDeclared(t *testing.T) {
	emb := snapshots.CapabilitiesOf(testenv.Embedded(t))
	if emb.Mode() != snapshots.ModeStream || emb.Cursor == nil || emb.UpToMany == nil || emb.Claimer != nil {
		t.Errorf("embedded: mode %v, %+v; want the stream (cursor, one-write marks, no claims)", emb.Mode(), emb)
	}
	pg := snapshots.CapabilitiesOf(testenv.Postgres(t))
	if pg.Mode() != snapshots.ModeClaims || pg.Cursor != nil || pg.UpToMany != nil {
		t.Errorf("postgres: mode %v, %+v; want claims, no cursor (several relays drain it)", pg.Mode(), pg)
	}
	for name, c := range map[string]snapshots.Capabilities{"embedded": emb, "postgres": pg} {
		if c.Notifier == nil || c.Parker == nil || c.Counter == nil || c.StepEvents == nil || c.Requeuer == nil || c.UpTo == nil {
			t.Errorf("%s: %+v lacks a capability both stores have", name, c)
		}
	}
	hidden := struct{ agent.Store }{testenv.Embedded(t)}
	for name, s := range map[string]agent.Store{"memory": agenttest.NewStore(), "wrapped": hidden} {
		if c := snapshots.CapabilitiesOf(s); c != (snapshots.Capabilities{}) || c.Mode() != snapshots.ModePasses {
			t.Errorf("%s: %+v, mode %v; want none, pass by pass", name, c, c.Mode())
		}
	}
}
