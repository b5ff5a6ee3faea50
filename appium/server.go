package appium

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// ServerConfig starts a local Appium server.
type ServerConfig struct {
	// Bin is the appium executable; "" means the one Locate finds (the
	// checkout's, PATH, $APPIUM_HOME, the data dir's install).
	Bin string
	// DataDir is the user's data dir, where `setup appium` installs (Locate).
	DataDir string
	// AppiumHome is APPIUM_HOME (where the uiautomator2 driver is installed);
	// "" means the home Locate gives with the binary, else the inherited value.
	AppiumHome string
	// Address to listen on; "" means 127.0.0.1.
	Address string
	// Port to listen on; 0 picks a free one.
	Port int
	// ADBServerPort is the adb server Appium's adb calls go to: it sets
	// ANDROID_ADB_SERVER_PORT and ADB_EMU=0 in Appium's environment. 0 leaves the
	// environment alone (port 5037).
	ADBServerPort int
	// AndroidHome is ANDROID_HOME; "" means /usr/lib/android-sdk (Debian's adb is in
	// its platform-tools).
	AndroidHome string
	// LogFile receives Appium's log (stdout and stderr); "" keeps only the last
	// 256 KiB in memory (Server.LogTail).
	LogFile string
	// Detached leaves the server running after this process exits (a local
	// Appium that later runs reuse, with its sessions): it gets its own session
	// (setsid) and writes straight to LogFile, which is then required, instead
	// of through a pipe that would close with us.
	Detached bool
	// StartTimeout bounds the wait for GET /status ready; 0 means 60 s.
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL; 0 means 20 s.
	StopTimeout time.Duration
	// ExtraArgs are appended to the server flags.
	ExtraArgs []string
}

// InsecureFeatures are the --allow-insecure features the agent needs:
// `mobile: shell` (uiautomator2:adb_shell) and GET /appium/sessions
// (*:session_discovery). Flag form verified on Appium 3.8.0 (its log echoes
// allowInsecure: [ 'uiautomator2:adb_shell', '*:session_discovery' ]).
const InsecureFeatures = "uiautomator2:adb_shell,*:session_discovery"

// Server is a running Appium server started by StartServer.
type Server struct {
	// URL is the server's base URL, "http://127.0.0.1:<port>".
	URL string
	// Port is the port it listens on.
	Port int

	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited
	waitErr  error
	tail     *tailBuffer
	logFile  *os.File
	logPath  string // cfg.LogFile: where a detached server's log is read back
	stopOnce sync.Once
	stopTo   time.Duration
}

// StartServer runs `appium server --address A --port P
// --allow-insecure=uiautomator2:adb_shell,*:session_discovery --log-no-colors
// --log-timestamp` and waits until GET /status answers ready. The process is in
// its own process group so Stop can also end the adb children it spawned.
// Errors: process_error when the binary is missing or the server exits or does
// not become ready in time (the message carries the end of its log); ctx's
// cancellation stops the start.
//
// With Port 0 the port is picked free just before the start; another
// process may bind it first (a free port is only free when asked), so a
// server that exits with EADDRINUSE is started again on a new port, up to
// three times.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	for try := 1; ; try++ {
		s, err := startServer(ctx, cfg)
		if err == nil || cfg.Port != 0 || try == 3 || !strings.Contains(err.Error(), "EADDRINUSE") {
			return s, err
		}
	}
}

// startServer is one try of StartServer.
func startServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	inst, err := Locate(LocateConfig{Bin: cfg.Bin, DataDir: cfg.DataDir})
	if err != nil {
		return nil, err
	}
	if cfg.AppiumHome == "" {
		cfg.AppiumHome = inst.Home
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	cmd := serverCommand(inst.Bin, cfg)
	s := &Server{URL: fmt.Sprintf("http://%s", net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.Port))), Port: cfg.Port,
		cmd: cmd, done: make(chan struct{}), tail: &tailBuffer{max: 256 << 10}, stopTo: cfg.StopTimeout, logPath: cfg.LogFile}
	if err := s.wireLog(cfg); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		s.closeLog()
		return nil, agent.Wrap(agent.ErrProcess, err, "appium: start %s", inst.Bin)
	}
	go func() {
		s.waitErr = cmd.Wait()
		s.closeLog()
		close(s.done)
	}()
	if err := s.waitReady(ctx, cfg.StartTimeout); err != nil {
		return nil, err
	}
	return s, nil
}

// setDefaults fills cfg's unset address (127.0.0.1), port (a free one),
// Android SDK (/usr/lib/android-sdk) and timeouts (see ServerConfig).
func (cfg *ServerConfig) setDefaults() error {
	if cfg.Address == "" {
		cfg.Address = "127.0.0.1"
	}
	if cfg.Port == 0 {
		p, err := freePort(cfg.Address)
		if err != nil {
			return agent.Wrap(agent.ErrProcess, err, "appium: choose a port")
		}
		cfg.Port = p
	}
	if cfg.AndroidHome == "" {
		cfg.AndroidHome = "/usr/lib/android-sdk"
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 20 * time.Second
	}
	return nil
}

// serverCommand is the `appium server` command of bin for cfg (defaults
// set): its flags, its environment (the SDK, APPIUM_HOME, the adb server's
// port) and its own process group.
func serverCommand(bin string, cfg ServerConfig) *exec.Cmd {
	args := []string{"server", "--address", cfg.Address, "--port", strconv.Itoa(cfg.Port),
		"--allow-insecure=" + InsecureFeatures, "--log-no-colors", "--log-timestamp"}
	args = append(args, cfg.ExtraArgs...)
	cmd := exec.Command(bin, args...)
	env := withEnv(os.Environ(), "ANDROID_HOME", cfg.AndroidHome)
	env = withEnv(env, "ANDROID_SDK_ROOT", cfg.AndroidHome)
	if cfg.AppiumHome != "" {
		env = withEnv(env, "APPIUM_HOME", cfg.AppiumHome)
	}
	if cfg.ADBServerPort != 0 {
		env = withEnv(env, "ANDROID_ADB_SERVER_PORT", strconv.Itoa(cfg.ADBServerPort))
		env = withEnv(env, "ADB_EMU", "0")
	}
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// wireLog sends the server's output to the log tail, and to cfg.LogFile
// when set; a detached server writes to LogFile only (required) in a
// session of its own.
func (s *Server) wireLog(cfg ServerConfig) error {
	if cfg.Detached && cfg.LogFile == "" {
		return agent.Errorf(agent.ErrInvalidRequest, "appium: a detached server needs a LogFile")
	}
	var w io.Writer = s.tail
	if cfg.LogFile != "" {
		f, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return agent.Wrap(agent.ErrProcess, err, "appium: open log file")
		}
		s.logFile = f
		w = io.MultiWriter(f, s.tail)
		if cfg.Detached {
			s.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			w = f
		}
	}
	s.cmd.Stdout, s.cmd.Stderr = w, w
	return nil
}

// waitReady polls GET /status every 200 ms until the server says ready;
// process_error when it exits first or is not ready within startTO (then
// stopped), interrupted when ctx ends first (then stopped).
func (s *Server) waitReady(ctx context.Context, startTO time.Duration) error {
	c, _ := New(s.URL, Options{Timeout: 2 * time.Second})
	deadline := time.NewTimer(startTO)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := c.Status(ctx)
		if err == nil && st.Ready {
			return nil
		}
		select {
		case <-s.done:
			return agent.Errorf(agent.ErrProcess, "appium: server exited before ready (%v); log tail:\n%s", s.waitErr, s.LogTail(4096))
		case <-ctx.Done():
			s.Stop()
			return agent.Wrap(agent.ErrInterrupted, ctx.Err(), "appium: server start")
		case <-deadline.C:
			s.Stop()
			return agent.Errorf(agent.ErrProcess, "appium: server not ready within %v (last: %v); log tail:\n%s", startTO, err, s.LogTail(4096))
		case <-tick.C:
		}
	}
}

// Stop sends SIGTERM (Appium deletes its sessions and exits), waits up to
// StopTimeout, then SIGKILLs what is left of the process group (adb children
// such as `am instrument` streams). It is safe to call more than once; it
// returns the process's exit error, nil after a clean exit or a SIGTERM exit.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		pgid := s.cmd.Process.Pid
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(s.stopTo):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-s.done
		}
		// Children of the group that outlived the server (adb clients it spawned).
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
	<-s.done
	var ee *exec.ExitError
	if errors.As(s.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	return s.waitErr
}

// Exited reports whether the server process has ended.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// LogTail is the last n bytes (at most 256 KiB) of the server's log.
func (s *Server) LogTail(n int) string {
	if t := s.tail.last(n); t != "" || s.logPath == "" {
		return t
	}
	// A detached server writes to its LogFile only: read its end there, so
	// an early exit's cause is in the error.
	return fileTail(s.logPath, n)
}

// fileTail is the last n bytes of the file at p ("" when unreadable).
func fileTail(p string, n int) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-int64(n), 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return string(b)
}

// LogLines returns the log lines (of the in-memory tail) that contain substr.
func (s *Server) LogLines(substr string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s.tail.last(s.tail.max)))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			out = append(out, sc.Text())
		}
	}
	return out
}

func (s *Server) closeLog() {
	if s.logFile != nil {
		s.logFile.Close()
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) last(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n > len(t.b) {
		n = len(t.b)
	}
	return string(t.b[len(t.b)-n:])
}

func withEnv(env []string, k, v string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, k+"=") {
			out = append(out, kv)
		}
	}
	return append(out, k+"="+v)
}

func freePort(addr string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// PID is the server process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }
