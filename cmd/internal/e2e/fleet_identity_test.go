package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/policy"
	"github.com/screengraph/screengraph-agent/snapshots/pgtest"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
)

// startPostgres starts a real Postgres cluster of the test's own and
// returns it with the URL of a fresh database on it.
func startPostgres(t testing.TB) (*pgtest.Server, string) {
	t.Helper()
	pg, err := pgtest.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	db, err := pg.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pg, db
}

// newDaemonAt is a serve of the test on dataDir, not started yet.
func newDaemonAt(t testing.TB, srv *simtest.ADBServer, dataDir string, env []string, extra ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, bin: buildAgent(t), srv: srv, dataDir: dataDir,
		httpPort: simtest.FreePort(t), natsPort: simtest.FreePort(t), extra: extra, env: env}
	t.Cleanup(func() {
		d.stop()
		appium.StopLocal(d.dataDir)
	})
	return d
}

// deviceOf is the device of that serial in d's GET /v1/devices.
func (d *daemon) deviceOf(t testing.TB, serial string) service.Device {
	t.Helper()
	var v struct {
		Devices []service.Device `json:"devices"`
	}
	if st := d.call(t, "GET", "/v1/devices", nil, &v); st != http.StatusOK {
		t.Fatalf("devices: %d", st)
	}
	for _, dev := range v.Devices {
		if dev.Serial == serial {
			return dev
		}
	}
	t.Fatalf("devices %+v: no %s", v.Devices, serial)
	return service.Device{}
}

// checkOneAtATime: the leases of one serial (one physical device, whatever
// key each daemon gave it) never overlap in time.
func checkOneAtATime(t testing.TB, all []agent.Lease, serial string) []agent.Lease {
	t.Helper()
	var ls []agent.Lease
	for _, l := range all {
		if l.Serial == serial {
			ls = append(ls, l)
		}
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].AcquiredAt.Before(ls[j].AcquiredAt) })
	for i := 1; i < len(ls); i++ {
		if ls[i-1].ReleasedAt == nil || ls[i].AcquiredAt.Before(*ls[i-1].ReleasedAt) {
			t.Fatalf("device %s leased twice at once: %+v (key %s, holder %s) and %+v (key %s, holder %s)",
				serial, ls[i-1].FencingToken, ls[i-1].Device, ls[i-1].Holder, ls[i].FencingToken, ls[i].Device, ls[i].Holder)
		}
	}
	return ls
}

// Issue 23 item 1: two daemons whose hosts have different machine ids
// (SCREENGRAPH_MACHINE_ID), on one Postgres and one adb server with one
// simulated emulator. Both list the emulator under one id, the one read
// from the device; a run submitted to B while A's run holds the device
// shows on B as held by A's run and waits; the device is leased to one run
// at a time under one key. Before, each daemon keyed the device by its own
// machine's host id and both leased it at once.
func TestFleetOneDeviceOneIdentity(t *testing.T) {
	if testing.Short() {
		t.Skip("real daemons, Postgres and Appium")
	}
	_, db := startPostgres(t)
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	serial := emu.Serial()
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	g := newGatedAPKs(t, apk)
	cert := "SSL_CERT_FILE=" + g.CertFile(t)
	a := startDaemonEnv(t, srv, []string{cert, device.MachineIDEnv + "=" + strings.Repeat("a1", 16)}, "--database-url", db)
	b := startDaemonEnv(t, srv, []string{cert, device.MachineIDEnv + "=" + strings.Repeat("b2", 16)}, "--database-url", db)

	ida, idb := a.deviceOf(t, serial).ID, b.deviceOf(t, serial).ID
	if id, s := agent.SplitDeviceKey(ida); ida != idb || len(id) != 12 || s != serial {
		t.Fatalf("one emulator listed as %q by A and %q by B, want one <12 hex>/%s", ida, idb, serial)
	}

	first := a.submit(t, runBody(serial, g.URL("first"), sha, "ALWAYS_REINSTALL", "FORCE_RESTART", nil))
	g.waitFetch(t, "first") // A's run holds the device, its download held
	second := b.submit(t, runBody(serial, g.URL("second"), sha, "ALWAYS_REINSTALL", "FORCE_RESTART", nil))
	// B sees the device held by A's run (one key) once it lists it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		dev := b.deviceOf(t, serial)
		if dev.HeldBy == first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B shows %s as %+v, want held by A's run %s\n--- A:\n%s\n--- B:\n%s", serial, dev, first, a.log(), b.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var active int
	for _, l := range a.leases(t, false) {
		if l.Serial == serial {
			active++
		}
	}
	if active != 1 {
		t.Fatalf("%d active leases of %s while A's run holds it: %+v", active, serial, a.leases(t, false))
	}
	if st := b.run(t, second).Status; st != agent.RunPending {
		t.Fatalf("B's run is %s while A's run holds the device, want PENDING", st)
	}
	g.Release("first")
	g.waitFetch(t, "second")
	g.Release("second")
	a.waitStatus(t, []string{first, second}, 3*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	for _, id := range []string{first, second} {
		if st := a.run(t, id).Status; st != agent.RunFinished {
			t.Fatalf("run %s ended %s\n--- A:\n%s\n--- B:\n%s", id, st, a.log(), b.log())
		}
	}
	ls := checkOneAtATime(t, a.leases(t, true), serial)
	for _, l := range ls {
		if l.Device != ida {
			t.Errorf("lease %d keyed %s, want %s", l.FencingToken, l.Device, ida)
		}
	}
	t.Logf("one emulator, two machine ids: id %s, %d leases one after the other", ida, len(ls))
}

// Issue 23 item 2: a data dir copied while its daemon runs (its
// daemon.lock names the live daemon's instance) and a second daemon
// started on the copy, on one Postgres and adb server. The second daemon
// does not take the live daemon's lease back (Postgres says it is live):
// the run is driven by its daemon alone to FINISHED, under one lease,
// released finished, none holder_lost. Before, the copy's daemon released
// it holder_lost at start and drove the run beside the live one.
func TestFleetCopiedDataDirTakesNoLiveLease(t *testing.T) {
	if testing.Short() {
		t.Skip("real daemons, Postgres and Appium")
	}
	_, db := startPostgres(t)
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	g := newGatedAPKs(t, apk)
	env := []string{"SSL_CERT_FILE=" + g.CertFile(t)}
	a := startDaemonEnv(t, srv, env, "--database-url", db)
	id := a.submit(t, runBody(emu.Serial(), g.URL("held"), signerDigest(t, apk), "ALWAYS_REINSTALL", "FORCE_RESTART", nil))
	g.waitFetch(t, "held") // the lease is held, ProvisionApp in flight
	held := a.leases(t, false)
	if len(held) != 1 || held[0].RunID != id {
		t.Fatalf("active leases %+v, want the run's", held)
	}
	lock, err := os.ReadFile(filepath.Join(a.dataDir, "daemon.lock"))
	if err != nil || !strings.Contains(string(lock), "instance "+held[0].Holder) {
		t.Fatalf("A's daemon.lock %q (%v) does not name its holder %s", lock, err, held[0].Holder)
	}
	copyDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(copyDir, "daemon.lock"), lock, 0o600); err != nil {
		t.Fatal(err)
	}
	b := newDaemonAt(t, srv, copyDir, env, "--database-url", db)
	b.start() // Start's take-back is done before it answers /healthz
	now := a.leases(t, false)
	if len(now) != 1 || now[0].FencingToken != held[0].FencingToken {
		t.Fatalf("after a daemon started on a copy of A's data dir, active leases %+v, want A's lease %d\n--- B:\n%s", now, held[0].FencingToken, b.log())
	}
	if strings.Contains(b.log(), "took back lease") {
		t.Fatalf("B took back a live lease:\n%s", b.log())
	}
	g.Release("held")
	a.waitStatus(t, []string{id}, 2*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	if st := a.run(t, id).Status; st != agent.RunFinished {
		t.Fatalf("run ended %s\n--- A:\n%s\n--- B:\n%s", st, a.log(), b.log())
	}
	var mine []agent.Lease
	for _, l := range a.leases(t, true) {
		if l.RunID == id {
			mine = append(mine, l)
		}
	}
	if len(mine) != 1 || mine[0].Holder != held[0].Holder || mine[0].ReleaseReason != agent.LeaseFinished {
		t.Fatalf("the run's leases %+v, want A's one, released finished\n--- B:\n%s", mine, b.log())
	}
}

// Issue 23 item 8: N daemons started at the same moment on a freshly
// migrated Postgres all start (the policy store's first initialisation is
// one transaction, idempotent; a daemon finding it half-written reads
// again), and the store holds version 1 current, for a few rounds of fresh
// databases. Before, one of two exited with `policies: policy store:
// current: kv "policy/current": not found` — rarely here, where the
// migration's advisory lock staggers the starts: TestPolicyStoreInitialisedTogether
// puts the second daemon inside the first's initialisation every time.
func TestFleetDaemonsStartTogetherOnAFreshStore(t *testing.T) {
	if testing.Short() {
		t.Skip("real daemons and Postgres")
	}
	pg, _ := startPostgres(t)
	srv := simtest.StartADBServer(t)
	bin := buildAgent(t)
	const daemons, rounds = 4, 3
	for round := range rounds {
		db, err := pg.NewDatabase(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "migrate", "--database-url", db).CombinedOutput(); err != nil {
			t.Fatalf("migrate: %v\n%s", err, out)
		}
		// No Appium is needed to start: an address nothing listens on.
		ds := make([]*daemon, daemons)
		for i := range ds {
			ds[i] = newDaemonAt(t, srv, t.TempDir(), nil, "--database-url", db, "--appium", "http://127.0.0.1:9/")
		}
		errs := make([]error, daemons)
		var wg sync.WaitGroup
		begin := make(chan struct{})
		for i, d := range ds {
			wg.Go(func() {
				<-begin
				errs[i] = d.launch()
			})
		}
		close(begin)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: daemon %d: %v\n%s", round, i, err, ds[i].log())
			}
		}
		for i, d := range ds {
			if err := d.stop(); err != nil {
				t.Fatalf("round %d: daemon %d: %v", round, i, err)
			}
		}
		st, err := postgres.Open(context.Background(), db, postgres.Options{NoListen: true})
		if err != nil {
			t.Fatal(err)
		}
		cur, err := st.GetKV(context.Background(), "policy/current")
		vs, verr := st.GetKV(context.Background(), "policy/versions")
		st.Close()
		if err != nil || verr != nil || string(cur) != "1" || string(vs) != "[1]" {
			t.Fatalf("round %d: policy/current %q (%v), policy/versions %q (%v); want 1 of [1]", round, cur, err, vs, verr)
		}
	}
}

// launch is start without the test's Fatal, for daemons started from
// goroutines: the process is started and waited for until /healthz answers
// 200 (90 s), or its exit is the error.
func (d *daemon) launch() error {
	d.starts++
	args := append([]string{"--log-level", "debug", "serve", "--data-dir", d.dataDir, "--listen", "127.0.0.1:" + strconv.Itoa(d.httpPort),
		"--nats-listen", "127.0.0.1:" + strconv.Itoa(d.natsPort), "--adb-server", d.srv.Addr()}, d.extra...)
	cmd := exec.Command(d.bin, args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "ANDROID_ADB_SERVER_PORT="+strconv.Itoa(d.srv.Port), "ADB_EMU=0")
	cmd.Env = append(cmd.Env, d.env...)
	logf, err := os.OpenFile(filepath.Join(d.dataDir, "serve.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	d.cmd = cmd
	d.done = make(chan error, 1)
	go func() { d.done <- cmd.Wait(); logf.Close() }()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-d.done:
			d.cmd = nil
			return fmt.Errorf("serve exited at start: %v", err)
		default:
		}
		if resp, err := http.Get(d.URL() + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("serve not healthy after 90 s")
}

// Issue 23 item 8, the race itself, through the code path a daemon's start
// takes (postgres.Open, then policy.NewStore on it) on a freshly migrated
// real Postgres, 20 rounds of fresh databases: store 0 initialises the
// policy store; the 7 others start together the moment store 0 has written
// the version list (when it writes key by key, as the old code did) or once
// it is done. Every one succeeds and all read version 1 current. The
// daemons above reach NewStore staggered by the migration's advisory lock;
// here the second arrives inside the first's initialisation every time.
func TestPolicyStoreInitialisedTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("real Postgres")
	}
	pg, _ := startPostgres(t)
	ctx := context.Background()
	const stores, rounds = 8, 20
	for round := range rounds {
		db, err := pg.NewDatabase(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sts := make([]*postgres.Store, stores)
		for i := range sts {
			if sts[i], err = postgres.Open(ctx, db, postgres.Options{NoListen: true}); err != nil {
				t.Fatal(err)
			}
			defer sts[i].Close()
		}
		errs := make([]error, stores)
		var wg, others sync.WaitGroup
		begin := make(chan struct{})
		var once sync.Once
		start := func() { once.Do(func() { close(begin) }) }
		first := &pausingKV{Store: sts[0], key: "policy/versions", at: func() {
			start()
			others.Wait() // the others read the store as the first left it here
		}}
		check := func(i int, p *policy.Store, err error) {
			if err == nil && p.Current().Version() != 1 {
				err = fmt.Errorf("current version %d, want 1", p.Current().Version())
			}
			errs[i] = err
		}
		wg.Go(func() {
			p, err := policy.NewStore(ctx, first)
			start()
			check(0, p, err)
		})
		for i := 1; i < stores; i++ {
			others.Add(1)
			wg.Go(func() {
				defer others.Done()
				<-begin
				p, err := policy.NewStore(ctx, sts[i])
				check(i, p, err)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: store %d: %v", round, i, err)
			}
		}
	}
}

// pausingKV calls at once, right after it put key through PutKV.
type pausingKV struct {
	*postgres.Store
	key  string
	at   func()
	once sync.Once
}

func (k *pausingKV) PutKV(ctx context.Context, key string, v []byte) error {
	err := k.Store.PutKV(ctx, key, v)
	if key == k.key {
		k.once.Do(k.at)
	}
	return err
}

// Issue 23 item 3, through the real binary on real Postgres: a run holds
// its device (its APK download held by the test) when Postgres stops for
// longer than the lease TTL; the daemon stops the run; once Postgres is back
// and the lease has expired by its clock, the same daemon re-acquires the
// device for the same run — a new acquisition: the old lease ends expired
// and the new one has a larger fencing token. Before, it renewed the
// expired lease and kept token and all, so a late commit of the stopped
// attempt would have passed the fence.
func TestFleetExpiredLeaseReacquiredWithNewToken(t *testing.T) {
	if testing.Short() {
		t.Skip("real daemon, Postgres and Appium")
	}
	pg, db := startPostgres(t)
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	g := newGatedAPKs(t, apk)
	const ttl = 2 * time.Second
	a := startDaemonEnv(t, srv, []string{"SSL_CERT_FILE=" + g.CertFile(t)}, "--database-url", db, "--lease-ttl", ttl.String())
	id := a.submit(t, runBody(emu.Serial(), g.URL("held"), signerDigest(t, apk), "ALWAYS_REINSTALL", "FORCE_RESTART", nil))
	g.waitFetch(t, "held")
	held := a.leases(t, false)
	if len(held) != 1 || held[0].RunID != id {
		t.Fatalf("active leases %+v, want the run's", held)
	}
	if err := pg.StopServer("fast"); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// The daemon stops the run when it cannot renew; the lease expires by
	// Postgres's clock (this machine's) at most TTL after its last renewal.
	for !strings.Contains(a.log(), "stopping the run here") || time.Since(stopped) < ttl+ttl/3 {
		if time.Since(stopped) > time.Minute {
			pg.StartServer()
			t.Fatalf("the daemon did not stop the run a minute into the outage\n%s", a.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := pg.StartServer(); err != nil {
		t.Fatal(err)
	}
	g.Release("held")
	a.waitStatus(t, []string{id}, 2*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	if st := a.run(t, id).Status; st != agent.RunFinished {
		t.Fatalf("run ended %s\n%s", st, a.log())
	}
	var mine []agent.Lease
	for _, l := range a.leases(t, true) {
		if l.RunID == id {
			mine = append(mine, l)
		}
	}
	if len(mine) < 2 || mine[0].FencingToken != held[0].FencingToken || mine[0].ReleaseReason != agent.LeaseExpired {
		t.Fatalf("the run's leases %+v: want its first lease %d ended expired and a new one after the outage\n%s", mine, held[0].FencingToken, a.log())
	}
	for _, l := range mine[1:] {
		if l.FencingToken <= held[0].FencingToken || l.Holder != held[0].Holder {
			t.Fatalf("lease after the outage %+v: want the same daemon with a token > %d", l, held[0].FencingToken)
		}
	}
	t.Logf("leases of the run: %d, tokens %d -> %d", len(mine), mine[0].FencingToken, mine[len(mine)-1].FencingToken)
}
