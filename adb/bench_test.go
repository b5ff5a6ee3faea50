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
}
