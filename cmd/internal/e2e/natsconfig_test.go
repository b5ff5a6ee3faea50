package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
)

// The configuration `nats-config` prints, loaded by Debian's nats-server
// (2.9.10) with JetStream: the daemons' user and every token's user; a
// tenant (user = token id, password = token) gets its own subjects and
// JetStream consumers only; a revoked token and anonymous clients are
// refused; the admin token sees every tenant.
func TestNATSConfigOnNATSServer(t *testing.T) {
	natsServer, err := exec.LookPath("nats-server")
	if err != nil {
		natsServer = "/usr/sbin/nats-server"
	}
	if _, err := os.Stat(natsServer); err != nil {
		t.Fatalf("nats-server is not installed (apt-get install nats-server): %v", err)
	}
	bin := buildAgent(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return string(out)
	}
	token := func(args ...string) tokenCreated {
		t.Helper()
		var ct tokenCreated
		if err := json.Unmarshal([]byte(run(append([]string{"token", "create", "--data-dir", data, "--output", "json"}, args...)...)), &ct); err != nil {
			t.Fatal(err)
		}
		return ct
	}
	acme, beta, admin, gone := token("--tenant", "acme"), token("--tenant", "beta"), token("--tenant", "ops", "--admin"), token("--tenant", "acme")
	run("token", "revoke", gone.ID, "--data-dir", data)
	auth := run("nats-config", "--data-dir", data, "--daemon-password", "daemon-secret")
	for _, tok := range []tokenCreated{acme, beta, admin, gone} {
		if strings.Contains(auth, tok.Token) {
			t.Fatal("nats-config printed a token")
		}
	}
	if strings.Contains(auth, gone.ID) || strings.Contains(auth, "daemon-secret") || !strings.Contains(auth, acme.ID) {
		t.Fatalf("nats-config:\n%s", auth)
	}
	port := simtest.FreePort(t)
	os.WriteFile(filepath.Join(dir, "auth.conf"), []byte(auth), 0o600)
	conf := filepath.Join(dir, "server.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n}\ninclude \"auth.conf\"\n", port, filepath.Join(dir, "js"))), 0o600)
	if out, err := exec.Command(natsServer, "-t", "-c", conf).CombinedOutput(); err != nil {
		t.Fatalf("nats-server -t: %v\n%s\n%s", err, out, auth)
	}
	srv := exec.Command(natsServer, "-c", conf)
	srv.Stdout, srv.Stderr = os.Stderr, os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nats-server does not listen")
		}
	}

	// The daemon's user: the stream and two runs' events.
	dc, err := dialNATS(t, url, nats.UserInfo(natsbus.DaemonNATSUser, "daemon-secret"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := natsbus.NewJetStreamPublisher(context.Background(), dc.nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"agent.events.acme.r1", "agent.events.beta.r2"} {
		if err := pub.Publish(context.Background(), s, s, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for name, opts := range map[string][]nats.Option{"no": nil, "revoked": {nats.UserInfo(gone.ID, gone.Token)},
		"another id": {nats.UserInfo(beta.ID, acme.Token)}, "daemon, wrong password": {nats.UserInfo(natsbus.DaemonNATSUser, acme.Token)}} {
		if _, err := dialNATS(t, url, opts...); !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("connect with %s credentials: %v, want an authorization violation", name, err)
		}
	}
	ac, err := dialNATS(t, url, nats.UserInfo(acme.ID, acme.Token), nats.CustomInboxPrefix(natsbus.TenantInboxPrefix("acme")))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"agent.events.beta.>", "agent.events.>", "_INBOX.>"} {
		ac.nc.SubscribeSync(s)
		if !ac.refused(s) {
			t.Errorf("acme subscribed to %s", s)
		}
	}
	ac.nc.Publish("agent.control.beta.r2", []byte(`{"kind":"agent.run.pause_requested"}`))
	if !ac.refused("agent.control.beta.r2") {
		t.Error("acme published control to beta's run")
	}
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ajs, _ := jetstream.New(ac.nc)
	if _, err := ajs.CreateOrUpdatePushConsumer(short, snapshots.StreamName, jetstream.ConsumerConfig{Name: "steal", FilterSubject: "agent.events.beta.>", DeliverSubject: "_INBOX_acme.steal"}); err == nil || !ac.refused("$JS.API.CONSUMER.CREATE.AGENT_EVENTS.steal.agent.events.beta.>") {
		t.Errorf("acme's consumer on beta's events: %v", err)
	}
	pc, err := ajs.CreateOrUpdatePushConsumer(context.Background(), snapshots.StreamName, jetstream.ConsumerConfig{Name: "mine", FilterSubject: "agent.events.acme.>", DeliverSubject: "_INBOX_acme.mine"})
	if err != nil {
		t.Fatalf("acme's own consumer: %v", err)
	}
	got := make(chan string, 4)
	cc, err := pc.Consume(func(m jetstream.Msg) { got <- m.Subject() })
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	select {
	case s := <-got:
		if s != "agent.events.acme.r1" {
			t.Errorf("acme's consumer delivered %s", s)
		}
	case <-time.After(5 * time.Second):
		t.Error("acme's own consumer delivered nothing")
	}
	adm, err := dialNATS(t, url, nats.UserInfo(admin.ID, admin.Token))
	if err != nil {
		t.Fatal(err)
	}
	all, _ := adm.nc.SubscribeSync("agent.events.>")
	adm.nc.Flush()
	dc.nc.Publish("agent.events.beta.r2", []byte("live"))
	if _, err := all.NextMsg(3 * time.Second); err != nil {
		t.Errorf("admin's subscription: %v", err)
	}
}
