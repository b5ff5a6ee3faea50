package natsapi_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus/natsapi"
)

// downStore is a Controller whose store cannot be reached, failing as
// pgconn does (naming the address, user and database).
type downStore struct{}

func (downStore) Control(context.Context, agent.Scope, string, string, int) (agent.Control, error) {
	return agent.Control{}, agent.MarkStoreUnavailable(errors.New("failed to connect to `user=agent database=sg`: 127.0.0.1:40432 (127.0.0.1): dial error: connect: connection refused"))
}

// A tenant's control message while the store is down is answered
// store_unavailable naming nothing of the store; the log keeps the detail.
func TestControlStoreDownSaysNothingOfTheStore(t *testing.T) {
	ns, url, err := natsbus.StartEmbedded(filepath.Join(t.TempDir(), "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	daemon, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(daemon.Close)
	var mu sync.Mutex
	var logged []string
	sub, err := natsapi.Subscribe(natsapi.Config{Conn: daemon, Service: downStore{}, Prefix: snapshots.ControlSubjectPrefix,
		Logf: func(format string, args ...any) {
			mu.Lock()
			logged = append(logged, fmt.Sprintf(format, args...))
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	daemon.Flush()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, snapshots.ControlSubjectPrefix+".acme."+ulid.Make().String(), []byte(`{"kind":"agent.run.cancellation_requested"}`))
	if err != nil {
		t.Fatal(err)
	}
	msg := refusal(t, m.Data, agent.ErrStoreUnavailable)
	for _, s := range []string{"40432", "user=", "database=", "127.0.0.1"} {
		if strings.Contains(string(m.Data), s) {
			t.Errorf("the reply names %q: %s", s, m.Data)
		}
	}
	if !strings.Contains(msg, "unavailable") {
		t.Errorf("reply %q", msg)
	}
	mu.Lock() // logged before the reply was sent
	defer mu.Unlock()
	if !strings.Contains(strings.Join(logged, "\n"), "40432") {
		t.Errorf("the log lost the detail: %q", logged)
	}
}
