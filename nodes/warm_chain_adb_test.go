package nodes

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// countingProxy forwards loopback TCP connections to target and counts
// them: each one is an adb service the client opened on the adb server.
type countingProxy struct {
	ln    net.Listener
	n     atomic.Int64
	wg    sync.WaitGroup
	close sync.Once
}

func startCountingProxy(t *testing.T, target string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.n.Add(1)
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(s, c); s.(*net.TCPConn).CloseWrite() }()
			go func() { defer p.wg.Done(); io.Copy(c, s); c.Close(); s.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

// TestWarmChainADBConnections runs the setup chain twice on a simulated
// emulator through the real adb server and counts, per node of the second
// (warm) chain, the connections the adb client opened to the server: every
// adb service is a TCP connection of its own, the chain's adb cost on both
// sides. Warm: EnsureDevice's boot probe (1: a Ready answer needs no
// get-state), ProvisionApp's
// one shell reading API level and installed state (1), LaunchOrAttach's
// foreground read (1), one shell per WaitIdle sample.
func TestWarmChainADBConnections(t *testing.T) {
	srv := simtest.StartADBServer(t)
	em, _ := simtest.Launch(t, srv, simtest.Profile(t, "default"))
	srv.WaitState(t, em.Serial(), "device", 10*time.Second)
	proxy := startCountingProxy(t, srv.Addr())
	dev := adbdevice.NewADBDevice(adb.New(proxy.ln.Addr().String()), em.Serial())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	drv := &fakeDriver{}
	mem := &MemorySessions{}
	cache := &MemoryVerifications{}
	var mu sync.Mutex
	var lines []string
	p := Ports{Device: dev, Driver: drv, Progress: func(l string) { mu.Lock(); lines = append(lines, l); mu.Unlock() }}
	type count struct {
		node string
		n    int64
	}
	chain := func() []count {
		t.Helper()
		var got []count
		step := func(node string, f func() error) {
			t.Helper()
			before := proxy.n.Load()
			if err := f(); err != nil {
				t.Fatalf("%s: %v", node, err)
			}
			got = append(got, count{node, proxy.n.Load() - before})
		}
		in := ensureIn("")
		in.DeviceConfiguration.DeviceName = em.Serial()
		var drc *DeviceRuntimeContext
		step(NodeEnsureDevice, func() error {
			out, err := EnsureDevice(ctx, in, p, mem)
			drc = out.DeviceRuntimeContext
			return err
		})
		step(NodeProvisionApp, func() error {
			desc := ApplicationUnderTestDescriptor{AndroidPackageID: demoPkg, APKStorageObjectReference: "fixture:demo-v1.apk",
				ExpectedBuildSignatureSHA256: provSignerA}
			out, err := ProvisionApp(ctx, ProvisionAppInput{RunID: "01JRUN", DeviceRuntimeContext: drc,
				ApplicationUnderTestDescriptor: desc}, p, ProvisionDeps{Artifacts: &provFetcher{}, Verifications: cache, TempDir: t.TempDir()})
			if o := out.ApplicationProvisioningOutcome; err == nil && (o == nil || o.SignatureValidationStatus != SignatureMatched || o.AppPresenceStatus != AppPresent) {
				t.Errorf("provisioning outcome %+v", o)
			}
			return err
		})
		step(NodeLaunchOrAttach, func() error {
			lin := launchIn(LaunchOrAttachMode, "")
			lin.DeviceRuntimeContext = drc
			_, err := LaunchOrAttach(ctx, lin, p)
			return err
		})
		mu.Lock()
		lines = nil
		mu.Unlock()
		step(NodeWaitIdle, func() error {
			win := idleIn(500, 10000)
			win.DeviceRuntimeContext = drc
			_, err := WaitIdle(ctx, win, p)
			return err
		})
		return got
	}
	chain() // cold: session created, signer pulled and cached, app launched
	warm := chain()
	// WaitIdle's sample count, from its "idle after … (N samples)" line.
	samples := -1
	mu.Lock()
	for _, l := range lines {
		if i := strings.Index(l, " samples)"); i > 0 {
			if j := strings.LastIndexByte(l[:i], '('); j >= 0 {
				samples, _ = strconv.Atoi(l[j+1 : i])
			}
		}
	}
	mu.Unlock()
	if samples < 2 {
		t.Fatalf("WaitIdle's sample count not found (%d) in %q", samples, lines)
	}
	want := map[string]int64{NodeEnsureDevice: 1, NodeProvisionApp: 1, NodeLaunchOrAttach: 1, NodeWaitIdle: int64(samples)}
	for _, c := range warm {
		if c.n != want[c.node] {
			t.Errorf("warm %s opened %d adb connections, want %d", c.node, c.n, want[c.node])
		}
	}
	t.Logf("warm chain adb connections per node: %v (WaitIdle %d samples)", warm, samples)
}
