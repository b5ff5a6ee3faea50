package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// controlSent is one control request of the stress test and its answer.
type controlSent struct {
	runID   string
	kind    string
	version int
	via     string    // "http" or "nats"
	status  int       // 202, 409, or 0 when unanswered (the daemon died first)
	id      string    // requestId of a 202
	at      time.Time // when the answer arrived
	pending bool      // the run had not started when the 202 arrived (see check)
}

// controlClient sends control requests over HTTP and NATS without failing
// the test on a transport error: a request the daemon was killed under is
// unanswered, which the checks allow (it may or may not have been recorded).
type controlClient struct {
	d  *daemon
	nc *nats.Conn
	hc *http.Client
}

func (c *controlClient) send(s *controlSent) error {
	path := map[string]string{
		agent.KindCancelRequested: "cancel", agent.KindPauseRequested: "pause",
		agent.KindResumeRequested: "resume", agent.KindPolicySwitchRequested: "policy",
	}[s.kind]
	var body struct {
		RequestID string `json:"requestId"`
		Recorded  bool   `json:"recorded"`
		Success   *bool  `json:"success"`
		Error     string `json:"error"`
	}
	if s.via == "nats" {
		msg := map[string]any{"kind": s.kind}
		if s.version > 0 {
			msg["policyVersion"] = s.version
		}
		b, _ := json.Marshal(msg)
		reply, err := c.nc.Request("agent.control.local."+s.runID, b, 5*time.Second)
		if err != nil {
			return nil // no daemon answered: unanswered
		}
		s.at = time.Now()
		if err := json.Unmarshal(reply.Data, &body); err != nil {
			return fmt.Errorf("NATS reply %q: %v", reply.Data, err)
		}
		switch {
		case body.Recorded && body.RequestID != "":
			s.status, s.id = http.StatusAccepted, body.RequestID
		case body.Success != nil && !*body.Success && strings.Contains(body.Error, agent.ErrRunTerminal.Error()):
			s.status = http.StatusConflict
		default:
			return fmt.Errorf("NATS reply to %s of %s: %s", s.kind, s.runID, reply.Data)
		}
		return nil
	}
	var rb io.Reader
	if s.kind == agent.KindPolicySwitchRequested {
		b, _ := json.Marshal(map[string]int{"version": s.version})
		rb = bytes.NewReader(b)
	}
	req, _ := http.NewRequest("POST", c.d.URL()+"/v1/runs/"+s.runID+"/"+path, rb)
	if rb != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil // connection refused or reset: unanswered
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil // killed while answering: unanswered
	}
	s.at = time.Now()
	switch resp.StatusCode {
	case http.StatusAccepted:
		if err := json.Unmarshal(b, &body); err != nil || !body.Recorded || body.RequestID == "" {
			return fmt.Errorf("202 to %s of %s: %s", s.kind, s.runID, b)
		}
		s.status, s.id = resp.StatusCode, body.RequestID
	case http.StatusConflict:
		s.status = resp.StatusCode
	default:
		return fmt.Errorf("%s of %s: %d %s", s.kind, s.runID, resp.StatusCode, b)
	}
	return nil
}

// waitHealthy polls /healthz until the (restarted) daemon answers.
func (c *controlClient) waitHealthy(stop <-chan struct{}) {
	for {
		if resp, err := c.hc.Get(c.d.URL() + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestServeControlStress: 32 runs on 4 simulated devices (so most wait
// PENDING behind their device's first run), 200 control requests (pause,
// resume, policy switch to v2/v3, cancel; over HTTP and NATS, from 4
// senders at once) while the daemon is SIGKILLed 4 times at seeded random
// points. Then every PAUSED run is resumed until all have ended. From the
// stored events alone: each request answered 202 is named by exactly one
// event of its run (appliedControl, same kind and version), no request id
// twice, only requests sent appear there, every accepted cancel ended its
// run CANCELED, every node ran under the latest switch applied before it
// (a switch is never lost to a crash), and each 409 came after the run's
// terminal commit. Replay with SCREENGRAPH_CHAOS_SEED=<the seed logged>.
func TestServeControlStress(t *testing.T) {
	slow(t, "chaos: 200 control requests, the daemon SIGKILLed")
	rng := chaosRNG(t, 0xc0de)
	srv := simtest.StartADBServer(t)
	var serials []string
	t0 := time.Now()
	for range 4 {
		emu, _ := launchDefault(t, srv)
		serials = append(serials, emu.Serial())
	}
	dir := t.TempDir()
	var pols []string
	for _, v := range []int{2, 3} {
		p := filepath.Join(dir, fmt.Sprintf("v%d.yaml", v))
		if err := os.WriteFile(p, []byte(fmt.Sprintf("version: %d\nidleHeuristics:\n  minQuietMillis: %d\n", v, 100*v)), 0o600); err != nil {
			t.Fatal(err)
		}
		pols = append(pols, "--policy", p)
	}
	d := startDaemon(t, srv, append([]string{"--lease-ttl", "3s"}, pols...)...)
	nc, err := nats.Connect(d.NATSURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl := &controlClient{d: d, nc: nc, hc: &http.Client{Timeout: 10 * time.Second}}

	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	var ids []string
	for i := range 32 {
		b := runBody(serials[i%len(serials)], "file://"+apk, sha, "", "", nil)
		b["policyVersion"] = 1
		ids = append(ids, d.submit(t, b))
	}

	// The plan comes from the seed: which run, which kind, which path.
	t.Logf("%v: daemon up, 32 runs submitted", time.Since(t0).Round(time.Millisecond))
	const requests, senders, kills = 200, 4, 4
	plan := make([]*controlSent, requests)
	for i := range plan {
		s := &controlSent{runID: ids[rng.IntN(len(ids))], via: "http"}
		switch k := rng.IntN(100); {
		case k < 38:
			s.kind = agent.KindPauseRequested
		case k < 70:
			s.kind = agent.KindResumeRequested
		case k < 92:
			s.kind, s.version = agent.KindPolicySwitchRequested, 2+rng.IntN(2)
		default:
			s.kind = agent.KindCancelRequested
		}
		if rng.IntN(4) == 0 {
			s.via = "nats"
		}
		plan[i] = s
	}
	gaps := make([]time.Duration, requests)
	for i := range gaps {
		gaps[i] = time.Duration(rng.IntN(120)) * time.Millisecond
	}
	killAfter := make([]time.Duration, kills)
	for i := range killAfter {
		killAfter[i] = time.Duration(300+rng.IntN(900)) * time.Millisecond
	}

	stop := make(chan struct{})
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < requests; i += senders {
				time.Sleep(gaps[i]) // seeded spacing, so the kills land between and during requests
				if err := cl.send(plan[i]); err != nil {
					errs <- err
					return
				}
				if plan[i].status == 0 {
					cl.waitHealthy(stop)
				}
			}
		}()
	}
	for k := range kills {
		time.Sleep(killAfter[k])
		d.kill()
		d.start()
		t.Logf("kill %d done", k+1)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sent := slices.Clone(plan)

	t.Logf("%v: requests and kills done", time.Since(t0).Round(time.Millisecond))
	// Drive every run to its end: resume the PAUSED ones (more requests,
	// checked like the others).
	deadline := time.Now().Add(2 * time.Minute)
	lastResume := map[string]time.Time{}
	for {
		open := 0
		for _, id := range ids {
			st := d.run(t, id).Status
			if st.Terminal() {
				continue
			}
			open++
			if st == agent.RunPaused && time.Since(lastResume[id]) > time.Second {
				s := &controlSent{runID: id, kind: agent.KindResumeRequested, via: "http"}
				if err := cl.send(s); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, s)
				lastResume[id] = time.Now()
			}
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs still open after 2 minutes\n%s", open, d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}

	t.Logf("%v: every run ended", time.Since(t0).Round(time.Millisecond))
	all := map[string][]agent.Event{}
	for _, id := range ids {
		all[id] = d.events(t, id)
	}
	counts := checkControlHonored(t, ids, all, sent, func(id string) agent.RunStatus { return d.run(t, id).Status })
	collectNATS(t, d.NATSURL()).check(t, all)
	checkLeaseHistory(t, d.leases(t, true))
	t.Logf("%d runs (%d FINISHED, %d CANCELED), %d kills; %d control requests: %d honored once (%d sent while PENDING, %d over NATS), %d answered 409 after the end, %d unanswered (daemon killed), %d unanswered ones applied",
		len(ids), counts.finished, counts.canceled, kills, len(sent), counts.honored, counts.whilePending, counts.nats, counts.conflict, counts.unanswered, counts.unansweredApplied)
	if counts.whilePending == 0 || counts.honored < requests/4 || counts.canceled == 0 {
		t.Fatalf("the stress did not reach its cases: %+v", counts)
	}
}

type controlCounts struct {
	honored, conflict, unanswered, unansweredApplied, whilePending, nats, finished, canceled int
}

// checkControlHonored checks the requests sent against the runs' stored
// events (see TestServeControlStress).
func checkControlHonored(t *testing.T, ids []string, all map[string][]agent.Event, sent []*controlSent, status func(string) agent.RunStatus) controlCounts {
	t.Helper()
	type applied struct {
		run  string
		ev   agent.Event
		kind string
		ver  int
	}
	byID := map[string]applied{}
	var c controlCounts
	for _, run := range ids {
		evs := all[run]
		st := status(run)
		switch st {
		case agent.RunFinished:
			c.finished++
			checkRunEvents(t, evs, agent.KindRunFinished)
		case agent.RunCanceled:
			c.canceled++
			checkRunEvents(t, evs, agent.KindRunCanceled)
		default:
			t.Fatalf("run %s ended %s: %v", run, st, kindsOf(evs))
		}
		version := 1
		for _, e := range evs {
			var p struct {
				PolicyVersion  int                    `json:"policyVersion"`
				AppliedControl []agent.AppliedControl `json:"appliedControl"`
			}
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			for _, a := range p.AppliedControl {
				if prev, dup := byID[a.RequestID]; dup {
					t.Fatalf("request %s applied twice: run %s seq %d and run %s seq %d", a.RequestID, prev.run, prev.ev.Sequence, run, e.Sequence)
				}
				byID[a.RequestID] = applied{run: run, ev: e, kind: a.Kind, ver: a.PolicyVersion}
				if a.Kind == agent.KindPolicySwitchRequested {
					version = a.PolicyVersion
				}
			}
			// A node runs under the latest switch applied before (or with)
			// its start: a switch lost to a crash would show here.
			if e.Kind == agent.KindNodeStarted && p.PolicyVersion != version {
				t.Fatalf("run %s seq %d: node started under policy v%d, the switches applied say v%d", run, e.Sequence, p.PolicyVersion, version)
			}
		}
	}
	started := func(run string) time.Time {
		ts, _ := time.Parse(agent.TimestampLayout, all[run][0].TS)
		return ts
	}
	ended := func(run string) time.Time {
		evs := all[run]
		ts, _ := time.Parse(agent.TimestampLayout, evs[len(evs)-1].TS)
		return ts
	}
	known := map[string]bool{}
	for _, s := range sent {
		switch s.status {
		case http.StatusAccepted:
			known[s.id] = true
			a, ok := byID[s.id]
			if !ok {
				t.Fatalf("request %s (%s v%d of run %s, 202 at %v) was never honored; run's events: %v", s.id, s.kind, s.version, s.runID, s.at, kindsOf(all[s.runID]))
			}
			if a.run != s.runID || a.kind != s.kind || a.ver != s.version {
				t.Fatalf("request %s (%s v%d of run %s) applied as %s v%d in run %s", s.id, s.kind, s.version, s.runID, a.kind, a.ver, a.run)
			}
			if s.kind == agent.KindCancelRequested && status(s.runID) != agent.RunCanceled {
				t.Fatalf("run %s: cancel %s accepted, run ended %s", s.runID, s.id, status(s.runID))
			}
			c.honored++
			if s.at.Before(started(s.runID)) {
				c.whilePending++
			}
			if s.via == "nats" {
				c.nats++
			}
		case http.StatusConflict:
			// The run's final commit came before the answer (ms resolution).
			if ended(s.runID).After(s.at.Add(time.Millisecond)) {
				t.Fatalf("run %s: %s answered 409 at %v, but the run ended at %v", s.runID, s.kind, s.at, ended(s.runID))
			}
			c.conflict++
		default:
			c.unanswered++
		}
	}
	for id, a := range byID {
		if !known[id] {
			c.unansweredApplied++
			if c.unansweredApplied > c.unanswered {
				t.Fatalf("request %s applied in run %s seq %d was never sent (or more unknown ids than unanswered requests)", id, a.run, a.ev.Sequence)
			}
		}
	}
	return c
}
