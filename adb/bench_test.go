package adb

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

// Side-by-side benchmarks against the adb CLI on the same isolated server and the
// same simulated device. Run: go test ./adb -run XXX -bench . -benchtime 20x

func BenchmarkShellRoundTrip(b *testing.B) {
	c := adbServer(b)
	e := startSim(b, c, android.Profile{Name: "bench-shell"})
	ctx := context.Background()
	b.Run("adapter", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r, err := c.Shell(ctx, e.Serial(), "echo hi")
			if err != nil || string(r.Stdout) != "hi\n" {
				b.Fatalf("%+v %v", r, err)
			}
		}
	})
	b.Run("adb-cli", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			out, err := adbCmd(srvPort, "-s", e.Serial(), "shell", "echo", "hi").Output()
			if err != nil || string(out) != "hi\n" {
				b.Fatalf("%q %v", out, err)
			}
		}
	})
	// ratio alternates the two in one loop, so both see the same machine load,
	// and reports how many times faster the adapter is (target >= 10).
	b.Run("ratio", func(b *testing.B) {
		var ours, cli time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if _, err := c.Shell(ctx, e.Serial(), "echo hi"); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := adbCmd(srvPort, "-s", e.Serial(), "shell", "echo", "hi").Run(); err != nil {
				b.Fatal(err)
			}
			ours, cli = ours+t1.Sub(t0), cli+time.Since(t1)
		}
		b.ReportMetric(float64(cli)/float64(ours), "x-faster-than-cli")
		b.ReportMetric(float64(ours.Microseconds())/float64(b.N), "adapter-µs/op")
		b.ReportMetric(float64(cli.Microseconds())/float64(b.N), "cli-µs/op")
	})
}

func BenchmarkPush(b *testing.B) {
	c := adbServer(b)
	e := startSim(b, c, android.Profile{Name: "bench-push"})
	data := make([]byte, 20<<20)
	if _, err := rand.Read(data); err != nil {
		b.Fatal(err)
	}
	local := filepath.Join(b.TempDir(), "push.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		b.Fatal(err)
	}
	b.Run("adapter", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := c.PushFile(ctx, e.Serial(), local, "/data/local/tmp/push-"+strconv.Itoa(i%2)+".bin", nil)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("adb-cli", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			out, err := adbCmd(srvPort, "-s", e.Serial(), "push", local, "/data/local/tmp/push-"+strconv.Itoa(i%2)+".bin").CombinedOutput()
			if err != nil {
				b.Fatalf("%s %v", out, err)
			}
		}
	})
	// ratio alternates the two pushes and reports the adapter's throughput as
	// a multiple of `adb push` (target >= 0.9).
	b.Run("ratio", func(b *testing.B) {
		var ours, cli time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if err := c.PushFile(context.Background(), e.Serial(), local, "/data/local/tmp/push-r.bin", nil); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if out, err := adbCmd(srvPort, "-s", e.Serial(), "push", local, "/data/local/tmp/push-r.bin").CombinedOutput(); err != nil {
				b.Fatalf("%s %v", out, err)
			}
			ours, cli = ours+t1.Sub(t0), cli+time.Since(t1)
		}
		b.ReportMetric(float64(cli)/float64(ours), "x-throughput-of-cli")
	})
}
