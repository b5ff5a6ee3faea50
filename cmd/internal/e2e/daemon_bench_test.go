package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/nodes"
)

// daemonBenchDevices is the fleet size for BenchmarkDaemon32: 32
// simulated emulators (in the test process) behind one adb server, one
// daemon, one local Appium server holding one uiautomator2 session per device.
const daemonBenchDevices = 32

// daemonBenchSingleRuns is how many sequential chains on one device make the
// single-chain baseline of one round.
const daemonBenchSingleRuns = 8

// appiumAloneSamples is how many page sources an Appium-alone chain of
// BenchmarkDaemon32 takes: WaitIdle's least (a sample, then one ConfirmGap
// later, the confirming one).
const appiumAloneSamples = 2

// appiumAloneGap spaces those page sources: WaitIdle's ConfirmGap.
const appiumAloneGap = nodes.ConfirmGap

// arrival is one event as an outside NATS client received it.
type arrival struct {
	runID string
	seq   int64
	kind  string
	ts    time.Time // the event's ts (set at commit, ms resolution)
	at    time.Time // when the client received it
	node  string
	durMs int64
}

// natsClock is an outside NATS client (its own connection to the daemon's
// --nats-listen port) consuming AGENT_EVENTS (agent.events.>) with an ordered
// consumer and stamping each message with its arrival time.
type natsClock struct {
	mu    sync.Mutex
	byRun map[string][]arrival
}

// watchNATS starts the outside NATS client in a process of its own (this
// test binary, see TestMain): the benchmark's own process
// hosts the simulators, whose heap (over 1 GB with 32 devices' APKs) and CPU
// would delay a client's callbacks here and count into the latencies. The
// child stamps each message on arrival and prints it; this side collects.
func watchNATS(b testing.TB, url string) *natsClock {
	b.Helper()
	c := &natsClock{byRun: map[string][]arrival{}}
	cmd := exec.Command(os.Args[0]) // TestMain makes it the client
	cmd.Env = append(os.Environ(), "SCREENGRAPH_NATS_CLOCK_URL="+url)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			at, body, ok := strings.Cut(sc.Text(), " ")
			ns, err := strconv.ParseInt(at, 10, 64)
			if !ok || err != nil {
				continue // the test framework's own lines
			}
			c.add(time.Unix(0, ns), []byte(body))
		}
	}()
	return c
}

// add records one envelope that arrived at at.
func (c *natsClock) add(at time.Time, body []byte) {
	var e agent.Event
	if err := json.Unmarshal(body, &e); err != nil {
		return
	}
	ts, _ := time.Parse(agent.TimestampLayout, e.TS)
	a := arrival{runID: e.RunID, seq: e.Sequence, kind: e.Kind, ts: ts, at: at}
	if e.Kind == agent.KindNodeFinished {
		var p nodePayload
		if json.Unmarshal(e.Payload, &p) == nil {
			a.node, a.durMs = p.NodeName, p.DurationMillis
		}
	}
	c.mu.Lock()
	c.byRun[e.RunID] = append(c.byRun[e.RunID], a)
	c.mu.Unlock()
}

// TestMain: with SCREENGRAPH_NATS_CLOCK_URL set, this test binary is
// BenchmarkDaemon32's outside NATS client (watchNATS), not a test run: it
// prints one line per message, "<arrival, Unix ns> <envelope JSON>", until
// it is killed.
func TestMain(m *testing.M) {
	if url := os.Getenv("SCREENGRAPH_NATS_CLOCK_URL"); url != "" {
		fmt.Fprintln(os.Stderr, "NATS clock:", runNATSClock(url))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// runNATSClock consumes AGENT_EVENTS and stamps each message on arrival; it
// returns only on an error.
func runNATSClock(url string) error {
	_, cons, err := eventConsumer(url)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	if _, err := cons.Consume(func(m jetstream.Msg) {
		at := time.Now().UnixNano()
		var body bytes.Buffer
		if json.Compact(&body, m.Data()) != nil {
			return
		}
		mu.Lock()
		fmt.Fprintf(os.Stdout, "%d %s\n", at, body.Bytes())
		mu.Unlock()
	}); err != nil {
		return err
	}
	select {}
}

func isTerminal(kind string) bool {
	return kind == agent.KindRunFinished || kind == agent.KindRunFailed || kind == agent.KindRunCanceled
}

// wait blocks until every run's terminal event has arrived on NATS.
func (c *natsClock) wait(b testing.TB, d *daemon, ids []string, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := 0
		c.mu.Lock()
		for _, id := range ids {
			evs := c.byRun[id]
			if len(evs) == 0 || !isTerminal(evs[len(evs)-1].kind) {
				left++
			}
		}
		c.mu.Unlock()
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d runs without a terminal event on NATS after %v\n%s", left, len(ids), timeout, d.log())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *natsClock) events(id string) []arrival {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]arrival(nil), c.byRun[id]...)
}

// postRun submits body and returns the run id and when the POST returned
// (safe off the test goroutine).
func postRun(d *daemon, body map[string]any) (string, time.Time, error) {
	raw, _ := json.Marshal(body)
	resp, err := http.Post(d.URL()+"/v1/runs", "application/json", bytes.NewReader(raw))
	if err != nil {
		return "", time.Time{}, err
	}
	defer resp.Body.Close()
	var v struct {
		RunID string `json:"runId"`
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
	done := time.Now()
	if resp.StatusCode != http.StatusAccepted || err != nil || v.RunID == "" {
		return "", done, fmt.Errorf("POST /v1/runs: %d %v %+v", resp.StatusCode, err, v)
	}
	return v.RunID, done, nil
}

// failure is a FAILED run's error (errorId, code, message) from its detail.
func failure(b testing.TB, d *daemon, id string) string {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	d.call(b, "GET", "/v1/runs/"+id, nil, &v)
	s := string(v.Error)
	if len(s) > 600 {
		s = s[:600]
	}
	return s
}

// benchSample gathers one phase's figures.
type benchSample struct {
	took        []float64 // run durations (run.started -> terminal ts), ms
	submitFirst []float64 // POST returned -> first event on NATS, ms
	submitTS    []float64 // POST returned -> first event's ts (its commit), ms
	commitNATS  []float64 // event arrival on NATS - its commit (commitTS), ms
	tsNATS      []float64 // event arrival on NATS - the event's own ts, ms
	nodeMs      map[string][]float64
	statuses    map[string]int
}

func newSample() *benchSample {
	return &benchSample{nodeMs: map[string][]float64{}, statuses: map[string]int{}}
}

func (s *benchSample) add(b testing.TB, c *natsClock, id string, submitted time.Time) {
	evs := c.events(id)
	if len(evs) == 0 {
		b.Fatalf("run %s: no events on NATS", id)
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].seq < evs[j].seq })
	last := evs[len(evs)-1]
	s.statuses[last.kind]++
	s.took = append(s.took, float64(last.ts.Sub(evs[0].ts).Milliseconds()))
	s.submitFirst = append(s.submitFirst, msf(evs[0].at.Sub(submitted)))
	s.submitTS = append(s.submitTS, msf(evs[0].ts.Sub(submitted)))
	for i, a := range evs {
		s.commitNATS = append(s.commitNATS, msf(a.at.Sub(commitTS(evs, i))))
		s.tsNATS = append(s.tsNATS, msf(a.at.Sub(a.ts)))
		if a.node != "" {
			s.nodeMs[a.node] = append(s.nodeMs[a.node], float64(a.durMs))
		}
	}
}

// commitTS is when event i of evs (one run's, in sequence order) was
// committed. The engine commits a step's agent.node.started and token_delta
// events together with its agent.node.finished, whose ts is taken right
// before that commit; every other event commits at its own ts. So an event's
// ts alone would count the node's whole duration into node.started's
// delivery latency.
func commitTS(evs []arrival, i int) time.Time {
	for j := i; j < len(evs); j++ {
		if k := evs[j].kind; k != agent.KindNodeStarted && k != agent.KindNodeTokenDelta {
			return evs[j].ts
		}
	}
	return evs[i].ts
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct is the nearest-rank percentile p (0-100) of xs.
func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return s[i]
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}

// procStatus reads a field (kB) of /proc/<pid>/status.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return -1
}

// procCPU is utime+stime of pid (and its waited-for children) in seconds.
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return math.NaN()
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// Fields after the command: state is f[0]; utime f[11], stime f[12].
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100 // USER_HZ
}

// procChildCPU is the user+system CPU of pid's waited-for children
// (cutime+cstime), in seconds: for this process, the simulators' ffmpeg
// encoders.
func procChildCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return math.NaN()
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// cutime f[13], cstime f[14].
	u, _ := strconv.ParseFloat(f[13], 64)
	st, _ := strconv.ParseFloat(f[14], 64)
	return (u + st) / 100 // USER_HZ
}

// adbServerPid is the pid of the adb server listening on port (Debian's adb
// forks it off as "adb -L tcp:PORT fork-server server"), 0 if not found.
func adbServerPid(port int) int {
	dirs, _ := os.ReadDir("/proc")
	want := "tcp:" + strconv.Itoa(port)
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if slices.Contains(args, "fork-server") && slices.ContainsFunc(args, func(a string) bool { return strings.HasSuffix(a, want) }) {
			return pid
		}
	}
	return 0
}

// appiumPid is the pid of the data dir's local Appium server (0 if none).
func appiumPid(dataDir string) int {
	b, err := os.ReadFile(appium.LocalStateFile(dataDir))
	if err != nil {
		return 0
	}
	var st appium.LocalState
	json.Unmarshal(b, &st)
	return st.PID
}

// BenchmarkDaemon32: the daemon benchmark, side by side in one run.
// One adb server, daemonBenchDevices simulated emulators, one `serve` (the
// real binary, at its default log level), an outside NATS client on its
// --nats-listen port. Warm-up: one cold chain per device, all at once
// (install + first session; not in the figures). Then each of b.N rounds
// (use -benchtime 1x): (a) daemonBenchSingleRuns sequential chains on one
// device, (b) one chain per device submitted at once. Every run is the setup
// chain with the demo APK, INSTALL_IF_MISSING + LAUNCH_OR_ATTACH, policy
// defaults. Reported: run duration (agent.run.started ts -> terminal ts) p50
// and p99 of both and p99(32)/p99(single); submit-to-first-event
// (POST returned -> first event of the run on NATS) and commit-to-NATS (arrival
// on NATS - event ts) p50/p99 (target p99 <= 50 ms at 32 devices); the
// daemon's peak RSS, VmHWM (target <= 64 MB), with where its resident memory
// is at the end (daemonMemory). The local Appium server (a
// Node.js process of its own) is not the daemon; its peak RSS and the CPU
// seconds of each process in the concurrent phase are logged beside.
//
// Appium alone, after the measured rounds: the Appium requests a warm chain
// makes, with no daemon in between, on the sessions the daemon's FINISHED
// runs left (EnsureDevice's driverSessionId): an "Appium-alone chain" is
// appium.Client.Probe (GET /session/{id}/appium/capabilities, GET
// /session/{id}/window/rect; EnsureDevice's reuse probe) then
// appiumAloneSamples page sources (GET /session/{id}/source) nodes.ConfirmGap
// apart (WaitIdle's floor; its typical sample count in the run is printed
// beside), through one appium.Client like the daemon's. Each of b.N rounds:
// daemonBenchSingleRuns sequential chains on one device's session, then one
// per device started at once. Reported: their wall time p50/p99,
// p99(32)/p99(single), the daemon's run p99 over theirs (target <= 1.4 at 32), and the Appium server's CPU seconds in the concurrent
// part: the floor the Appium server (one Node.js event loop for every
// uiautomator2 session) and the host's CPU set under the daemon's figures.
//
// The cost table, printed with the rest: CPU seconds per 32-chain
// wave of the daemon and of Appium (process rusage from /proc/PID/stat over
// the concurrent rounds, divided by b.N) and their ratio (target <= 0.5), the
// daemon's CPU ms per chain; the warm chain's mean run duration (single)
// against Appium alone doing the setup (appiumNewSessionRuns new sessions
// that launch the app, then DELETE, on its own Appium server and emulator;
// target >= 50x); the top 10 functions (flat) of the daemon's CPU profile
// over the measured rounds.
func BenchmarkDaemon32(b *testing.B) {
	n := daemonBenchDevices
	srv := simtest.StartADBServer(b)
	t0 := time.Now()
	var serials []string
	for range n {
		emu, _ := launchDefault(b, srv)
		serials = append(serials, emu.Serial())
	}
	b.Logf("%d simulated emulators up in %v", n, time.Since(t0).Round(time.Millisecond))
	// The harness starts serve with --log-level debug; the benchmark measures
	// the default level (kong takes the later value).
	args := []string{"--log-level", "info"}
	// A CPU profile of the daemon over the measured rounds (seconds from
	// SCREENGRAPH_BENCH_PPROF_SECONDS, default 10, from the first measured
	// round on: the rounds take about 3 s on an idle 2-core machine; the
	// daemon is idle after them until the profile ends, nothing else is asked
	// of it), its top 10 printed with the table. It is written to
	// SCREENGRAPH_BENCH_PPROF when set (for `go tool pprof`), else to a
	// temporary file.
	profOut := os.Getenv("SCREENGRAPH_BENCH_PPROF")
	if profOut == "" {
		profOut = filepath.Join(b.TempDir(), "daemon.pprof")
	}
	pprofAddr := "127.0.0.1:" + strconv.Itoa(simtest.FreePort(b))
	args = append(args, "--pprof-listen", pprofAddr)
	// SCREENGRAPH_BENCH_DAEMON_ENV: blank-separated NAME=value pairs for the
	// daemon's environment alone (GOGC, GOMEMLIMIT: a setting measured on
	// the daemon, not on this process, which hosts the simulators).
	d := startDaemonEnv(b, srv, strings.Fields(os.Getenv("SCREENGRAPH_BENCH_DAEMON_ENV")), args...)
	pid := d.cmd.Process.Pid
	clock := watchNATS(b, d.NATSURL())
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(b, apk)
	body := func(serial string) map[string]any {
		return runBody(serial, "file://"+apk, sha, "INSTALL_IF_MISSING", "LAUNCH_OR_ATTACH", nil)
	}

	// submitAll posts one run per serial at once (one goroutine each).
	submitAll := func(ss []string) ([]string, []time.Time) {
		ids := make([]string, len(ss))
		at := make([]time.Time, len(ss))
		errs := make([]error, len(ss))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, s := range ss {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ids[i], at[i], errs[i] = postRun(d, body(s))
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		return ids, at
	}
	finished := func(ids []string) []string {
		var bad []string
		for _, id := range ids {
			if v := d.run(b, id); v.Status != agent.RunFinished {
				bad = append(bad, id+" "+v.Serial+" "+string(v.Status))
			}
		}
		return bad
	}

	// Warm-up: one cold chain per device, all at once.
	t0 = time.Now()
	warm, _ := submitAll(serials)
	clock.wait(b, d, warm, 10*time.Minute)
	coldWall := time.Since(t0)
	// A cold run that failed (32 first sessions at once on one local Appium)
	// gets one more cold run, alone; the failures are reported.
	if bad := finished(warm); len(bad) > 0 {
		b.Logf("warm-up: %d of %d cold runs at once not FINISHED:", len(bad), n)
		for _, id := range bad {
			b.Logf("  %s: %s", id, failure(b, d, strings.Fields(id)[0]))
		}
		for i, id := range warm {
			if v := d.run(b, id); v.Status != agent.RunFinished {
				rid, _, err := postRun(d, body(v.Serial))
				if err != nil {
					b.Fatal(err)
				}
				clock.wait(b, d, []string{rid}, 5*time.Minute)
				if v := d.run(b, rid); v.Status != agent.RunFinished {
					b.Fatalf("warm-up retry on %s: %s: %s", v.Serial, v.Status, failure(b, d, rid))
				}
				warm[i] = rid
			}
		}
	}
	cold := newSample()
	for _, id := range warm {
		cold.add(b, clock, id, time.Time{})
	}
	b.Logf("warm-up: %d cold chains at once in %v (run p50 %.0f ms, max %.0f ms)", n, coldWall.Round(time.Millisecond), pct(cold.took, 50), pct(cold.took, 100))

	single, conc := newSample(), newSample()
	var concWall time.Duration
	failedConc := 0
	var cpuDaemon, cpuAppium, cpuTest, cpuADB, cpuEnc float64
	adbPid := adbServerPid(srv.Port)
	var lastConc []string // the last concurrent round's runs
	var concIDs [][]string
	apid := appiumPid(d.dataDir)
	b.ResetTimer()
	profDone := make(chan struct{})
	{
		secs := os.Getenv("SCREENGRAPH_BENCH_PPROF_SECONDS")
		if secs == "" {
			secs = "10"
		}
		go func() {
			defer close(profDone)
			resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/profile?seconds=" + secs)
			if err != nil {
				b.Logf("pprof: %v", err)
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(profOut)
			if err != nil {
				b.Logf("pprof: %v", err)
				return
			}
			io.Copy(f, resp.Body)
			f.Close()
		}()
	}
	for range b.N {
		// (a) single: sequential chains on one device, nothing else running.
		for range daemonBenchSingleRuns {
			id, at, err := postRun(d, body(serials[0]))
			if err != nil {
				b.Fatal(err)
			}
			clock.wait(b, d, []string{id}, time.Minute)
			single.add(b, clock, id, at)
		}
		// (b) concurrent: one chain per device, submitted at once.
		cd, ca, ct, cadb, cenc := procCPU(pid), procCPU(apid), procCPU(os.Getpid()), procCPU(adbPid), procChildCPU(os.Getpid())
		t0 = time.Now()
		ids, ats := submitAll(serials)
		clock.wait(b, d, ids, 5*time.Minute)
		concWall += time.Since(t0)
		cpuADB += procCPU(adbPid) - cadb
		cpuDaemon += procCPU(pid) - cd
		cpuAppium += procCPU(apid) - ca
		cpuTest += procCPU(os.Getpid()) - ct
		cpuEnc += procChildCPU(os.Getpid()) - cenc
		lastConc = ids
		concIDs = append(concIDs, ids)
		for i, id := range ids {
			conc.add(b, clock, id, ats[i])
		}
	}
	b.StopTimer()
	// The runs' details are read (HTTP GETs, the daemon's CPU) only once the
	// profile is taken, so it holds the chains' work alone.
	<-profDone
	// A run that fails under this load is a figure of the benchmark, not a
	// test failure (the tests assert correctness): counted and its error
	// logged, so a 2-core CI machine's bad moment does not fail make bench.
	for _, ids := range concIDs {
		if bad := finished(ids); len(bad) > 0 {
			failedConc += len(bad)
			b.Logf("concurrent round: %d runs not FINISHED:", len(bad))
			for _, id := range bad {
				b.Logf("  %s: %s", id, failure(b, d, strings.Fields(id)[0]))
			}
		}
	}
	hwm := float64(procStatus(pid, "VmHWM")) / 1024
	appiumHWM := float64(procStatus(apid, "VmHWM")) / 1024
	rss := float64(procStatus(pid, "VmRSS")) / 1024
	mem := daemonMemory(pid, pprofAddr)
	saveProfile(pprofAddr, "heap", profOut+".heap") // for go tool pprof -sample_index=inuse_space/alloc_space
	al := warmAppiumAlone(b, d, serials, append(append([]string(nil), warm...), lastConc...), apid)
	top, topErr := pprofTop(profOut, 10)
	if topErr != nil {
		top = "profile: " + topErr.Error() + "\n"
	}
	rounds := float64(b.N)
	cpuChain := cpuDaemon / (rounds * float64(n)) * 1000 // ms of CPU per chain

	b.ReportMetric(pct(single.took, 50), "p50-ms-single")
	b.ReportMetric(pct(single.took, 99), "p99-ms-single")
	b.ReportMetric(pct(conc.took, 50), "p50-ms-32")
	b.ReportMetric(pct(conc.took, 99), "p99-ms-32")
	b.ReportMetric(pct(conc.took, 99)/pct(single.took, 99), "x-p99-ratio")
	b.ReportMetric(hwm, "peak-RSS-MB")
	b.ReportMetric(float64(failedConc), "failed-runs-32")
	b.ReportMetric(pct(conc.submitFirst, 50), "submit-first-event-p50-ms")
	b.ReportMetric(pct(conc.submitFirst, 99), "submit-first-event-p99-ms")
	b.ReportMetric(pct(conc.commitNATS, 50), "commit-nats-p50-ms")
	b.ReportMetric(pct(conc.commitNATS, 99), "commit-nats-p99-ms")
	b.ReportMetric(pct(al.single, 50), "appium-alone-p50-ms-single")
	b.ReportMetric(pct(al.single, 99), "appium-alone-p99-ms-single")
	b.ReportMetric(pct(al.conc, 50), "appium-alone-p50-ms-32")
	b.ReportMetric(pct(al.conc, 99), "appium-alone-p99-ms-32")
	b.ReportMetric(pct(al.conc, 99)/pct(al.single, 99), "appium-alone-p99-ratio")
	b.ReportMetric(pct(conc.took, 99)/pct(al.conc, 99), "x-p99-32-vs-appium-alone")
	b.ReportMetric(al.cpuAppium, "appium-alone-appium-cpu-s")
	b.ReportMetric(cpuDaemon/rounds, "daemon-cpu-s-per-wave")
	b.ReportMetric(cpuAppium/rounds, "appium-cpu-s-per-wave")
	b.ReportMetric(cpuDaemon/cpuAppium, "x-cpu-daemon-appium")
	b.ReportMetric(cpuChain, "daemon-cpu-ms-per-chain")
	b.ReportMetric(cpuEnc/rounds, "sim-encoder-cpu-s-per-wave")

	var tab strings.Builder
	fmt.Fprintf(&tab, "\n%-34s %12s %12s %8s\n", "metric", "single", fmt.Sprintf("%d at once", n), "target")
	row := func(name string, s, c float64, target string) {
		fmt.Fprintf(&tab, "%-34s %12.1f %12.1f %8s\n", name, s, c, target)
	}
	row("run duration p50 (ms)", pct(single.took, 50), pct(conc.took, 50), "")
	row("run duration p99 (ms)", pct(single.took, 99), pct(conc.took, 99), "")
	fmt.Fprintf(&tab, "%-34s %12s %12.2f %8s\n", "p99 ratio 32/single", "", pct(conc.took, 99)/pct(single.took, 99), "")
	row("Appium alone: chain p50 (ms)", pct(al.single, 50), pct(al.conc, 50), "")
	row("Appium alone: chain p99 (ms)", pct(al.single, 99), pct(al.conc, 99), "")
	fmt.Fprintf(&tab, "%-34s %12s %12.2f %8s\n", "Appium alone p99 ratio 32/single", "", pct(al.conc, 99)/pct(al.single, 99), "")
	fmt.Fprintf(&tab, "%-34s %12.2f %12.2f %8s\n", "run p99 / Appium alone p99", pct(single.took, 99)/pct(al.single, 99), pct(conc.took, 99)/pct(al.conc, 99), "<= 1.4")
	row("submit -> first event p50 (ms)", pct(single.submitFirst, 50), pct(conc.submitFirst, 50), "")
	row("submit -> first event p99 (ms)", pct(single.submitFirst, 99), pct(conc.submitFirst, 99), "")
	row("  of which submit -> commit p50", pct(single.submitTS, 50), pct(conc.submitTS, 50), "")
	row("  of which submit -> commit p99", pct(single.submitTS, 99), pct(conc.submitTS, 99), "")
	row("commit -> NATS p50 (ms)", pct(single.commitNATS, 50), pct(conc.commitNATS, 50), "")
	row("commit -> NATS p99 (ms)", pct(single.commitNATS, 99), pct(conc.commitNATS, 99), "<= 50")
	fmt.Fprintf(&tab, "%-34s %12s %12.2f %8s\n", "CPU-s per 32-chain wave: daemon", "", cpuDaemon/rounds, "")
	fmt.Fprintf(&tab, "%-34s %12s %12.2f %8s\n", "CPU-s per 32-chain wave: Appium", "", cpuAppium/rounds, "")
	fmt.Fprintf(&tab, "%-34s %12s %12.2f %8s\n", "  daemon / Appium CPU", "", cpuDaemon/cpuAppium, "<= 0.5")
	fmt.Fprintf(&tab, "%-34s %12s %12.1f %8s\n", "  daemon CPU per chain (ms)", "", cpuChain, "")
	fmt.Fprintf(&tab, "%-34s %12s %12.1f %8s\n", "daemon peak RSS, VmHWM (MB)", "", hwm, "<= 64")
	row("warm chain mean (ms)", mean(single.took), mean(conc.took), "")
	row("  (event ts -> NATS p99, ts < commit)", pct(single.tsNATS, 99), pct(conc.tsNATS, 99), "")
	var nodes []string
	for k := range conc.nodeMs {
		nodes = append(nodes, k)
	}
	sort.Strings(nodes)
	for _, k := range nodes {
		row(k+" mean (ms)", mean(single.nodeMs[k]), mean(conc.nodeMs[k]), "")
	}
	fmt.Fprintf(&tab, "runs: single %d %v, concurrent %d %v; events on NATS: single %d, concurrent %d\n",
		len(single.took), single.statuses, len(conc.took), conc.statuses, len(single.commitNATS), len(conc.commitNATS))
	fmt.Fprintf(&tab, "concurrent rounds wall %v total; CPU s in them: daemon %.2f, Appium %.2f, adb server %.2f, test process (sims) %.2f, the sims' video encoders (ffmpeg) %.2f\n",
		concWall.Round(time.Millisecond), cpuDaemon, cpuAppium, cpuADB, cpuTest, cpuEnc)
	fmt.Fprintf(&tab, "Appium alone: probe + %d page sources %v apart per chain (WaitIdle samples in the last concurrent round: %s)\n",
		appiumAloneSamples, appiumAloneGap, al.samples)
	fmt.Fprintf(&tab, "  chains single %d, concurrent %d, failed %d; concurrent wall %v total; CPU s in it: Appium %.2f, test process %.2f\n",
		len(al.single), len(al.conc), al.failed, al.concWall.Round(time.Millisecond), al.cpuAppium, al.cpuTest)
	fmt.Fprintf(&tab, "daemon peak RSS (VmHWM) %.1f MB (target <= 64), VmRSS now %.1f MB (%s); local Appium VmHWM %.1f MB (not the daemon)\n",
		hwm, rss, mem, appiumHWM)
	fmt.Fprintf(&tab, "daemon CPU profile, measured rounds (%s), top 10 by flat time:\n%s", profOut, top)
	b.Log(tab.String())
	// go test cuts a benchmark's log to 10 lines: the whole table on stderr.
	fmt.Fprintln(os.Stderr, "BenchmarkDaemon32"+tab.String())

	// Appium alone doing the setup (a new session that launches the app, then
	// DELETE) on one more emulator and an Appium server of its own, while the
	// daemon is idle: the "warm chain vs Appium alone" row, printed
	// after the table so that an Appium server slow to start on a loaded
	// machine loses only this row.
	emu, _ := launchDefault(b, srv)
	aa := newAppiumAlone(b, srv.Port, emu.Serial())
	var newSession []float64
	for range appiumNewSessionRuns {
		t0 := time.Now()
		if err := aa.once(); err != nil {
			b.Fatal(err)
		}
		newSession = append(newSession, msf(time.Since(t0)))
	}
	b.ReportMetric(mean(newSession)/mean(single.took), "x-warm-vs-appium-alone")
	fmt.Fprintf(os.Stderr, "BenchmarkDaemon32: Appium alone new session mean %.1f ms (%d x new uiautomator2 session launching the app, DELETE, on its own Appium server and emulator); Appium alone / warm chain %.1fx (target >= 50)\n",
		mean(newSession), len(newSession), mean(newSession)/mean(single.took))
}

// saveProfile writes the daemon's runtime profile name (heap, allocs,
// goroutine) from its pprof listener to path; a failure only loses the file.
func saveProfile(pprofAddr, name, path string) {
	resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/" + name)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if f, err := os.Create(path); err == nil {
		io.Copy(f, resp.Body)
		f.Close()
	}
}

// daemonMemory says where the daemon's resident memory is at the end of
// the measured rounds: resident anonymous and file-backed pages
// (/proc/PID/status RssAnon, RssFile: the binary's own text and data are
// file-backed) and the Go runtime's view (runtime.MemStats through the
// pprof listener's heap?debug=1: heap in use, stacks, what the runtime holds
// from the OS, and what it gave back).
func daemonMemory(pid int, pprofAddr string) string {
	out := fmt.Sprintf("RssAnon %.1f MB, RssFile %.1f MB", float64(procStatus(pid, "RssAnon"))/1024, float64(procStatus(pid, "RssFile"))/1024)
	resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/heap?debug=1")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	stats := map[string]float64{}
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(l, "# "), " = "); ok {
			if n, err := strconv.ParseFloat(strings.Fields(v + " x")[0], 64); err == nil {
				stats[k] = n / (1 << 20)
			}
		}
	}
	return out + fmt.Sprintf("; Go: HeapInuse %.1f, HeapIdle %.1f (released %.1f), Stack %.1f, Sys %.1f MB, NumGC %.0f",
		stats["HeapInuse"], stats["HeapIdle"], stats["HeapReleased"], stats["Stack"], stats["Sys"], stats["NumGC"]*(1<<20))
}

// appiumNewSessionRuns is how many Appium-alone setups (new session that
// launches the app, then DELETE; ~1.7 s each) BenchmarkDaemon32 times.
const appiumNewSessionRuns = 4

// pprofTop is `go tool pprof -top` of the CPU profile at path, cut to its
// header and first n functions (flat time).
func pprofTop(path string, n int) (string, error) {
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount="+strconv.Itoa(n), path).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %v: %s", err, out)
	}
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		// Drop pprof's own lines (File:, Type:, Time:) but the durations.
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") || strings.HasPrefix(l, "Time:") || l == "" {
			continue
		}
		keep = append(keep, "  "+l)
	}
	return strings.Join(keep, "\n") + "\n", nil
}

// aloneSample is the Appium-alone phase of BenchmarkDaemon32.
type aloneSample struct {
	single, conc       []float64 // chain wall times, ms
	failed             int
	concWall           time.Duration
	cpuAppium, cpuTest float64 // CPU s in the concurrent part
	samples            string  // WaitIdle's sample counts (min/median/max) in the runs it read
}

// warmAppiumAlone runs BenchmarkDaemon32's Appium-alone phase against the
// daemon's local Appium server (the daemon is idle): the session of each
// serial is EnsureDevice's driverSessionId in the latest FINISHED run of it
// among runs.
func warmAppiumAlone(b *testing.B, d *daemon, serials, runs []string, apid int) aloneSample {
	b.Helper()
	var st appium.LocalState
	if raw, err := os.ReadFile(appium.LocalStateFile(d.dataDir)); err != nil || json.Unmarshal(raw, &st) != nil || st.URL == "" {
		b.Fatalf("local Appium state %s: %v", appium.LocalStateFile(d.dataDir), err)
	}
	cl, err := appium.New(st.URL, appium.Options{}) // as the daemon's (host.go)
	if err != nil {
		b.Fatal(err)
	}
	sess := map[string]string{}
	var counts []float64
	for _, id := range runs {
		v := d.run(b, id)
		if v.Status != agent.RunFinished {
			continue
		}
		var ed nodes.EnsureDeviceOutput
		if json.Unmarshal(v.Outputs[nodes.NodeEnsureDevice], &ed) == nil && ed.DeviceRuntimeContext != nil && ed.DeviceRuntimeContext.DriverSessionID != "" {
			sess[v.Serial] = ed.DeviceRuntimeContext.DriverSessionID
		}
	}
	// WaitIdle's sample counts, from its "idle after … (N samples)" line, in
	// the last len(serials) runs (the last concurrent round).
	for _, id := range runs[max(0, len(runs)-len(serials)):] {
		for _, l := range deltaLines(b, d.events(b, id), nodes.NodeWaitIdle) {
			if i := strings.Index(l, " samples)"); i > 0 {
				if j := strings.LastIndexByte(l[:i], '('); j >= 0 {
					if k, err := strconv.Atoi(l[j+1 : i]); err == nil {
						counts = append(counts, float64(k))
					}
				}
			}
		}
	}
	var ids []string
	for _, s := range serials {
		if sess[s] == "" {
			b.Fatalf("Appium alone: no FINISHED run with a session on %s", s)
		}
		ids = append(ids, sess[s])
	}
	a := aloneSample{samples: "?"}
	if len(counts) > 0 {
		a.samples = fmt.Sprintf("%.0f/%.0f/%.0f min/median/max of %d runs", pct(counts, 0), pct(counts, 50), pct(counts, 100), len(counts))
	}
	ctx := context.Background()
	// chain is one warm chain's Appium requests: EnsureDevice's probe, then
	// WaitIdle's page sources ConfirmGap apart.
	chain := func(id string) (float64, error) {
		start := time.Now()
		h, det, err := cl.Probe(ctx, id)
		if err == nil && h == device.Unhealthy {
			err = fmt.Errorf("probe UNHEALTHY: %v", det["reason"])
		}
		for i := 0; err == nil && i < appiumAloneSamples; i++ {
			if i > 0 {
				time.Sleep(appiumAloneGap)
			}
			_, err = cl.PageSource(ctx, id)
		}
		return msf(time.Since(start)), err
	}
	for range b.N {
		for range daemonBenchSingleRuns {
			ms, err := chain(ids[0])
			if err != nil {
				a.failed++
				b.Logf("Appium alone, single on %s: %v", serials[0], err)
				continue
			}
			a.single = append(a.single, ms)
		}
		took := make([]float64, len(ids))
		errs := make([]error, len(ids))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				took[i], errs[i] = chain(id)
			}()
		}
		ca, ct := procCPU(apid), procCPU(os.Getpid())
		t0 := time.Now()
		close(start)
		wg.Wait()
		a.concWall += time.Since(t0)
		a.cpuAppium += procCPU(apid) - ca
		a.cpuTest += procCPU(os.Getpid()) - ct
		for i, err := range errs {
			if err != nil {
				a.failed++
				b.Logf("Appium alone, concurrent on %s: %v", serials[i], err)
				continue
			}
			a.conc = append(a.conc, took[i])
		}
	}
	return a
}
