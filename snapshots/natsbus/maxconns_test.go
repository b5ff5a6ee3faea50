package natsbus_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
)

// The in-process server takes at most MaxConns clients (each holds one of
// the daemon's descriptors): the next is refused.
func TestEmbeddedMaxConns(t *testing.T) {
	s, url, err := natsbus.StartEmbeddedWith(natsbus.EmbeddedOptions{Dir: t.TempDir(), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	for range 2 {
		nc, err := nats.Connect(url, nats.MaxReconnects(0))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
	}
	nc, err := nats.Connect(url, nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
		t.Fatal("a third client was let in")
	}
	// The server answers "maximum connections exceeded" and closes; the
	// client sees that or the broken pipe of its CONNECT.
	if n := s.NumClients(); n != 2 {
		t.Fatalf("%d clients after the refusal (%v), want 2", n, err)
	}
}
