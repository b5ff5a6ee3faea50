package natsbus_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
)

// BenchmarkInProcessVsTCPPublish: the daemon's own connection to its
// embedded server, in-process (OpenBus) against loopback TCP, side by side
// in one run: JetStream publishes awaited one by one (the relay's worst
// case), each arm's wall time and the process's CPU (client and server are
// both in it) per publish.
func BenchmarkInProcessVsTCPPublish(b *testing.B) {
	srv, url, err := natsbus.StartEmbeddedWith(natsbus.EmbeddedOptions{Dir: filepath.Join(b.TempDir(), "nats")})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	arm := func(opts ...nats.Option) (jetstream.JetStream, *nats.Conn) {
		nc, err := natsbus.Connect(url, opts...)
		if err != nil {
			b.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		return js, nc
	}
	inJS, inNC := arm(nats.InProcessServer(srv))
	defer inNC.Close()
	tcpJS, tcpNC := arm()
	defer tcpNC.Close()
	if _, err := inJS.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"}}); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 600) // about an agent.node.finished event
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var wall, used [2]time.Duration
	n := 0
	for b.Loop() {
		for i, js := range []jetstream.JetStream{inJS, tcpJS} {
			t0, c0 := time.Now(), cpu()
			for range 50 {
				if _, err := js.Publish(ctx, "bench.x", payload); err != nil {
					b.Fatal(err)
				}
			}
			wall[i] += time.Since(t0)
			used[i] += cpu() - c0
		}
		n += 50
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	b.ReportMetric(per(wall[0]), "inprocess-us/publish")
	b.ReportMetric(per(wall[1]), "tcp-us/publish")
	b.ReportMetric(per(used[0]), "inprocess-cpu-us/publish")
	b.ReportMetric(per(used[1]), "tcp-cpu-us/publish")
	b.ReportMetric(float64(used[1])/float64(used[0]), "x-cpu-tcp/inprocess")
}
