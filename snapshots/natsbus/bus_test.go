package natsbus_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
)

// TestOpenBusInProcess: the in-process server starts on the address given,
// its AGENT_EVENTS stream has the limits given, Ready answers, and after
// Close the server is gone and Ready says so.
func TestOpenBusInProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Port 0: a free port, which the client URL names.
	b, err := natsbus.OpenBus(ctx, natsbus.BusConfig{Listen: "127.0.0.1:0", Dir: filepath.Join(t.TempDir(), "nats"),
		MaxAge: 2 * time.Hour, MaxBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addr, ok := strings.CutPrefix(b.ClientURL, "nats://127.0.0.1:")
	if b.Server == nil || !ok || addr == "0" {
		t.Fatalf("bus %+v", b)
	}
	if err := b.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	// The daemon's own connection is in-process (no loopback socket);
	// other programs subscribe over ClientURL and see what it publishes.
	if a := b.Conn.ConnectedAddr(); a != "pipe" {
		t.Errorf("the daemon's connection is to %q, not in-process", a)
	}
	other, err := nats.Connect(b.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	sub, err := other.SubscribeSync("probe.inprocess")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := b.Conn.Publish("probe.inprocess", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "hello" {
		t.Fatalf("a TCP subscriber got %v, %v", m, err)
	}
	js, err := jetstream.New(b.Conn)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, snapshots.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; c.MaxAge != 2*time.Hour || c.MaxBytes != 4<<20 {
		t.Errorf("stream limits %v, %d", c.MaxAge, c.MaxBytes)
	}
	b.Close()
	if err := b.Ready(ctx); err == nil || !strings.Contains(err.Error(), "not connected to nats://127.0.0.1:") {
		t.Errorf("Ready after Close: %v", err)
	}
	if c, err := net.Dial("tcp", "127.0.0.1:"+addr); err == nil {
		c.Close()
		t.Error("the in-process server still listens after Close")
	}
}

// TestOpenBusRefusals: a malformed listen address is the user's error and
// nothing starts; an external cluster that does not answer is no refusal
// (events wait in the outbox), it is reported, and neither the report nor
// Ready shows the URL's password.
func TestOpenBusRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, l := range []string{"4222", "127.0.0.1:http2"} {
		b, err := natsbus.OpenBus(ctx, natsbus.BusConfig{Listen: l, Dir: t.TempDir()})
		if b != nil || agent.Classify(err).ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), "--nats-listen") {
			t.Errorf("listen %q: %v, %v", l, b, err)
		}
	}
	url := "nats://agent:s3cret@127.0.0.1:1" // nothing listens on port 1
	var notReady error
	b, err := natsbus.OpenBus(ctx, natsbus.BusConfig{URL: url, NotReady: func(err error) { notReady = err }})
	if err != nil {
		t.Fatalf("external NATS down: %v", err)
	}
	defer b.Close()
	if notReady == nil || b.Server != nil || b.Publisher == nil {
		t.Errorf("external down: reported %v, bus %+v", notReady, b)
	}
	err = b.Ready(ctx)
	if err == nil || strings.Contains(err.Error(), "s3cret") || strings.Contains(fmt.Sprint(notReady), "s3cret") {
		t.Errorf("Ready = %v, reported %v: want an error without the password", err, notReady)
	}
}
