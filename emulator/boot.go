package emulator

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
)

// DefaultBootTimeout bounds a boot whose request names no timeout.
const DefaultBootTimeout = 120 * time.Second

// BootArgs is the emulator command line of a headless boot of avd on console
// port (adb port+1): `-avd NAME -port P -no-window -no-audio -no-boot-anim`,
// then -read-only (another instance of the AVD: no lock, no snapshot saved)
// or, unless saveSnapshot, -no-snapshot-save (CI: default_boot stays as it
// was), and -no-snapshot-load for a cold boot. Flags as documented in
// developer.android.com "Start the emulator from the command line"
// (fixtures/captures/emulator-commandline).
func BootArgs(avd string, port int, readOnly, saveSnapshot, cold bool) []string {
	args := []string{"-avd", avd, "-port", strconv.Itoa(port), "-no-window", "-no-audio", "-no-boot-anim"}
	if readOnly {
		args = append(args, "-read-only")
	} else if !saveSnapshot {
		args = append(args, "-no-snapshot-save")
	}
	if cold {
		args = append(args, "-no-snapshot-load")
	}
	return args
}

// Log lines of the emulator that the boot reads (fixtures/captures/emulator).
var (
	reQuickLoaded   = regexp.MustCompile(`Successfully loaded snapshot`)
	reBootCompleted = regexp.MustCompile(`Boot completed in (\d+) ms`)
	// A snapshot that did not load: the real emulator logs "Failed to load
	// snapshot 'default_boot'" (and, for a renderer change, "Change of GLES
	// renderer detected"); the simulator "Cold boot: snapshot failed to load".
	reSnapshotFailed = regexp.MustCompile(`(?i)(fail\w* to load snapshot|snapshot\b.{0,40}\b(failed|invalid|corrupt\w*|could not|cannot)\b)`)
	// A second writable instance of an AVD (fixtures/captures/emulator/multiple-instances-v32.txt).
	reAVDLocked = regexp.MustCompile(`Running multiple emulators with the same AVD`)
	rePortInUse = regexp.MustCompile(`(?i)(port \d+ is already in use|address already in use)`)
)

// Boot starts a new headless instance of req.AVD and waits until it is
// boot-ready. See the package doc for the steps; errors: process_error
// (EMULATOR_NOT_FOUND, AVD_UNKNOWN, EMULATOR_CRASHED, EMULATOR_EXITED),
// boot_timeout (the emulator is killed), interrupted/timeout from ctx.
func (m *Manager) Boot(ctx context.Context, req device.BootRequest) (device.BootResult, error) {
	progress := func(format string, args ...any) {
		if req.Progress != nil {
			req.Progress(fmt.Sprintf(format, args...))
		}
	}
	cmdline, err := m.command()
	if err != nil {
		return device.BootResult{}, err
	}
	if err := m.checkAVD(ctx, req.AVD); err != nil {
		return device.BootResult{}, err
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = DefaultBootTimeout
	}
	start := time.Now()
	deadline := start.Add(timeout)
	plan := bootPlan{cold: req.ColdBoot, readOnly: req.ReadOnly}
	if plan.cold {
		plan.coldReason = "cold boot requested"
	}
	for attempt := 0; ; attempt++ {
		port, release, err := m.reservePort(ctx)
		if err != nil {
			return device.BootResult{}, err
		}
		args := BootArgs(req.AVD, port, plan.readOnly, req.SaveSnapshot, plan.cold)
		progress("booting AVD %s as emulator-%d (%s boot): %s %s", req.AVD, port, map[bool]string{true: "cold", false: "quick"}[plan.cold],
			strings.Join(append([]string{filepath.Base(cmdline[0])}, cmdline[1:]...), " "), strings.Join(args, " "))
		p, err := m.launch(cmdline, args, port)
		if err != nil {
			release()
			return device.BootResult{}, err
		}
		res, err := m.waitBoot(ctx, p, deadline, progress)
		release()
		if err == nil {
			res.Took, res.ReadOnly = time.Since(start), plan.readOnly
			m.booted(&res, req.AVD, p, plan.coldReason)
			progress("%s ready: %s boot in %v", res.Serial, strings.ToLower(string(res.Mode)), res.Took.Round(time.Millisecond))
			return res, nil
		}
		ex, ok := err.(*earlyExit)
		if !ok {
			return device.BootResult{}, err
		}
		if attempt >= 3 || !plan.retry(ex, req.AVD, progress) {
			return device.BootResult{}, ex.agentError()
		}
	}
}

// checkAVD: avd is one of `emulator -list-avds` (process_error
// AVD_UNKNOWN when not).
func (m *Manager) checkAVD(ctx context.Context, avd string) error {
	ok, err := m.HasAVD(ctx, avd)
	if err != nil {
		return err
	}
	if !ok {
		return &agent.Error{ID: agent.ErrProcess, Code: CodeAVDUnknown,
			Msg: fmt.Sprintf("no AVD named %q (emulator -list-avds; AVD home %s)", avd, AVDHome(m.cfg.Env))}
	}
	return nil
}

// bootPlan is how the next boot attempt starts: cold (and why), and
// -read-only.
type bootPlan struct {
	cold, readOnly bool
	coldReason     string
}

// retry changes the plan after an emulator that exited early, when a new
// attempt can do better: cold after a snapshot that failed to load, another
// port after a taken one, -read-only beside a writable instance holding the
// AVD's lock. False when nothing would change.
func (b *bootPlan) retry(ex *earlyExit, avd string, progress func(string, ...any)) bool {
	switch {
	case ex.snapshotFailed != "" && !b.cold:
		b.cold, b.coldReason = true, "quick boot failed: "+ex.snapshotFailed
		progress("emulator-%d exited after its snapshot failed to load (%s): cold boot", ex.port, ex.snapshotFailed)
	case ex.portInUse:
		progress("console port %d was taken: trying another", ex.port)
	case ex.avdLocked && !b.readOnly:
		// Another writable instance holds the AVD's lock (a concurrent
		// boot, or one started by hand): run beside it.
		b.readOnly = true
		progress("AVD %s is already running writable (its lock is held): booting a -read-only instance", avd)
	default:
		return false
	}
	return true
}

// booted completes a cold boot's reason (coldReason, the plan's, else no
// snapshot loaded) and records the instance in the host's state.
func (m *Manager) booted(res *device.BootResult, avd string, p *proc, coldReason string) {
	if res.Mode == device.BootCold && res.ColdBootReason == "" {
		res.ColdBootReason = coldReason
	}
	if res.ColdBootReason == "" && res.Mode == device.BootCold {
		res.ColdBootReason = "no quick-boot snapshot loaded"
	}
	now := m.now()
	_ = m.updateStateBooted(res.Serial, Booted{AVD: avd, PID: p.cmd.Process.Pid, ReadOnly: res.ReadOnly, Log: p.logPath, BootedAt: now, LastUsed: now})
}

// updateStateBooted records serial as booted by this host.
func (m *Manager) updateStateBooted(serial string, b Booted) error {
	return m.updateState(func(st map[string]Booted) { st[serial] = b })
}

// reservePort picks the lowest free even console port P (P and P+1 free on
// 127.0.0.1, emulator-P unknown to the adb server, not being booted by this
// process) and holds it until release.
func (m *Manager) reservePort(ctx context.Context) (int, func(), error) {
	infos, err := m.adb.Devices(ctx)
	if err != nil {
		return 0, nil, adbdevice.AgentError(err)
	}
	known := map[string]bool{}
	for _, in := range infos {
		known[in.Serial] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	first, last := m.consolePorts()
	for p := first; p <= last; p += 2 {
		if m.busy[p] || known["emulator-"+strconv.Itoa(p)] || !portFree(p) || !portFree(p+1) {
			continue
		}
		m.busy[p] = true
		return p, func() {
			m.mu.Lock()
			delete(m.busy, p)
			m.mu.Unlock()
		}, nil
	}
	return 0, nil, &agent.Error{ID: agent.ErrProcess, Code: CodeNoFreePort,
		Msg: fmt.Sprintf("no free console port pair in %d..%d", first, last+1)}
}

func portFree(p int) bool {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// proc is one emulator process being booted.
type proc struct {
	cmd     *exec.Cmd
	port    int
	logPath string
	started time.Time
	done    chan struct{} // closed when the process has exited
	state   *os.ProcessState
	waitErr error
}

// launch starts the emulator in its own session (it outlives a CLI run and
// is not killed with the daemon's process group), its stdout and stderr
// appended to <StateDir>/emulator-P.log.
func (m *Manager) launch(cmdline, args []string, port int) (*proc, error) {
	if err := os.MkdirAll(m.cfg.StateDir, 0o700); err != nil {
		return nil, agent.Wrap(agent.ErrInternal, err, "emulator state dir")
	}
	logPath := filepath.Join(m.cfg.StateDir, fmt.Sprintf("emulator-%d.log", port))
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, agent.Wrap(agent.ErrInternal, err, "emulator log")
	}
	defer lf.Close()
	c := exec.Command(cmdline[0], append(append([]string{}, cmdline[1:]...), args...)...)
	c.Env = m.env()
	c.Stdout, c.Stderr = lf, lf
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		return nil, &agent.Error{ID: agent.ErrProcess, Code: CodeEmulatorNotFound, Msg: "start " + cmdline[0], Err: err}
	}
	p := &proc{cmd: c, port: port, logPath: logPath, started: time.Now(), done: make(chan struct{})}
	go func() {
		p.waitErr = c.Wait()
		p.state = c.ProcessState
		close(p.done)
	}()
	return p, nil
}

// earlyExit is an emulator process that ended before it was boot-ready.
type earlyExit struct {
	port           int
	status         string
	crashed        bool // killed by a signal, or a non-zero exit without a known cause
	snapshotFailed string
	portInUse      bool
	avdLocked      bool // "Running multiple emulators with the same AVD"
	tail           []string
}

func (e *earlyExit) Error() string { return e.agentError().Error() }

func (e *earlyExit) agentError() *agent.Error {
	code := CodeEmulatorExited
	if e.crashed {
		code = CodeEmulatorCrashed
	}
	return &agent.Error{ID: agent.ErrProcess, Code: code,
		Msg: fmt.Sprintf("emulator-%d %s before it was boot-ready; last output: %s", e.port, e.status, strings.Join(e.tail, " / "))}
}

// waitBoot follows p's log and the adb server until emulator-P is boot-ready.
func (m *Manager) waitBoot(ctx context.Context, p *proc, deadline time.Time, progress func(string, ...any)) (device.BootResult, error) {
	serial := "emulator-" + strconv.Itoa(p.port)
	// This loop waits for the serial itself, reporting progress.
	dev := adbdevice.NewADBDevice(m.adb, serial).WithReconnectGrace(0)
	bootlog := bootLog{p: p, res: device.BootResult{Serial: serial, Mode: device.BootCold}, progress: progress}
	lastProgress := time.Now()
	why := "not yet listed by the adb server"
	for {
		bootlog.read()
		select {
		case <-p.done:
			bootlog.read()
			return bootlog.res, m.exitInfo(p)
		default:
		}
		if ready, reason := m.probe(ctx, dev); ready {
			return bootlog.ready(time.Now()), nil
		} else if reason != "" {
			why = reason
		}
		if err := m.bootAbandoned(ctx, p, deadline, why); err != nil {
			return bootlog.res, err
		}
		if time.Since(lastProgress) >= 2*time.Second {
			lastProgress = time.Now()
			progress("waiting for %s to boot (%v): %s", serial, time.Since(p.started).Round(time.Second), why)
		}
		select {
		case <-ctx.Done():
		case <-p.done:
		case <-time.After(min(m.cfg.PollInterval, time.Until(deadline)+time.Millisecond)):
		}
	}
}

// bootAbandoned kills p and says why when ctx ended (its error, classified)
// or the deadline passed (boot_timeout, with why it is not ready); nil
// while the wait goes on.
func (m *Manager) bootAbandoned(ctx context.Context, p *proc, deadline time.Time, why string) error {
	if err := ctx.Err(); err != nil {
		m.abandon(p)
		return agent.Classify(err)
	}
	if !time.Now().Before(deadline) {
		m.abandon(p)
		return agent.Errorf(agent.ErrBootTimeout, "emulator-%d (AVD boot) not boot-ready after %v: %s; emulator killed (log %s)",
			p.port, time.Since(p.started).Round(time.Millisecond), why, p.logPath)
	}
	return nil
}

// bootLog follows a booting emulator's log: the boot mode it shows (quick
// after "Successfully loaded snapshot", cold after a snapshot that failed,
// with the reason) and when it said "Boot completed in N ms".
type bootLog struct {
	p             *proc
	res           device.BootResult
	progress      func(string, ...any)
	offset        int64 // bytes of the log read
	bootCompleted time.Time
}

// read reads the lines the log gained since the last read.
func (b *bootLog) read() {
	lines, n := readNewLines(b.p.logPath, b.offset)
	b.offset = n
	for _, l := range lines {
		switch {
		case reQuickLoaded.MatchString(l):
			b.res.Mode = device.BootQuick
		case reSnapshotFailed.MatchString(l) && b.res.ColdBootReason == "":
			b.res.Mode, b.res.ColdBootReason = device.BootCold, logMessage(l)
			b.progress("emulator-%d: quick boot failed, cold boot: %s", b.p.port, b.res.ColdBootReason)
		}
		if sm := reBootCompleted.FindStringSubmatch(l); sm != nil {
			ms, _ := strconv.Atoi(sm[1])
			b.bootCompleted = b.p.started.Add(time.Duration(ms) * time.Millisecond)
		}
	}
}

// ready is the result of a boot found ready at readyAt, after a last read
// of the log: ReadyLag is how long after the emulator's "Boot completed".
func (b *bootLog) ready(readyAt time.Time) device.BootResult {
	b.read()
	if !b.bootCompleted.IsZero() && readyAt.After(b.bootCompleted) {
		b.res.ReadyLag = readyAt.Sub(b.bootCompleted)
	}
	return b.res
}

// probe is EnsureDevice's readiness: adb state "device", then adb.BootCommand
// and `service list` through parse.ParseBootStatus.
func (m *Manager) probe(ctx context.Context, dev *adbdevice.ADBDevice) (bool, string) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := dev.State(pctx)
	if err != nil {
		return false, "not yet listed by the adb server"
	}
	if st != string(parse.StateDevice) {
		return false, "adb state " + st
	}
	r, err := dev.Shell(pctx, parse.BootCommand)
	if err != nil {
		return false, "boot probe: " + err.Error()
	}
	bs := parse.ParseBootStatus(r.Stdout, "")
	if !bs.Ready {
		return false, bs.Reason
	}
	sl, err := dev.Shell(pctx, "service list")
	if err != nil {
		return false, "service list: " + err.Error()
	}
	if strings.TrimSpace(sl.Stdout) == "" {
		return false, "service list is empty"
	}
	bs = parse.ParseBootStatus(r.Stdout, sl.Stdout)
	return bs.Ready, bs.Reason
}

// exitInfo describes why p ended early.
func (m *Manager) exitInfo(p *proc) *earlyExit {
	lines, _ := readNewLines(p.logPath, 0)
	e := &earlyExit{port: p.port, status: "exited"}
	if st := p.state; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.status, e.crashed = "was killed by signal "+ws.Signal().String(), true
		} else {
			e.status = fmt.Sprintf("exited with status %d", st.ExitCode())
			e.crashed = st.ExitCode() != 0
		}
	}
	for _, l := range lines {
		if reSnapshotFailed.MatchString(l) {
			e.snapshotFailed = logMessage(l)
		}
		if rePortInUse.MatchString(l) {
			e.portInUse = true
		}
		if reAVDLocked.MatchString(l) {
			e.avdLocked = true
		}
	}
	if e.snapshotFailed != "" || e.portInUse || e.avdLocked {
		e.crashed = false
	}
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	e.tail = lines
	return e
}

// abandon kills an emulator that did not boot in time (SIGTERM, then
// SIGKILL after 3 s).
func (m *Manager) abandon(p *proc) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// logMessage strips the "LEVEL   | " prefix of an emulator log line.
func logMessage(l string) string {
	if _, msg, ok := strings.Cut(l, "| "); ok {
		return strings.TrimSpace(msg)
	}
	return strings.TrimSpace(l)
}

// readNewLines returns the whole lines of path from offset on and the offset
// after the last whole line.
func readNewLines(path string, offset int64) ([]string, int64) {
	f, err := os.Open(path)
	if err != nil {
		return nil, offset
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return nil, offset
	}
	buf := make([]byte, 64<<10)
	var data []byte
	for {
		n, err := f.Read(buf)
		data = append(data, buf[:n]...)
		if err != nil || n == 0 {
			break
		}
	}
	end := strings.LastIndexByte(string(data), '\n')
	if end < 0 {
		return nil, offset
	}
	var lines []string
	for _, l := range strings.Split(string(data[:end]), "\n") {
		if l = strings.TrimRight(l, "\r"); l != "" {
			lines = append(lines, l)
		}
	}
	return lines, offset + int64(end) + 1
}
