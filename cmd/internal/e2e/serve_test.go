package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// natsCollector is a NATS client outside the daemon's process: it reads
// AGENT_EVENTS from the start, through the daemon's --nats-listen port.
type natsCollector struct {
	msgs chan jetstream.Msg
}

func collectNATS(t testing.TB, url string) *natsCollector {
	t.Helper()
	c := &natsCollector{msgs: make(chan jetstream.Msg, 100000)}
	consumeEvents(t, url, func(m jetstream.Msg) { c.msgs <- m })
	return c
}

// consumeEvents is a NATS client of the test's own (not the daemon's
// process) reading stream AGENT_EVENTS from its start with an ordered
// consumer on agent.events.>, calling fn for each message until the test ends.
func consumeEvents(t testing.TB, url string, fn func(jetstream.Msg)) {
	t.Helper()
	nc, cons, err := eventConsumer(url)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(fn)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Stop(); nc.Close() })
}

// eventConsumer connects to the NATS server at url (reconnecting forever)
// and makes an ordered consumer of AGENT_EVENTS on agent.events.>.
func eventConsumer(url string) (*nats.Conn, jetstream.Consumer, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, snapshots.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{snapshots.SubjectPrefix + ".>"}})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, cons, nil
}

// checkNATS reads until it has n messages and checks that every committed
// event (want, by run) arrived exactly once, in sequence order per run, on
// agent.events.<tenant>.<run> with Nats-Msg-Id = eventId and the envelope
// as body whose checksum, recomputed, matches.
func (c *natsCollector) check(t testing.TB, want map[string][]agent.Event) {
	t.Helper()
	c.checkWithin(t, want, 30*time.Second)
}

// checkWithin is check, waiting up to d for the events.
func (c *natsCollector) checkWithin(t testing.TB, want map[string][]agent.Event, d time.Duration) {
	t.Helper()
	total := 0
	for _, evs := range want {
		total += len(evs)
	}
	got := map[string][]agent.Event{}
	deadline := time.After(d)
	for n := 0; n < total; n++ {
		select {
		case m := <-c.msgs:
			var e agent.Event
			if err := json.Unmarshal(m.Data(), &e); err != nil {
				t.Fatalf("NATS body: %v", err)
			}
			if m.Subject() != "agent.events."+e.TenantID+"."+e.RunID || m.Headers().Get("Nats-Msg-Id") != e.EventID {
				t.Fatalf("NATS message on %s, Nats-Msg-Id %q, for event %s of run %s", m.Subject(), m.Headers().Get("Nats-Msg-Id"), e.EventID, e.RunID)
			}
			if got := independentChecksum(t, e); got != e.Checksum {
				t.Fatalf("NATS event %s/%d: checksum %s, recomputed %s", e.RunID, e.Sequence, e.Checksum, got)
			}
			got[e.RunID] = append(got[e.RunID], e)
		case <-deadline:
			t.Fatalf("NATS: %d of %d events after %v", n, total, d)
		}
	}
	select {
	case m := <-c.msgs:
		t.Fatalf("NATS: an extra message beyond the %d committed events: %s %s", total, m.Subject(), m.Data())
	case <-time.After(300 * time.Millisecond):
	}
	for run, evs := range want {
		g := got[run]
		if len(g) != len(evs) {
			t.Fatalf("run %s: %d events on NATS, %d committed", run, len(g), len(evs))
		}
		for i := range evs {
			if g[i].EventID != evs[i].EventID || g[i].Sequence != int64(i+1) {
				t.Fatalf("run %s: NATS message %d is event %d (%s), want %d (%s)", run, i, g[i].Sequence, g[i].EventID, evs[i].Sequence, evs[i].EventID)
			}
		}
	}
}

// span is when a run held its device, from its events' timestamps.
type span struct {
	run, serial string
	from, to    time.Time
}

func runSpan(t testing.TB, serial string, evs []agent.Event) span {
	from, _ := time.Parse(agent.TimestampLayout, evs[0].TS)
	to, _ := time.Parse(agent.TimestampLayout, evs[len(evs)-1].TS)
	return span{evs[0].RunID, serial, from, to}
}

// TestServeRunsOnFourDevices: serve on a fresh data dir with 4 simulated
// emulators; 8 runs submitted over HTTP (2 per device, mixed modes) all end
// FINISHED; runs on different devices overlap in time; two runs never hold
// one device at once (events' timestamps and lease records); a NATS client
// of its own reads every event once, in order; SSE follows a run; /metrics
// passes promtool.
func TestServeRunsOnFourDevices(t *testing.T) {
	srv := simtest.StartADBServer(t)
	var serials []string
	for range 4 {
		emu, _ := launchDefault(t, srv)
		serials = append(serials, emu.Serial())
	}
	d := startDaemon(t, srv)
	col := collectNATS(t, d.NATSURL())

	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	modes := [][2]string{{"", ""}, {"ALWAYS_REINSTALL", "FORCE_RESTART"}, {"REINSTALL_IF_DIFFERENT", "LAUNCH_OR_ATTACH"}, {"INSTALL_IF_MISSING", "FORCE_RESTART"}}
	var ids []string
	serialOf := map[string]string{}
	for i := range 8 {
		m := modes[i%len(modes)]
		s := serials[i%4]
		id := d.submit(t, runBody(s, "file://"+apk, sha, m[0], m[1], nil))
		ids = append(ids, id)
		serialOf[id] = s
	}
	// Live SSE of the last run, while it runs.
	sse := make(chan []string, 1)
	go func() { sse <- followSSE(d.URL() + "/v1/runs/" + ids[7] + "/events?follow=1") }()

	d.waitStatus(t, ids, 4*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	all := map[string][]agent.Event{}
	var spans []span
	for _, id := range ids {
		v := d.run(t, id)
		evs := d.events(t, id)
		if v.Status != agent.RunFinished {
			t.Fatalf("run %s on %s: %s\n%v", id, v.Serial, v.Status, evs)
		}
		checkRunEvents(t, evs, agent.KindRunFinished)
		all[id] = evs
		spans = append(spans, runSpan(t, serialOf[id], evs))
	}
	overlapDifferent := false
	for i := range spans {
		for j := i + 1; j < len(spans); j++ {
			a, b := spans[i], spans[j]
			overlap := a.from.Before(b.to) && b.from.Before(a.to)
			if a.serial == b.serial && overlap {
				t.Fatalf("runs %s and %s overlap on %s: %v-%v and %v-%v", a.run, b.run, a.serial, a.from, a.to, b.from, b.to)
			}
			overlapDifferent = overlapDifferent || (a.serial != b.serial && overlap)
		}
	}
	if !overlapDifferent {
		t.Fatalf("no two runs on different devices overlapped in time: %+v", spans)
	}
	by := checkLeaseHistory(t, d.leases(t, true))
	for _, id := range ids {
		found := false
		for _, l := range by[serialOf[id]] {
			found = found || (l.RunID == id && l.ReleaseReason == agent.LeaseFinished)
		}
		if !found {
			t.Fatalf("run %s has no finished lease on %s: %+v", id, serialOf[id], by[serialOf[id]])
		}
	}
	col.check(t, all)

	select {
	case kinds := <-sse:
		var want []string
		for _, e := range all[ids[7]] {
			want = append(want, e.Kind)
		}
		want = append(want, "end")
		if strings.Join(kinds, ",") != strings.Join(want, ",") {
			t.Fatalf("SSE events %v, want %v", kinds, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SSE follow did not end with the run")
	}

	var devs struct {
		Devices []struct {
			Serial    string `json:"serial"`
			Readiness string `json:"readiness"`
		} `json:"devices"`
	}
	if d.call(t, "GET", "/v1/devices", nil, &devs); len(devs.Devices) != 4 || devs.Devices[0].Readiness != "ready" {
		t.Fatalf("devices: %+v", devs)
	}
	waitOutboxMarked(t, d.URL())
	metrics := promtoolCheck(t, d.URL()+"/metrics")
	for _, want := range []string{`screengraph_runs{status="FINISHED"} 8`, `screengraph_leases_held 0`, `screengraph_devices{state="ready"} 4`,
		`screengraph_node_duration_seconds_count{node="WaitIdle",outcome="SUCCESS"} 8`, `screengraph_outbox_lag_events 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Every committed event was published and marked (the lag is 0 above).
	var published float64
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, "screengraph_relay_published_total "); ok {
			published, _ = strconv.ParseFloat(v, 64)
		}
	}
	total := 0
	for _, evs := range all {
		total += len(evs)
	}
	if published != float64(total) {
		t.Errorf("screengraph_relay_published_total %v, want the %d events committed", published, total)
	}
	if st := d.call(t, "GET", "/readyz", nil, nil); st != 200 {
		t.Fatalf("/readyz %d", st)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, d.log())
	}
}

// followSSE reads a Server-Sent Events stream to its end and returns the
// event names.
func followSSE(url string) []string {
	resp, err := http.Get(url)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	defer resp.Body.Close()
	var kinds []string
	buf := make([]byte, 0, 1<<16)
	tmp := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(tmp)
		buf = append(buf, tmp[:n]...)
		for {
			i := strings.Index(string(buf), "\n\n")
			if i < 0 {
				break
			}
			for _, line := range strings.Split(string(buf[:i]), "\n") {
				if k, ok := strings.CutPrefix(line, "event: "); ok {
					kinds = append(kinds, k)
				}
			}
			buf = buf[i+2:]
		}
		if err != nil {
			return kinds
		}
	}
}

// waitOutboxMarked polls the daemon's /metrics (10 s at most) until the
// outbox lag is 0. The relay marks acked rows published in the background,
// coalesced over up to 100 ms (relay.markCoalesce), so an event that is on
// NATS is counted published shortly after, not at once.
func waitOutboxMarked(t testing.TB, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && strings.Contains(string(m), "screengraph_outbox_lag_events 0\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outbox lag is not 0 after 10 s:\n%s", m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// promtoolCheck fetches /metrics and runs Debian's `promtool check metrics`
// on it; it returns the exposition text.
func promtoolCheck(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := resp.Body.Read(buf)
		b.WriteString(string(buf[:n]))
		if err != nil {
			break
		}
	}
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	return b.String()
}
