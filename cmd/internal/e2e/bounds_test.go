package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// End to end through the serve binary: a 200 KB field (and an activity name
// that would split into two am arguments) is refused at submit with
// invalid_request_error; a poison event committed directly to the store
// (bypassing submit; its 1.2 MB envelope is over NATS's 1 MiB max_payload)
// is parked at the next start while another run's events all arrive on the
// real NATS, and the daemon stays ready.
func TestServeBoundsAndParkedPoison(t *testing.T) {
	slow(t, "chains through Appium to the daemon's bounds")
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	d := startDaemon(t, srv)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)

	for _, c := range []struct {
		set  func(map[string]any)
		want string
	}{
		{func(b map[string]any) { b["projectId"] = strings.Repeat("<", 200<<10) }, "$: request body over"},
		{func(b map[string]any) { b["projectId"] = strings.Repeat("p", 129) }, "$.projectId: 129 characters"},
		{func(b map[string]any) {
			b["launchOrAttach"].(map[string]any)["applicationUnderTestDescriptor"].(map[string]any)["androidLaunchActivityName"] = ".Main --es x y"
		}, "$.launchOrAttach.applicationUnderTestDescriptor.androidLaunchActivityName:"},
	} {
		body := runBody(emu.Serial(), "file://"+apk, sha, "", "", nil)
		c.set(body)
		var rep agent.ErrorReport
		if st := d.call(t, "POST", "/v1/runs", body, &rep); st != http.StatusBadRequest || len(rep.Errors) != 1 ||
			!strings.HasPrefix(rep.Error, string(agent.ErrInvalidRequest)+": ") || !strings.Contains(rep.Error, c.want) {
			t.Fatalf("submit: %d %.300v, want 400 invalid_request_error naming %q", st, rep, c.want)
		}
	}
	var list struct{ Runs []json.RawMessage }
	if st := d.call(t, "GET", "/v1/runs", nil, &list); st != 200 || len(list.Runs) != 0 {
		t.Fatalf("refused submits stored runs: %d %d", st, len(list.Runs))
	}

	// The poison, written while the daemon is stopped, as a crashed writer
	// or an older version without the submit limits would have left it.
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(d.dataDir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	poison := storetest.NewRun("local", emu.Serial())
	poison.ProjectID = strings.Repeat("<", 200<<10)
	poison.Status = agent.RunFailed // nothing to schedule: only its events wait
	if err := st.CreateRun(context.Background(), poison); err != nil {
		t.Fatal(err)
	}
	if err := st.CommitStep(context.Background(), storetest.NodeStep(poison, 1, 0, "EnsureDevice")); err != nil {
		t.Fatal(err)
	}
	st.Close()
	d.start()
	col := collectNATS(t, d.NATSURL())
	id := d.submit(t, runBody(emu.Serial(), "file://"+apk, sha, "", "", nil))
	d.waitStatus(t, []string{id}, 3*time.Minute, agent.RunFinished, agent.RunFailed)
	// Exactly the healthy run's events arrive, none of the poison's.
	col.check(t, map[string][]agent.Event{id: d.events(t, id)})

	var parked struct{ Parked []agent.ParkedEvent }
	if st := d.call(t, "GET", "/v1/outbox/parked", nil, &parked); st != 200 || len(parked.Parked) != 3 {
		t.Fatalf("GET /v1/outbox/parked: %d, %d rows, want the poison run's 3", st, len(parked.Parked))
	}
	for _, p := range parked.Parked {
		if p.RunID != poison.RunID || !strings.Contains(p.Reason, "max_payload") || p.Bytes < 1<<20 {
			t.Errorf("parked %+v", p)
		}
	}
	if st := d.call(t, "GET", "/readyz", nil, nil); st != 200 {
		t.Errorf("/readyz %d with the poison parked", st)
	}
	waitOutboxMarked(t, d.URL())
	resp, err := http.Get(d.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"screengraph_relay_parked_total 3", "screengraph_outbox_parked_events 3", "screengraph_outbox_lag_events 0"} {
		if !strings.Contains(string(m), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
