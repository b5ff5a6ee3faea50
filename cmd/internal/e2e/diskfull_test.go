package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/nodes"
)

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory, unmounted
// at cleanup (registered first, so it runs after the cleanups of what is
// started on it). It skips the test where mounting is not allowed.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+itoa64(size)+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		// CI runs as root and must run this test; a developer's
		// unprivileged loop may skip it.
		if os.Getenv("CI") != "" || os.Geteuid() == 0 {
			t.Fatalf("mount a tmpfs: %v %s", err, out)
		}
		t.Skipf("cannot mount a tmpfs (needs root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

func itoa64(n int64) string { b, _ := json.Marshal(n); return string(b) }

// fillTo fills dir's filesystem with one file until about left bytes are free.
func fillTo(t *testing.T, dir string, left int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, free-left); err != nil {
		t.Fatalf("fallocate %d bytes: %v", free-left, err)
	}
	return p
}

// TestServeDiskFull (issue 22, item 5): serve's data dir on a 40 MB tmpfs,
// filled to 8 KiB free while a run is in flight (after its ProvisionApp):
// a submit is 503 resource_exhausted with Retry-After (the old daemon took
// it, 202, while the WAL had room, and answered 500 internal_error "database
// or disk is full (13)" once it had none), /readyz is 503 with the store
// check saying the disk is full (the old one: ready throughout); once
// the filler is deleted /readyz is ready again, the run in flight finishes
// with gapless events, and a submit is accepted.
func TestServeDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve and Appium on a tmpfs")
	}
	mnt := mountTmpfs(t, 40<<20)
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	d := startDaemonLimited(t, srv, 0, filepath.Join(mnt, "data"))

	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	body := runBody(emu.Serial(), "file://"+apk, signerDigest(t, apk), "ALWAYS_REINSTALL", "FORCE_RESTART", nil)
	id := d.submit(t, body)
	deadline := time.Now().Add(2 * time.Minute)
	for provisioned := false; !provisioned; {
		v := d.run(t, id)
		for _, n := range v.Nodes {
			provisioned = provisioned || (n.Node == nodes.NodeProvisionApp && n.Outcome == "SUCCESS")
		}
		if v.Status.Terminal() {
			t.Fatalf("run %s ended %s before the disk filled\n%s", id, v.Status, d.log())
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: no ProvisionApp success in 2 minutes\n%s", id, d.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	filler := fillTo(t, mnt, 8<<10)

	// Full: submits are refused as exhaustion, readiness says why.
	b, _ := json.Marshal(body)
	resp, err := http.Post(d.URL()+"/v1/runs", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rep struct {
		Errors []struct {
			ErrorID   string `json:"error_id"`
			Retryable bool   `json:"retryable"`
		} `json:"errors"`
	}
	json.Unmarshal(rb, &rep)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || len(rep.Errors) != 1 ||
		rep.Errors[0].ErrorID != string(agent.ErrResourceExhausted) || !rep.Errors[0].Retryable {
		t.Fatalf("submit on a full disk: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), rb)
	}
	ready := func() (int, map[string]string) {
		t.Helper()
		var v struct {
			Checks map[string]string `json:"checks"`
		}
		st := d.call(t, "GET", "/readyz", nil, &v)
		return st, v.Checks
	}
	if st, checks := ready(); st != http.StatusServiceUnavailable || !strings.Contains(checks["store"], "resource_exhausted") || !strings.Contains(checks["store"], "disk is full") {
		t.Fatalf("/readyz on a full disk: %d %v", st, checks)
	}

	// Space back: ready again, the run finishes, submits are taken.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		st, checks := ready()
		if st == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after the space came back: %d %v", st, checks)
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.waitStatus(t, []string{id}, 3*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	evs := d.events(t, id)
	if v := d.run(t, id); v.Status != agent.RunFinished {
		t.Fatalf("run %s: %s after the disk was full\n%v\n%s", id, v.Status, evs, d.log())
	}
	checkRunEvents(t, evs, agent.KindRunFinished)
	id2 := d.submit(t, body)
	d.waitStatus(t, []string{id2}, 3*time.Minute, agent.RunFinished)
}
