package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// serve refuses to listen beyond loopback (HTTP or its NATS server) while
// the store holds no API token: exit 2 with an agent error naming the flag,
// before anything listens.
func TestServeRefusesOpenListenWithoutTokens(t *testing.T) {
	clearScreengraphEnv(t)
	bin := buildAgent(t)
	httpPort, natsPort := strconv.Itoa(simtest.FreePort(t)), strconv.Itoa(simtest.FreePort(t))
	for _, c := range []struct{ flag, listen, nats string }{
		{"--listen", "0.0.0.0:" + httpPort, "127.0.0.1:" + natsPort},
		{"--listen", ":" + httpPort, "127.0.0.1:" + natsPort},
		{"--listen", "[::]:" + httpPort, "localhost:" + natsPort},
		{"--nats-listen", "127.0.0.1:" + httpPort, "0.0.0.0:" + natsPort},
	} {
		dir := t.TempDir()
		// Refused at once; a serve that starts is killed after 30 s.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "serve", "--data-dir", dir, "--listen", c.listen, "--nats-listen", c.nats,
			"--adb-server", "127.0.0.1:1", "--output", "json")
		out, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Fatalf("serve --listen %s --nats-listen %s without tokens: %v (killed after 30 s: it served), want exit 2\n%s", c.listen, c.nats, err, out)
		}
		var rep struct {
			Success *bool
			Errors  []struct {
				ErrorID   string `json:"error_id"`
				ErrorCode string `json:"error_code"`
				Message   string `json:"message"`
			}
		}
		if err := json.Unmarshal(out, &rep); err != nil || len(rep.Errors) != 1 || rep.Success == nil || *rep.Success {
			t.Fatalf("not the agent error format: %v\n%s", err, out)
		}
		e := rep.Errors[0]
		if e.ErrorID != string(agent.ErrInvalidRequest) || e.ErrorCode != httpapi.CodeOpenListen ||
			!strings.Contains(e.Message, c.flag+" ") || !strings.Contains(e.Message, "--insecure-no-auth") {
			t.Errorf("%s: %+v", c.flag, e)
		}
		for _, p := range []string{httpPort, natsPort} {
			if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+p, time.Second); err == nil {
				conn.Close()
				t.Errorf("something listens on %s after the refusal", p)
			}
		}
	}
}

// --insecure-no-auth starts it with a loud warning; so does an API token in
// the store, without one.
func TestServeOpenListenInsecureOrTokens(t *testing.T) {
	clearScreengraphEnv(t)
	srv := simtest.StartADBServer(t)
	d := &daemon{t: t, bin: buildAgent(t), srv: srv, dataDir: t.TempDir(), httpPort: simtest.FreePort(t), natsPort: simtest.FreePort(t)}
	t.Cleanup(func() {
		d.stop()
		appium.StopLocal(d.dataDir)
	})
	open := "0.0.0.0:" + strconv.Itoa(d.httpPort)
	d.extra = []string{"--listen", open, "--insecure-no-auth"}
	d.start()
	if !strings.Contains(d.log(), "INSECURE") {
		t.Errorf("no warning with --insecure-no-auth:\n%s", d.log())
	}
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(d.bin, "token", "create", "--data-dir", d.dataDir, "--tenant", "ops", "--admin").CombinedOutput(); err != nil {
		t.Fatalf("token create: %v\n%s", err, out)
	}
	d.extra = []string{"--listen", open}
	d.start()
	log := d.log()
	if second := log[strings.LastIndex(log, "=== start 2"):]; strings.Contains(second, "INSECURE") {
		t.Errorf("warning with a token in the store:\n%s", second)
	}
}
