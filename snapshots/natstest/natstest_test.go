package natstest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/snapshots/natstest"
)

// The harness end to end: an R3 stream on the 3-node cluster keeps taking
// publishes with one node killed, the killed node comes back on its ports and
// store dir, and after the whole cluster was stopped and started the stream
// still holds every acknowledged message.
func TestClusterKillRestartOutage(t *testing.T) {
	c, err := natstest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := strings.Count(c.URLs(), "nats://127.0.0.1:"); got != 3 {
		t.Fatalf("URLs() = %q", c.URLs())
	}
	conf, err := os.ReadFile(c.ConfigPath(0))
	if err != nil {
		t.Fatal(err)
	}
	if c.SyncAlways != strings.Contains(string(conf), "sync_interval: always") {
		t.Errorf("SyncAlways %v but config:\n%s", c.SyncAlways, conf)
	}
	t.Logf("nats-server accepts sync_interval: always: %v", c.SyncAlways)

	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(n int, tag string) {
		t.Helper()
		for i := range n {
			// A publish right after a kill may meet a leader election: retry
			// it (same Msg-Id, so a retry never stores twice).
			var err error
			for attempt := 0; attempt < 100; attempt++ {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err = js.Publish(pctx, "t.x", []byte(tag), jetstream.WithMsgID(fmt.Sprintf("%s-%d", tag, i)))
				cancel()
				if err == nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("publish %s %d: %v\n%s", tag, i, err, c.Logs())
			}
		}
	}
	publish(10, "a")
	if err := c.Kill(1); err != nil {
		t.Fatal(err)
	}
	if c.Running(1) {
		t.Fatal("node 1 still running after Kill")
	}
	publish(10, "b") // 2 of 3 replicas: still a quorum
	if err := c.Start(1); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	publish(10, "c")
	if err := c.StopAll(); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, err := js.Publish(pctx, "t.x", []byte("down"), jetstream.WithMsgID("down")); err == nil {
		t.Error("publish acknowledged with the whole cluster stopped")
	}
	cancel()
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	publish(10, "d")
	var info *jetstream.StreamInfo
	for deadline := time.Now().Add(20 * time.Second); ; {
		info, err = st.Info(ctx)
		if err == nil && info.State.Msgs == 40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream info %+v, %v; want 40 messages\n%s", info, err, c.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Errorf("stream cluster %+v, want a leader and 2 replicas", info.Cluster)
	}
}

// StartAll stops every node and starts them once more when the first start
// does not reach a healthy cluster with a meta leader; what the stream held
// is there after it. When the second start fails too, both errors are told.
func TestStartAllStartsOnceMore(t *testing.T) {
	c, err := natstest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	publish := func() *nats.Conn {
		nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	nc := publish()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ONCE", Subjects: []string{"once.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "once.a", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	nc.Close()

	if err := c.StopAll(); err != nil {
		t.Fatal(err)
	}
	natstest.FailStarts(c, 1)
	if err := c.StartAll(); err != nil {
		t.Fatalf("StartAll after one failed start: %v", err)
	}
	if c.Restarts() != 1 {
		t.Errorf("Restarts() = %d, want 1", c.Restarts())
	}
	nc = publish()
	defer nc.Close()
	js, _ = jetstream.New(nc)
	var m *jetstream.RawStreamMsg
	for m == nil {
		s, err := js.Stream(ctx, "ONCE")
		if err == nil {
			m, err = s.GetMsg(ctx, 1)
		}
		if err != nil {
			select {
			case <-ctx.Done():
				t.Fatalf("the stream after the second start: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if string(m.Data) != "kept" {
		t.Errorf("message 1 = %q", m.Data)
	}

	if err := c.StopAll(); err != nil {
		t.Fatal(err)
	}
	natstest.FailStarts(c, 2)
	err = c.StartAll()
	if err == nil || strings.Count(err.Error(), "injected start failure") != 2 || !strings.Contains(err.Error(), "once more after stopping every node") {
		t.Errorf("two failed starts: %v", err)
	}
	if c.Restarts() != 2 {
		t.Errorf("Restarts() = %d, want 2", c.Restarts())
	}
}
