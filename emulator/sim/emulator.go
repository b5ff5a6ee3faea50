package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Config is one simulated emulator.
type Config struct {
	// ConsolePort is the emulator's console port (even, like `emulator -port`);
	// the adb port is ConsolePort+1 and the serial emulator-<ConsolePort>.
	// Zero picks a free pair above 20000 (never the 5554-5585 range real
	// emulators use).
	ConsolePort int
	// ADBServer is the adb server to register with ("127.0.0.1:5037"); empty
	// means do not register (the server finds ports 5555-5585 itself when it starts).
	ADBServer string
	Device    Device
	Faults    TransportFaults
	Log       zerolog.Logger

	// ADBServerOptional: a failed registration with ADBServer is logged, not
	// an error (a real emulator starts without an adb server; the server
	// finds it by its port scan when it starts later).
	ADBServerOptional bool
	// AVDName is what the console's `avd name` prints ("" prints "<build>",
	// as an emulator started without an AVD).
	AVDName string
	// ConsoleTokenPath is the console's auth token file; "" means
	// $HOME/.emulator_console_auth_token, created when missing.
	ConsoleTokenPath string
	// ReadOnly is `-read-only`: the console refuses snapshot save/load/delete.
	ReadOnly bool
	// Snapshots backs `avd snapshot ...`; nil keeps them in memory.
	Snapshots SnapshotStore
	// Auth makes adbd require the host's RSA key to be accepted first.
	Auth Authorization
}

// Authorization is adbd's ro.adb.secure=1 behaviour: the device answers the
// host's CNXN with AUTH(TOKEN) until the user accepts the host's key, so the
// adb server lists it "unauthorized".
type Authorization struct {
	// Required turns it on.
	Required bool
	// AcceptAfter is when (from Start) the user accepts the prompt; zero or
	// negative with Never false means at once when the host offers its key.
	AcceptAfter time.Duration
	// Never: the prompt is never accepted.
	Never bool
}

// TransportFaults are the faults the transport injects; durations count from Start.
type TransportFaults struct {
	// OfflineAfter/OfflineFor: the device drops its connection after OfflineAfter
	// and, re-registered, does not answer the host's CNXN for OfflineFor, so the
	// adb server lists it as "offline". OfflineFor < 0 means for good. Zero
	// OfflineAfter with zero OfflineFor means no offline period.
	OfflineAfter, OfflineFor time.Duration
	// DropConnectionAfter closes the transport connection once; the device
	// re-registers at once like a restarted emulator.
	DropConnectionAfter time.Duration
	// SlowReplies delays the answer to every OPEN.
	SlowReplies time.Duration
}

// Emulator is a running simulated emulator.
type Emulator struct {
	cfg       Config
	ln        net.Listener
	consoleLn net.Listener
	log       zerolog.Logger
	started   time.Time
	snapshots SnapshotStore

	consoleConns map[net.Conn]struct{}
	authorized   bool
	done         chan struct{}
	closeOnce    sync.Once
	closeErr     error
	reason       error

	mu    sync.Mutex
	conns map[*transport]struct{}
	// accepted is signalled on every new connection from the adb server.
	accepted chan struct{}
	offline  bool
	// opened is the services the host opened on the device, oldest first
	// (the last maxOpened): what a benchmark counts as adb round trips.
	opened []string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start listens on the adb port, registers with the adb server when one is
// configured, and serves until ctx ends or Close is called.
func Start(ctx context.Context, cfg Config) (*Emulator, error) {
	if cfg.Device == nil {
		return nil, errors.New("sim: Config.Device is nil")
	}
	cln, ln, port, err := listenPair(cfg.ConsolePort)
	if err != nil {
		return nil, err
	}
	cfg.ConsolePort = port
	ctx, cancel := context.WithCancel(ctx)
	e := &Emulator{cfg: cfg, ln: ln, consoleLn: cln, started: time.Now(), conns: map[*transport]struct{}{},
		consoleConns: map[net.Conn]struct{}{}, snapshots: cfg.Snapshots, done: make(chan struct{}),
		accepted: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
	if e.snapshots == nil {
		e.snapshots = &memSnapshots{}
	}
	e.authorized = !cfg.Auth.Required
	e.log = cfg.Log.With().Str("serial", e.Serial()).Logger()
	// The console reads (creating it when missing) its token file at start-up,
	// as android_console_start does, so `adb emu` finds it from the first call.
	tokPath := cfg.ConsoleTokenPath
	if tokPath == "" {
		tokPath = ConsoleTokenPath()
	}
	if _, err := consoleToken(tokPath); err != nil {
		e.log.Warn().Err(err).Msgf("ERROR: Unable to access '%s': emulator console will not work", tokPath)
	}
	e.wg.Add(2)
	go e.accept()
	go e.serveConsole()
	if cfg.ADBServer != "" {
		if err := e.register(); err != nil {
			if !cfg.ADBServerOptional {
				e.Close()
				return nil, err
			}
			e.log.Warn().Err(err).Msg("not registered with the adb server")
		}
	}
	e.scheduleFaults()
	e.log.Info().Int("adbPort", e.ADBPort()).Str("adbServer", cfg.ADBServer).Msg("simulated emulator started")
	return e, nil
}

// listenPair listens on the console port and on consolePort+1 (adb); with
// consolePort 0 it takes the first free even/odd pair from 20000 up.
func listenPair(consolePort int) (console, adb net.Listener, port int, err error) {
	if consolePort != 0 {
		if consolePort%2 != 0 {
			return nil, nil, 0, fmt.Errorf("sim: console port %d is odd; emulators use even console ports", consolePort)
		}
		c, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(consolePort))
		if err != nil {
			return nil, nil, 0, fmt.Errorf("sim: console port %d: %w", consolePort, err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(consolePort+1))
		if err != nil {
			c.Close()
			return nil, nil, 0, fmt.Errorf("sim: adb port %d: %w", consolePort+1, err)
		}
		return c, ln, consolePort, nil
	}
	for p := 20000 + 2*int(time.Now().UnixNano()%5000); p < 65000; p += 2 {
		c, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		if err == nil {
			return c, ln, p, nil
		}
		c.Close()
	}
	return nil, nil, 0, errors.New("sim: no free port pair")
}

// maxOpened bounds the log of opened services (Opened).
const maxOpened = 4096

func (e *Emulator) noteOpen(service string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.opened) >= maxOpened {
		e.opened = append(e.opened[:0], e.opened[len(e.opened)-maxOpened/2:]...)
	}
	e.opened = append(e.opened, service)
}

// Opened returns the services the host opened on the device since the
// last call (the last 4,096 at most), oldest first: "shell:CMD",
// "shell,v2,raw:CMD", "exec:CMD", "sync:", "tcp:PORT". Each is one
// stream, so one round trip at least; a benchmark counts them per chain.
func (e *Emulator) Opened() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.opened
	e.opened = nil
	return out
}

// ConsolePort is the emulator console's port (the serial's number).
func (e *Emulator) ConsolePort() int { return e.cfg.ConsolePort }

// Done is closed when the emulator has stopped (Close, or the console's kill).
func (e *Emulator) Done() <-chan struct{} { return e.done }

// Err says why the emulator stopped once Done is closed: nil after Close, an
// error after the console's `kill`.
func (e *Emulator) Err() error {
	select {
	case <-e.done:
		return e.reason
	default:
		return nil
	}
}

// Kill stops the emulator as the console's `kill` does.
func (e *Emulator) Kill() {
	e.mu.Lock()
	if e.reason == nil {
		e.reason = errKilled
	}
	e.mu.Unlock()
	e.Close()
}

// Serial is the serial the adb server gives the device: emulator-<console port>.
func (e *Emulator) Serial() string { return "emulator-" + strconv.Itoa(e.cfg.ConsolePort) }

// ADBPort is the port the device's adbd listens on.
func (e *Emulator) ADBPort() int { return e.cfg.ConsolePort + 1 }

// Device is the device model behind the transport.
func (e *Emulator) Device() Device { return e.cfg.Device }

// register announces the device to the adb server the way the emulator does:
// `host:emulator:<adb port>` on a fresh connection, with no reply expected.
func (e *Emulator) register() error {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(e.ctx, "tcp", e.cfg.ADBServer)
	if err != nil {
		return fmt.Errorf("sim: register with adb server %s: %w", e.cfg.ADBServer, err)
	}
	defer c.Close()
	req := "host:emulator:" + strconv.Itoa(e.ADBPort())
	_, err = fmt.Fprintf(c, "%04x%s", len(req), req)
	if err != nil {
		return fmt.Errorf("sim: register with adb server %s: %w", e.cfg.ADBServer, err)
	}
	// The server acts on the request once it has read it; give it a moment
	// before closing so a reset cannot drop it.
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	io.Copy(io.Discard, c)
	return nil
}

func (e *Emulator) accept() {
	defer e.wg.Done()
	for {
		c, err := e.ln.Accept()
		if err != nil {
			return
		}
		t := newTransport(e.ctx, c, e.cfg.Device, e.log, e.isOnline, e.cfg.Faults.SlowReplies)
		t.authorized = e.isAuthorized
		t.onOpen = e.noteOpen
		t.onPublicKey = func() {
			if a := e.cfg.Auth; a.Required && !a.Never && a.AcceptAfter <= 0 {
				go e.Authorize()
			}
		}
		e.mu.Lock()
		e.conns[t] = struct{}{}
		e.mu.Unlock()
		select {
		case e.accepted <- struct{}{}:
		default:
		}
		e.log.Debug().Str("peer", c.RemoteAddr().String()).Msg("adb server connected")
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			if err := t.run(); err != nil {
				e.log.Debug().Err(err).Msg("transport ended")
			}
			e.mu.Lock()
			delete(e.conns, t)
			e.mu.Unlock()
		}()
	}
}

func (e *Emulator) isOnline() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.offline
}

// dropConnections closes every transport connection, as a crashed adbd would.
func (e *Emulator) dropConnections() {
	e.mu.Lock()
	ts := make([]*transport, 0, len(e.conns))
	for t := range e.conns {
		ts = append(ts, t)
	}
	e.mu.Unlock()
	for _, t := range ts {
		t.cancel()
	}
}

// SetOffline takes the device offline (true) or back online (false). Going
// offline drops the connection and re-registers without answering CNXN, so the
// adb server lists the serial as "offline"; coming back answers the pending CNXN.
func (e *Emulator) SetOffline(off bool) {
	e.mu.Lock()
	was := e.offline
	e.offline = off
	ts := make([]*transport, 0, len(e.conns))
	for t := range e.conns {
		ts = append(ts, t)
	}
	e.mu.Unlock()
	if off == was {
		return
	}
	if off {
		e.log.Info().Msg("fault: device offline")
		e.dropConnections()
		e.reRegister()
		return
	}
	e.log.Info().Msg("fault: device back online")
	for _, t := range ts {
		if err := t.answerCNXN(); err != nil {
			t.cancel()
		}
	}
}

// DropConnection closes the connection to the adb server and registers again.
func (e *Emulator) DropConnection() {
	e.log.Info().Msg("fault: connection dropped")
	e.dropConnections()
	e.reRegister()
}

// reRegister registers again after a dropped connection. The adb server ignores
// a registration while it still tears the old transport down (the serial is
// "already connected"), so it retries until the server connects back.
func (e *Emulator) reRegister() {
	if e.cfg.ADBServer == "" {
		return
	}
	select {
	case <-e.accepted:
	default:
	}
	for i := 0; i < 50 && e.ctx.Err() == nil; i++ {
		if err := e.register(); err != nil {
			e.log.Warn().Err(err).Msg("re-register")
		}
		select {
		case <-e.accepted:
			return
		case <-time.After(200 * time.Millisecond):
		case <-e.ctx.Done():
			return
		}
	}
	e.log.Warn().Msg("the adb server did not connect back after re-registering")
}

func (e *Emulator) after(d time.Duration, fn func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			fn()
		case <-e.ctx.Done():
		}
	}()
}

func (e *Emulator) scheduleFaults() {
	f := e.cfg.Faults
	if f.OfflineAfter > 0 || f.OfflineFor != 0 {
		e.after(f.OfflineAfter, func() {
			e.SetOffline(true)
			if f.OfflineFor > 0 {
				e.after(f.OfflineFor, func() { e.SetOffline(false) })
			}
		})
	}
	if f.DropConnectionAfter > 0 {
		e.after(f.DropConnectionAfter, e.DropConnection)
	}
	if a := e.cfg.Auth; a.Required && !a.Never && a.AcceptAfter > 0 {
		e.after(a.AcceptAfter, e.Authorize)
	}
}

// Close stops the emulator: the adb server sees its connection end and drops
// the emulator-<port> entry. It is safe to call more than once.
func (e *Emulator) Close() error {
	e.closeOnce.Do(func() {
		e.cancel()
		e.closeErr = e.ln.Close()
		e.consoleLn.Close()
		e.mu.Lock()
		for c := range e.consoleConns {
			c.Close()
		}
		e.mu.Unlock()
		e.dropConnections()
		e.wg.Wait()
		e.log.Info().Msg("simulated emulator stopped")
		close(e.done)
	})
	return e.closeErr
}

func (e *Emulator) isAuthorized() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.authorized
}

// Authorize accepts the host's key, as a user tapping "Allow" on the USB
// debugging prompt: pending handshakes get their CNXN.
func (e *Emulator) Authorize() {
	e.mu.Lock()
	was := e.authorized
	e.authorized = true
	ts := make([]*transport, 0, len(e.conns))
	for t := range e.conns {
		ts = append(ts, t)
	}
	e.mu.Unlock()
	if was {
		return
	}
	e.log.Info().Msg("adb: host key accepted")
	for _, t := range ts {
		if err := t.answerCNXN(); err != nil {
			t.cancel()
		}
	}
}
