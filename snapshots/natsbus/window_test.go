package natsbus_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
)

// holdingProxy forwards one client's TCP connections to a NATS server;
// while held, what the server sends (acks among it) is kept back, what the
// client sends goes through.
type holdingProxy struct {
	url  string
	mu   sync.Mutex
	cond *sync.Cond
	held bool
}

func startHoldingProxy(t *testing.T, serverURL string) *holdingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &holdingProxy{url: "nats://" + ln.Addr().String()}
	p.cond = sync.NewCond(&p.mu)
	addr := strings.TrimPrefix(serverURL, "nats://")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				return
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			go io.Copy(s, c)
			go p.copyHeld(c, s)
		}
	}()
	return p
}

// copyHeld copies src to dst, each read waiting while the proxy is held.
func (p *holdingProxy) copyHeld(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.held {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *holdingProxy) hold(on bool) {
	p.mu.Lock()
	p.held = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

// Windows are sent one after the other (Nats-Expected-Last-Msg-Id is a
// condition on the stream's last message, so two windows' rows must not
// interleave), but a window's acks are waited for outside that order: the
// next window goes out while they are outstanding, so a relay's second
// claim worker keeps the stream busy during the first one's acks and
// marks. Here no ack reaches the publisher (a proxy holds the server's
// replies) until both windows are in the stream. Before, a window held the
// publisher until its last ack, and window 2 waited for window 1's.
func TestPublishOrderedSendsNextWindowWhileAcksWait(t *testing.T) {
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	_, watch := testenv.ConnectPublisher(t, url) // direct: counts what the stream holds
	px := startHoldingProxy(t, url)
	nc, err := natsbus.Connect(px.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, err := natsbus.NewJetStreamPublisher(t.Context(), nc)
	if err != nil {
		t.Fatal(err)
	}
	stored := func(want uint64) bool {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			st, err := watch.JetStream().Stream(t.Context(), snapshots.StreamName)
			if err != nil {
				t.Fatal(err)
			}
			if info, err := st.Info(t.Context()); err == nil && info.State.Msgs >= want {
				return true
			}
		}
		return false
	}
	px.hold(true)
	released := false
	defer func() {
		if !released {
			px.hold(false)
		}
	}()
	type result struct {
		ok  []bool
		err error
	}
	windows := [][]string{{"A", "B"}, {"C", "D"}}
	results := make([]chan result, len(windows))
	for i, runs := range windows {
		results[i] = make(chan result, 1)
		rows := orderedRows("t1", runs, map[string]int{}, 5)
		go func() {
			ok, err := pub.PublishOrdered(context.WithoutCancel(t.Context()), rows)
			results[i] <- result{ok, err}
		}()
		if !stored(uint64(10 * (i + 1))) {
			t.Fatalf("window %d is not in the stream while the earlier windows' acks are outstanding", i+1)
		}
	}
	px.hold(false)
	released = true
	for i := range windows {
		r := <-results[i]
		if r.err != nil {
			t.Fatalf("window %d: %v", i+1, r.err)
		}
		for j, o := range r.ok {
			if !o {
				t.Errorf("window %d row %d not acknowledged", i+1, j)
			}
		}
	}
	for run, seqs := range runSeqs(t, watch.JetStream(), "t1") {
		if fmt.Sprint(seqs) != "[1 2 3 4 5]" {
			t.Errorf("run %s: %v", run, seqs)
		}
	}
}
