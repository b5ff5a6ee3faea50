package e2e

import (
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	agentd "github.com/screengraph/screengraph-agent/cmd/internal/daemon"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// TestServeMemoryLimit: the real serve runs under agentd.DefaultMemoryLimit
// when its environment sets no GOMEMLIMIT, and under the operator's when it
// does, as Go's own collector reports it on /metrics
// (go_gc_gomemlimit_bytes).
func TestServeMemoryLimit(t *testing.T) {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		// The daemon inherits this process's environment.
		os.Unsetenv("GOMEMLIMIT")
		t.Cleanup(func() { os.Setenv("GOMEMLIMIT", v) })
	}
	srv := simtest.StartADBServer(t)
	for _, c := range []struct {
		env  []string
		want int64
	}{{nil, agentd.DefaultMemoryLimit}, {[]string{"GOMEMLIMIT=300MiB"}, 300 << 20}} {
		d := startDaemonEnv(t, srv, c.env)
		if got := memLimitMetric(t, d.URL()); got != c.want {
			t.Errorf("env %v: go_gc_gomemlimit_bytes %d, want %d", c.env, got, c.want)
		}
		d.stop()
	}
}

// memLimitMetric reads go_gc_gomemlimit_bytes from url's /metrics.
func memLimitMetric(t *testing.T, url string) int64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(m), "\n") {
		if v, ok := strings.CutPrefix(l, "go_gc_gomemlimit_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("go_gc_gomemlimit_bytes %q: %v", v, err)
			}
			return int64(f)
		}
	}
	t.Fatalf("/metrics has no go_gc_gomemlimit_bytes:\n%.2000s", m)
	return 0
}
