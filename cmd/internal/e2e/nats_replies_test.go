package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/natstest"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// issue 22 item 1, on the embedded NATS server: the real serve binary, API
// tokens made by `token create`, nats.go clients. See checkControlReplies.
func TestServeControlRepliesOnlyToRequesterInbox(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end through serve")
	}
	srv := simtest.StartADBServer(t)
	d := startDaemon(t, srv)
	toks := createTokens(t, d.dataDir)
	checkControlReplies(t, d, d.NATSURL(), toks)
}

// issue 22 item 1, in fleet mode: Debian's nats-server configured by
// `nats-config` (the daemons' user, one user per token), serve with
// --nats-url and the daemons' user. See checkControlReplies.
func TestServeControlRepliesOnNATSConfigServer(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end through serve and nats-server")
	}
	srv := simtest.StartADBServer(t)
	bin := buildAgent(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	toks := createTokens(t, data)
	out, err := exec.Command(bin, "nats-config", "--data-dir", data, "--daemon-password", "daemon-secret").Output()
	if err != nil {
		t.Fatalf("nats-config: %v", err)
	}
	url := startConfiguredNATS(t, dir, string(out))
	d := &daemon{t: t, bin: bin, srv: srv, dataDir: data, httpPort: simtest.FreePort(t), natsPort: simtest.FreePort(t),
		extra: []string{"--nats-url", strings.Replace(url, "nats://", "nats://"+natsbus.DaemonNATSUser+":daemon-secret@", 1)}}
	t.Cleanup(func() {
		d.stop()
		// The daemon's local Appium is detached to outlive it (later
		// daemons reuse it); the test stops it, as startDaemonEnv does.
		appium.StopLocal(d.dataDir)
	})
	d.start()
	checkControlReplies(t, d, url, toks)
}

type replyTokens struct{ acme, beta, admin tokenCreated }

// createTokens makes acme's, beta's and an admin token in data with the
// real `token create`.
func createTokens(t *testing.T, data string) replyTokens {
	t.Helper()
	bin := buildAgent(t)
	create := func(args ...string) tokenCreated {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"token", "create", "--data-dir", data, "--output", "json"}, args...)...).Output()
		var ct tokenCreated
		if err != nil || json.Unmarshal(out, &ct) != nil || ct.Token == "" {
			t.Fatalf("token create %v: %v %s", args, err, out)
		}
		return ct
	}
	return replyTokens{acme: create("--tenant", "acme"), beta: create("--tenant", "beta"), admin: create("--tenant", "ops", "--admin")}
}

// startConfiguredNATS starts Debian's nats-server with JetStream under dir
// and auth (a `nats-config` output) included, on a free loopback port, and
// returns its URL.
func startConfiguredNATS(t *testing.T, dir, auth string) string {
	t.Helper()
	natsServer, err := exec.LookPath("nats-server")
	if err != nil {
		natsServer = natstest.DefaultBinary
	}
	port := simtest.FreePort(t)
	if err := os.WriteFile(filepath.Join(dir, "auth.conf"), []byte(auth), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n}\ninclude \"auth.conf\"\n", port, filepath.Join(dir, "js"))), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(natsServer, "-t", "-c", conf).CombinedOutput(); err != nil {
		t.Fatalf("nats-server -t: %v\n%s\n%s", err, out, auth)
	}
	srv := exec.Command(natsServer, "-c", conf)
	srv.Stdout, srv.Stderr = os.Stderr, os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nats-server does not listen")
		}
	}
	return "nats://127.0.0.1:" + strconv.Itoa(port)
}

// checkControlReplies: acme and beta each have a run canceled (its events in
// AGENT_EVENTS) and acme one waiting PENDING. acme publishes control
// requests on its own subject with the reply subject on beta's events
// subject, on $JS.API.STREAM.PURGE.AGENT_EVENTS and on beta's inbox: none
// is answered there (the admin, subscribed to every one of them, sees
// nothing; the stream keeps its messages and beta's last event), each is
// counted in screengraph_nats_control_refused_total; the same request on
// acme's own inbox gets its answer. And no event a tenant reads names
// another tenant's event id in Nats-Expected-Last-Msg-Id; a tenant may not
// subscribe to its own event subjects with core NATS (only its inbox).
func checkControlReplies(t *testing.T, d *daemon, natsURL string, tk replyTokens) {
	ctx := context.Background()
	httpAs := func(tok, method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, d.URL()+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	submitAs := func(tok, serial string) string {
		t.Helper()
		st, b := postJSON(t, d.URL()+"/v1/runs", tok, runBody(serial, "https://127.0.0.1:9/app.apk", strings.Repeat("ab", 32), "", "", nil))
		var resp struct {
			RunID string `json:"runId"`
		}
		if st != http.StatusAccepted || json.Unmarshal([]byte(b), &resp) != nil {
			t.Fatalf("submit: %d %s", st, b)
		}
		return resp.RunID
	}
	// The runs wait PENDING: their devices are leased to another holder.
	store, err := sqlite.Open(ctx, filepath.Join(d.dataDir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	hostID, err := device.HostID(ctx, d.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	for _, serial := range []string{"emulator-5990", "emulator-5992"} {
		if _, err := store.AcquireLease(ctx, agent.DeviceKey(hostID, serial), "replies-test", ulid.Make().String(), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	tenant := func(tok tokenCreated, name string) *tenantConn {
		t.Helper()
		c, err := dialNATS(t, natsURL, nats.UserInfo(tok.ID, tok.Token), nats.CustomInboxPrefix(natsbus.TenantInboxPrefix(name)))
		if err != nil {
			t.Fatalf("NATS connect as %s: %v", name, err)
		}
		return c
	}
	ac, bc := tenant(tk.acme, "acme"), tenant(tk.beta, "beta")
	// A tenant's core subscription to its own events would receive the
	// relay's publishes with the daemon's ack inbox as reply subject, and
	// allow_responses would let it forge the stream's acks: refused.
	if _, err := ac.nc.SubscribeSync("agent.events.acme.>"); err != nil || !ac.refused("agent.events.acme.>") {
		t.Errorf("acme subscribed to its own event subjects with core NATS (%v)", err)
	}
	adm, err := dialNATS(t, natsURL, nats.UserInfo(tk.admin.ID, tk.admin.Token))
	if err != nil {
		t.Fatal(err)
	}
	admJS, _ := jetstream.New(adm.nc)
	// storedEvent waits until the stream holds an event of run's subject.
	storedEvent := func(tenant, run string) *jetstream.RawStreamMsg {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if st, err := admJS.Stream(ctx, snapshots.StreamName); err == nil {
				if m, err := st.GetLastMsgForSubject(ctx, snapshots.Subject(tenant, run, "")); err == nil {
					return m
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no event of %s's run %s in %s\n%s", tenant, run, snapshots.StreamName, d.log())
			}
		}
	}
	a1 := submitAs(tk.acme.Token, "emulator-5990")
	b := submitAs(tk.beta.Token, "emulator-5992")
	a2 := submitAs(tk.acme.Token, "emulator-5990")
	// acme's run ends first, then beta's: beta's first event is stored
	// right after acme's.
	if st, body := httpAs(tk.acme.Token, "POST", "/v1/runs/"+a1+"/cancel"); st != http.StatusAccepted {
		t.Fatalf("acme cancels its run: %d %s", st, body)
	}
	d.waitStatusAs(t, tk.admin.Token, []string{a1}, agent.RunCanceled)
	storedEvent("acme", a1)
	if st, body := httpAs(tk.beta.Token, "POST", "/v1/runs/"+b+"/cancel"); st != http.StatusAccepted {
		t.Fatalf("beta cancels its run: %d %s", st, body)
	}
	d.waitStatusAs(t, tk.admin.Token, []string{b}, agent.RunCanceled)
	betaLast := storedEvent("beta", b)
	st, err := admJS.Stream(ctx, snapshots.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	before, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The admin listens where the daemon must not write.
	targets := []string{snapshots.Subject("beta", b, ""), "$JS.API.STREAM.PURGE." + snapshots.StreamName, natsbus.TenantInboxPrefix("beta") + ".stolen"}
	var watch []*nats.Subscription
	for _, s := range []string{"agent.events.beta.>", "$JS.API.STREAM.>", natsbus.TenantInboxPrefix("beta") + ".>"} {
		sub, err := adm.nc.SubscribeSync(s)
		if err != nil {
			t.Fatal(err)
		}
		watch = append(watch, sub)
	}
	adm.nc.Flush()
	control := snapshots.ControlSubject("acme", a2)
	for _, reply := range targets {
		if err := ac.nc.PublishRequest(control, reply, []byte(`{"kind":"agent.run.pause_requested"}`)); err != nil {
			t.Fatal(err)
		}
	}
	// One subscription handles a connection's messages in order: once this
	// request on acme's own inbox is answered, those before were handled.
	m, err := ac.nc.Request(control, []byte(`{"kind":"agent.run.pause_requested"}`), 10*time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"recorded":true`) || !strings.Contains(string(m.Data), a2) {
		t.Fatalf("acme's request on its own inbox: %v %s", err, msgText(m))
	}
	for _, sub := range watch {
		if m, err := sub.NextMsg(300 * time.Millisecond); err == nil {
			t.Errorf("the daemon answered acme's request on %s: %.200s", m.Subject, m.Data)
		}
	}
	after, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.State.FirstSeq != before.State.FirstSeq || after.State.Msgs < before.State.Msgs {
		t.Errorf("AGENT_EVENTS went from %d messages (first %d) to %d (first %d)", before.State.Msgs, before.State.FirstSeq, after.State.Msgs, after.State.FirstSeq)
	}
	if m, err := st.GetLastMsgForSubject(ctx, snapshots.Subject("beta", b, "")); err != nil || m.Sequence != betaLast.Sequence {
		t.Errorf("beta's last event: %v %v, want stream sequence %d", msgSeq(m), err, betaLast.Sequence)
	}
	metrics := refusedMetrics(t, d, tk.admin.Token)
	for reason, want := range map[string]float64{natsbus.RefusedStream: 1, natsbus.RefusedJetStreamAPI: 1, "foreign_subject": 1, natsbus.RefusedSystem: 0, "invalid_subject": 0} {
		if _, ok := metrics[reason]; !ok {
			t.Errorf("/metrics has no screengraph_nats_control_refused_total{reason=%q}", reason)
		}
		if metrics[reason] != want {
			t.Errorf("screengraph_nats_control_refused_total{reason=%q} = %v, want %v (all: %v)", reason, metrics[reason], want, metrics)
		}
	}

	// Each tenant's events name only their own run's event ids.
	checkOwnChain(t, ac, "acme", 1)
	checkOwnChain(t, bc, "beta", 1)
}

// checkOwnChain reads at least n events of tenant through its own push
// consumer and checks that a Nats-Expected-Last-Msg-Id header, where there is
// one, names an event of the same tenant read before it (the chain names the
// row before within a tenant's subjects, never across tenants).
func checkOwnChain(t *testing.T, c *tenantConn, tenant string, n int) {
	t.Helper()
	js, _ := jetstream.New(c.nc)
	pc, err := js.CreateOrUpdatePushConsumer(context.Background(), snapshots.StreamName, jetstream.ConsumerConfig{Name: "chain-" + tenant,
		FilterSubject: "agent.events." + tenant + ".>", DeliverSubject: natsbus.TenantInboxPrefix(tenant) + ".chain", AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		t.Fatalf("%s's consumer: %v", tenant, err)
	}
	got := make(chan jetstream.Msg, 64)
	cc, err := pc.Consume(func(m jetstream.Msg) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	seen := map[string]bool{} // the tenant's event ids read
	for i := 0; ; i++ {
		var m jetstream.Msg
		if i < n {
			select {
			case m = <-got:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s's consumer delivered %d events, want %d", tenant, i, n)
			}
		} else {
			select {
			case m = <-got:
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
		if prev := m.Headers().Get(jetstream.ExpectedLastMsgIDHeader); prev != "" && !seen[prev] {
			t.Errorf("%s's event %s on %s names %s in %s: not one of %s's events", tenant, m.Headers().Get(jetstream.MsgIDHeader), m.Subject(), prev, jetstream.ExpectedLastMsgIDHeader, tenant)
		}
		seen[m.Headers().Get(jetstream.MsgIDHeader)] = true
	}
}

func msgSeq(m *jetstream.RawStreamMsg) any {
	if m == nil {
		return nil
	}
	return m.Sequence
}

// refusedMetrics reads screengraph_nats_control_refused_total by reason off
// the daemon's /metrics (admin token).
func refusedMetrics(t *testing.T, d *daemon, adminToken string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", d.URL()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, `screengraph_nats_control_refused_total{reason="`)
		if !ok {
			continue
		}
		reason, val, _ := strings.Cut(rest, `"} `)
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("metrics line %q", line)
		}
		out[reason] = v
	}
	return out
}

// postJSON posts body as JSON with a bearer token and returns the status and
// the answer.
func postJSON(t *testing.T, url, tok string, body any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(rb)
}
