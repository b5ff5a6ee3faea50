package natsbus_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
)

// AGENT_EVENTS ages out: MaxAge and MaxBytes are set (defaults, then the
// daemon's values on an existing stream), and beyond MaxBytes the oldest
// messages go.
func TestStreamLimits(t *testing.T) {
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	nc, pub := testenv.ConnectPublisher(t, url)
	ctx := context.Background()
	info := func() (time.Duration, int64, uint64, uint64) {
		t.Helper()
		st, err := pub.JetStream().Stream(ctx, snapshots.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		i, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return i.Config.MaxAge, i.Config.MaxBytes, i.State.FirstSeq, i.State.Bytes
	}
	if age, bytes, _, _ := info(); age != natsbus.DefaultStreamMaxAge || bytes != natsbus.DefaultStreamMaxBytes {
		t.Fatalf("default stream limits: MaxAge %v, MaxBytes %d", age, bytes)
	}
	const limit = 256 << 10
	pub, err := natsbus.NewJetStreamPublisher(ctx, nc, natsbus.WithStreamLimits(2*time.Hour, limit))
	if err != nil {
		t.Fatal(err)
	}
	if age, bytes, _, _ := info(); age != 2*time.Hour || bytes != limit {
		t.Fatalf("updated stream limits: MaxAge %v, MaxBytes %d", age, bytes)
	}
	body := make([]byte, 32<<10)
	for i := range 20 {
		if err := pub.Publish(ctx, snapshots.SubjectPrefix+".t1.r1", "m"+strconv.Itoa(i), body); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, first, bytes := info(); first == 1 || bytes > limit {
		t.Fatalf("after 640 KiB into a 256 KiB stream: first sequence %d, %d bytes; want the oldest discarded", first, bytes)
	}
}
