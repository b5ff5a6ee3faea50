package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/natstest"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// tenantConn is a tenant's NATS connection (natstest.Client).
type tenantConn struct {
	*natstest.Client
	nc *nats.Conn
}

func dialNATS(t *testing.T, url string, opts ...nats.Option) (*tenantConn, error) {
	c, err := natstest.Dial(t, url, opts...)
	if err != nil {
		return nil, err
	}
	return &tenantConn{Client: c, nc: c.Conn}, nil
}

// refused reports whether the server sent a permissions violation naming subject.
func (c *tenantConn) refused(subject string) bool { return c.Refused(`"` + subject + `"`) }

// TestServeTenantIsolation: the real serve binary with tokens made by the
// real `token create`; two tenants, acme and beta, each with a run waiting
// PENDING (its device is leased to someone else). Through HTTP, the CLI and
// the embedded NATS server every forbidden action is tried and refused:
// no, unknown and revoked tokens; list, read, events, steps, each control and
// a submit for the other tenant; a NATS subscription to the other tenant's
// subjects, a JetStream consumer on them, control published to its subject;
// while the same actions on the tenant's own run, and everything with the
// admin token, work. No token is ever in a run input, an event or the log.
func TestServeTenantIsolation(t *testing.T) {
	slow(t, "chains of two tenants through Appium, NATS accounts")
	srv := simtest.StartADBServer(t)
	d := startDaemon(t, srv)
	bin := buildAgent(t)
	cli := func(env []string, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			return out.String() + errb.String(), err
		}
		return out.String(), nil
	}
	create := func(args ...string) tokenCreated {
		t.Helper()
		out, err := cli(nil, append([]string{"token", "create", "--data-dir", d.dataDir, "--output", "json"}, args...)...)
		var ct tokenCreated
		if err != nil || json.Unmarshal([]byte(out), &ct) != nil || !agent.LooksLikeToken(ct.Token) || ct.ID == "" {
			t.Fatalf("token create %v: %v\n%s", args, err, out)
		}
		return ct
	}
	acme, beta, admin, gone := create("--tenant", "acme"), create("--tenant", "beta"), create("--tenant", "ops", "--admin"), create("--tenant", "acme")
	if out, err := cli(nil, "token", "revoke", gone.ID, "--data-dir", d.dataDir); err != nil {
		t.Fatalf("token revoke: %v %s", err, out)
	}
	if _, err := cli(nil, "token", "create", "--data-dir", d.dataDir, "--tenant", "a.b"); err == nil {
		t.Error("token create --tenant a.b was accepted")
	}
	out, err := cli(nil, "token", "list", "--data-dir", d.dataDir, "--output", "json")
	if err != nil || strings.Count(out, `"id"`) != 4 || !strings.Contains(out, `"revokedAt"`) {
		t.Errorf("token list: %v\n%s", err, out)
	}
	allTokens := []string{acme.Token, beta.Token, admin.Token, gone.Token}
	for _, tok := range allTokens {
		if strings.Contains(out, tok) || strings.Contains(out, agent.HashToken(tok)) {
			t.Errorf("token list shows a token or its hash:\n%s", out)
		}
	}

	// Both runs wait PENDING: their devices are leased to another holder.
	st, err := sqlite.Open(context.Background(), filepath.Join(d.dataDir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hostID, err := device.HostID(context.Background(), d.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	for _, serial := range []string{"emulator-5990", "emulator-5992"} {
		if _, err := st.AcquireLease(context.Background(), agent.DeviceKey(hostID, serial), "tenancy-test", ulid.Make().String(), time.Hour); err != nil {
			t.Fatal(err)
		}
	}

	httpAs := func(tok, method, path string, body any) (int, string) {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, d.URL()+path, r)
		if r != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	submitAs := func(tok, serial string, tenant string) string {
		t.Helper()
		body := runBody(serial, "https://127.0.0.1:9/app.apk", strings.Repeat("ab", 32), "", "", nil)
		if tenant != "" {
			body["tenantId"] = tenant
		}
		st, b := httpAs(tok, "POST", "/v1/runs", body)
		var resp struct {
			RunID string `json:"runId"`
		}
		if st != http.StatusAccepted || json.Unmarshal([]byte(b), &resp) != nil {
			t.Fatalf("submit: %d %s", st, b)
		}
		return resp.RunID
	}

	// ---- HTTP ----
	for name, tok := range map[string]string{"no": "", "revoked": gone.Token, "unknown": "sgat_" + strings.Repeat("A", 43)} {
		if st, b := httpAs(tok, "GET", "/v1/runs", nil); st != http.StatusUnauthorized || !strings.Contains(b, "permission_error") {
			t.Errorf("GET /v1/runs with %s token: %d %s", name, st, b)
		}
	}
	a := submitAs(acme.Token, "emulator-5990", "")
	b := submitAs(beta.Token, "emulator-5992", "beta")
	forBeta := runBody("emulator-5990", "https://127.0.0.1:9/app.apk", strings.Repeat("ab", 32), "", "", nil)
	forBeta["tenantId"] = "beta"
	if st, body := httpAs(acme.Token, "POST", "/v1/runs", forBeta); st != http.StatusForbidden {
		t.Errorf("submit for beta with acme's token: %d %s", st, body)
	}
	// Key-case variants, duplicate keys and bad tenant ids (issue 13 items 1
	// and 2): each a 400 naming the key or the id, nothing stored.
	base, _ := json.Marshal(runBody("emulator-5990", "https://127.0.0.1:9/app.apk", strings.Repeat("ab", 32), "", "", nil))
	rest := string(base[1:])
	for _, c := range []struct {
		tok, head, want string
	}{
		{acme.Token, `{"tenantId":"acme","TenantID":"beta",`, "TenantID"},
		{acme.Token, `{"tenantid":"beta",`, "tenantid"},
		{acme.Token, `{"tenantId":"acme","tenantId":"beta",`, "tenantId"},
		{acme.Token, `{"tenant\u0049d":"acme","tenantId":"beta",`, "tenantId"},
		{admin.Token, `{"tenantId":"a.b",`, "a.b"},
		{admin.Token, `{"tenantId":">",`, `$.tenantId: tenant id`},
		{admin.Token, `{"tenantId":"*",`, "*"},
	} {
		st, body := httpAs(c.tok, "POST", "/v1/runs", json.RawMessage(c.head+rest))
		if st != http.StatusBadRequest || !strings.Contains(body, "invalid_request_error") || !strings.Contains(body, c.want) {
			t.Errorf("submit %s...: %d %s, want 400 naming %q", c.head, st, body, c.want)
		}
	}
	if _, body := httpAs(admin.Token, "GET", "/v1/runs", nil); strings.Count(body, `"runId"`) != 2 {
		t.Fatalf("refused submissions stored runs: %s", body)
	}
	if _, body := httpAs(admin.Token, "GET", "/v1/runs/"+a, nil); !strings.Contains(body, `"tenantId":"acme"`) || !strings.Contains(body, `"status":"PENDING"`) {
		t.Fatalf("acme's run as the admin sees it: %s", body)
	}
	if _, body := httpAs(acme.Token, "GET", "/v1/runs", nil); !strings.Contains(body, a) || strings.Contains(body, b) {
		t.Errorf("acme's list: %s", body)
	}
	for _, rq := range []struct{ method, suffix string }{{"GET", ""}, {"GET", "/events"}, {"GET", "/events?follow=1"}, {"GET", "/steps/0"},
		{"POST", "/cancel"}, {"POST", "/pause"}, {"POST", "/resume"}, {"POST", "/policy"}} {
		var body any
		if rq.suffix == "/policy" {
			body = map[string]int{"version": 1}
		}
		if st, rb := httpAs(acme.Token, rq.method, "/v1/runs/"+b+rq.suffix, body); st != http.StatusNotFound || strings.Contains(rb, "beta") {
			t.Errorf("%s %s of beta's run with acme's token: %d %s", rq.method, rq.suffix, st, rb)
		}
	}

	// ---- CLI (--token, SCREENGRAPH_TOKEN) ----
	if out, err := cli(nil, "runs", "list", "--server", d.URL(), "--output", "json"); err == nil {
		t.Errorf("runs list without a token: %s", out)
	}
	if out, err := cli(nil, "runs", "list", "--server", d.URL(), "--output", "json", "--token", acme.Token); err != nil || !strings.Contains(out, a) || strings.Contains(out, b) {
		t.Errorf("runs list --token acme: %v %s", err, out)
	}
	if out, err := cli([]string{"SCREENGRAPH_TOKEN=" + beta.Token}, "runs", "list", "--server", d.URL(), "--output", "json"); err != nil || !strings.Contains(out, b) || strings.Contains(out, a) {
		t.Errorf("runs list with SCREENGRAPH_TOKEN of beta: %v %s", err, out)
	}
	for _, args := range [][]string{{"pause", b}, {"cancel", b}, {"runs", "show", b}, {"runs", "events", b}} {
		if out, err := cli(nil, append(args, "--server", d.URL(), "--token", acme.Token)...); err == nil || !strings.Contains(out, "unknown run") {
			t.Errorf("%v with acme's token: %v %s", args, err, out)
		}
	}

	// ---- NATS ----
	for name, opts := range map[string][]nats.Option{"no": nil, "revoked": {nats.Token(gone.Token)}, "unknown": {nats.Token("sgat_" + strings.Repeat("A", 43))}} {
		if _, err := dialNATS(t, d.NATSURL(), opts...); !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("NATS connect with %s token: %v, want an authorization violation", name, err)
		}
	}
	tenant := func(tok, name string) *tenantConn {
		c, err := dialNATS(t, d.NATSURL(), nats.Token(tok), nats.CustomInboxPrefix(natsbus.TenantInboxPrefix(name)))
		if err != nil {
			t.Fatalf("NATS connect as %s: %v", name, err)
		}
		return c
	}
	ac, bc := tenant(acme.Token, "acme"), tenant(beta.Token, "beta")
	adm, err := dialNATS(t, d.NATSURL(), nats.UserInfo(admin.ID, admin.Token))
	if err != nil {
		t.Fatal(err)
	}
	var forbidden []*nats.Subscription
	for _, s := range []string{"agent.events.beta.>", "agent.events." + "beta." + b, "agent.events.>", "agent.events.*." + b, "_INBOX.>", "_INBOX_beta.>"} {
		sub, _ := ac.nc.SubscribeSync(s)
		if !ac.refused(s) {
			t.Errorf("acme subscribed to %s", s)
		}
		forbidden = append(forbidden, sub)
	}
	// A tenant's own events too, with core NATS (issue 22): it reads them
	// through its push consumers (below).
	for _, c := range []struct {
		c    *tenantConn
		name string
	}{{ac, "acme"}, {bc, "beta"}} {
		s := "agent.events." + c.name + ".>"
		sub, _ := c.c.nc.SubscribeSync(s)
		if !c.c.refused(s) {
			t.Errorf("%s subscribed to %s with core NATS", c.name, s)
		}
		forbidden = append(forbidden, sub)
	}
	allLive, _ := adm.nc.SubscribeSync("agent.events.>")
	for _, c := range []*tenantConn{ac, bc, adm} {
		c.nc.Flush()
	}
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	ajs, _ := jetstream.New(ac.nc)
	for i, filter := range []string{"agent.events.beta.>", "agent.events.beta." + b, ""} {
		name := "steal" + string(rune('0'+i))
		if _, err := ajs.CreateOrUpdatePushConsumer(short(), snapshots.StreamName, jetstream.ConsumerConfig{Name: name, FilterSubject: filter, DeliverSubject: "_INBOX_acme." + name}); err == nil || !ac.refused("$JS.API.CONSUMER.CREATE.AGENT_EVENTS."+name+func() string {
			if filter == "" {
				return ""
			}
			return "." + filter
		}()) {
			t.Errorf("acme's JetStream consumer on %q: %v, want a permissions violation", filter, err)
		}
	}
	// A consumer of acme's own events pointed at beta's control subject
	// (outside the stream's subjects, so the server allows it): nothing
	// reaches beta's run. Today the daemon's queue subscription gets no push
	// deliveries at all; natsapi.IsJetStreamDelivery (snapshots/natsbus/natsapi tests) would
	// drop them in the handler regardless.
	if _, err := ajs.CreateOrUpdatePushConsumer(context.Background(), snapshots.StreamName, jetstream.ConsumerConfig{Name: "inject",
		FilterSubject: "agent.events.acme.>", DeliverSubject: snapshots.ControlSubject("beta", b),
		DeliverGroup: "screengraph-agent-control"}); err != nil { // serve's queue group: delivered to the daemon
		t.Logf("consumer delivering into beta's control subject refused by the server: %v", err)
	}
	// Control: beta's subject is denied; acme's subject with beta's run is
	// an unknown run; acme's own run is recorded.
	if m, err := ac.nc.RequestWithContext(short(), snapshots.ControlSubject("beta", b), []byte(`{"kind":"agent.run.cancellation_requested"}`)); err == nil || !ac.refused(snapshots.ControlSubject("beta", b)) {
		t.Errorf("control on beta's subject: %v %v", msgText(m), err)
	}
	m, err := ac.nc.Request(snapshots.ControlSubject("acme", b), []byte(`{"kind":"agent.run.cancellation_requested"}`), 5*time.Second)
	// issue 16: the reply said internal_error for an unknown run.
	if err != nil || !strings.Contains(string(m.Data), "not found") || !strings.Contains(string(m.Data), `"error_id":"invalid_request_error"`) {
		t.Errorf("control of beta's run under acme's subject: %v %s", err, msgText(m))
	}
	m, err = ac.nc.Request(snapshots.ControlSubject("acme", a), []byte(`{"kind":"agent.run.pause_requested"}`), 5*time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"recorded":true`) {
		t.Errorf("acme pausing its own run over NATS: %v %s", err, msgText(m))
	}
	if st, body := httpAs(admin.Token, "GET", "/v1/runs/"+b, nil); st != 200 || !strings.Contains(body, `"status":"PENDING"`) {
		t.Errorf("beta's run after acme's refused controls: %d %s", st, body)
	}

	// Both runs end: acme cancels its own over HTTP, the admin beta's.
	if st, body := httpAs(acme.Token, "POST", "/v1/runs/"+a+"/cancel", nil); st != http.StatusAccepted {
		t.Fatalf("acme cancels its own run: %d %s", st, body)
	}
	if st, body := httpAs(admin.Token, "POST", "/v1/runs/"+b+"/cancel", nil); st != http.StatusAccepted {
		t.Fatalf("the admin cancels beta's run: %d %s", st, body)
	}
	d.waitStatusAs(t, admin.Token, []string{a, b}, agent.RunCanceled)

	// Live events: the admin gets both runs'.
	seen := map[string]bool{}
	for len(seen) < 2 {
		m, err := allLive.NextMsg(10 * time.Second)
		if err != nil {
			break
		}
		seen[m.Subject] = true
	}
	if !seen[snapshots.Subject("acme", a, "")] || !seen[snapshots.Subject("beta", b, "")] {
		t.Errorf("the admin's live events: %v", seen)
	}
	for _, sub := range forbidden {
		if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
			t.Errorf("acme's refused subscription %s got %s", sub.Subject, m.Subject)
		}
	}
	// Each tenant's own JetStream consumer replays its run only.
	for _, c := range []struct {
		c         *tenantConn
		name, run string
	}{{ac, "acme", a}, {bc, "beta", b}} {
		js, _ := jetstream.New(c.c.nc)
		pc, err := js.CreateOrUpdatePushConsumer(context.Background(), snapshots.StreamName, jetstream.ConsumerConfig{Name: "mine-" + c.name,
			FilterSubject: "agent.events." + c.name + ".>", DeliverSubject: natsbus.TenantInboxPrefix(c.name) + ".mine"})
		if err != nil {
			t.Fatalf("%s's own consumer: %v", c.name, err)
		}
		got := make(chan string, 16)
		cc, err := pc.Consume(func(m jetstream.Msg) { got <- m.Subject() })
		if err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			if s != snapshots.Subject(c.name, c.run, "") {
				t.Errorf("%s's consumer delivered %s", c.name, s)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s's consumer delivered nothing", c.name)
		}
		cc.Stop()
	}

	// No token in a run input, an event, or the daemon's log; the stored
	// control log of beta's run has the admin's cancel only.
	for _, id := range []string{a, b} {
		_, body := httpAs(admin.Token, "GET", "/v1/runs/"+id+"/events", nil)
		_, detail := httpAs(admin.Token, "GET", "/v1/runs/"+id, nil)
		if strings.Contains(body+detail, "sgat_") {
			t.Errorf("run %s carries a token: %s %s", id, detail, body)
		}
	}
	log := d.log()
	for _, tok := range allTokens {
		if strings.Contains(log, tok) {
			t.Error("a token is in the daemon's log")
		}
	}
	if strings.Contains(log, "on "+snapshots.ControlSubject("beta", b)) {
		t.Errorf("the daemon took events delivered to beta's control subject for control requests:\n%s", log)
	}
}

func (d *daemon) waitStatusAs(t *testing.T, tok string, ids []string, want agent.RunStatus) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for {
			req, _ := http.NewRequest("GET", d.URL()+"/v1/runs/"+id, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			var v runView
			if resp, err := http.DefaultClient.Do(req); err == nil {
				json.NewDecoder(resp.Body).Decode(&v)
				resp.Body.Close()
			}
			if v.Status == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s is %s, want %s", id, v.Status, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func msgText(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}
