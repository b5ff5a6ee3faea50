package sim_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// capture reads fixtures/captures/console/<name>.
func capture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "captures", "console", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type consoleConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialConsole(t *testing.T, port int) *consoleConn {
	t.Helper()
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &consoleConn{t: t, c: c, r: bufio.NewReader(c)}
}

// reply reads up to a line that is OK, or starts with KO: or OK:.
func (cc *consoleConn) reply() string {
	cc.t.Helper()
	var b strings.Builder
	for {
		line, err := cc.r.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			cc.t.Fatalf("console read after %q: %v", b.String(), err)
		}
		l := strings.TrimRight(line, "\r\n")
		if l == "OK" || strings.HasPrefix(l, "KO:") || strings.HasPrefix(l, "OK:") {
			return b.String()
		}
	}
}

func (cc *consoleConn) do(cmd string) string {
	cc.t.Helper()
	if _, err := cc.c.Write([]byte(cmd + "\n")); err != nil {
		cc.t.Fatal(err)
	}
	return cc.reply()
}

func (cc *consoleConn) expect(cmd, want string) {
	cc.t.Helper()
	if got := cc.do(cmd); got != want {
		cc.t.Errorf("%q:\n got %q\nwant %q", cmd, got, want)
	}
}

// TestConsoleTextsMatchCaptures drives the console as a telnet client would and
// compares every answer with fixtures/captures/console (the real console's
// texts, cited in SOURCES.md), byte for byte with CRLF.
func TestConsoleTextsMatchCaptures(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	e, _, err := sim.Launch(context.Background(), sim.LaunchConfig{Profile: simtest.Profile(t, "default"), Log: zerolog.Nop(), AVDName: "Pixel8_API_34"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	cc := dialConsole(t, e.ConsolePort())
	tokPath := filepath.Join(home, ".emulator_console_auth_token")
	banner := strings.Replace(cc.reply(), tokPath, "/Users/me/.emulator_console_auth_token", 1)
	if want := capture(t, "banner-auth-required.txt"); banner != want {
		t.Errorf("banner:\n got %q\nwant %q", banner, want)
	}
	tok, err := os.ReadFile(tokPath)
	if err != nil {
		t.Fatalf("the console did not create its token file: %v", err)
	}
	if fi, _ := os.Stat(tokPath); fi.Mode().Perm() != 0o600 || len(tok) != 16 || strings.ContainsAny(string(tok), "\r\n") {
		t.Errorf("token file: mode %v, %d bytes %q; want 0600, 16 base64 characters, no newline", fi.Mode().Perm(), len(tok), tok)
	}

	// Before auth only help, help-verbose, ping, avd name, auth and quit exist.
	cc.expect("help", capture(t, "help-preauth.txt"))
	cc.expect("ping", capture(t, "ping.txt"))
	cc.expect("avd name", capture(t, "avd-name.txt"))
	cc.expect("avd status", cc.badSubPreauth())
	cc.expect("kill", capture(t, "unknown-command.txt"))
	cc.expect("auth", capture(t, "auth-missing.txt"))
	cc.expect("auth nope", capture(t, "auth-mismatch.txt"))
	cc.expect("auth "+string(tok), capture(t, "auth-ok.txt"))

	cc.expect("help", capture(t, "help.txt"))
	cc.expect("ping", capture(t, "ping.txt"))
	cc.expect("frobnicate", capture(t, "unknown-command.txt"))
	cc.expect("avd name", capture(t, "avd-name.txt"))
	cc.expect("avd status", capture(t, "avd-status.txt"))
	cc.expect("avd", capture(t, "avd-missing-sub-command.txt"))
	cc.expect("avd snapshot list", "There is no snapshot available.\r\nOK\r\n")
	cc.expect("avd snapshot save snap1", capture(t, "avd-snapshot-save.txt"))
	if got := cc.do("avd snapshot list"); !strings.HasPrefix(got, "List of snapshots present on all disks:\r\nID        TAG                 VM SIZE                DATE       VM CLOCK\r\n--        snap1                   75M ") || !strings.HasSuffix(got, "\r\nOK\r\n") {
		t.Errorf("avd snapshot list after save: %q", got)
	}
	cc.expect("avd snapshot load snap1", "OK\r\n")
	cc.expect("avd snapshot delete snap1", "OK\r\n")
	cc.expect("avd snapshot list", "There is no snapshot available.\r\nOK\r\n")
	cc.expect("avd snapshot load snap1", "KO: snapshot 'snap1' does not exist\r\n")
}

// badSubPreauth is what `avd status` prints before auth: only `name` is an avd
// sub-command then (vm_commands_preauth).
func (cc *consoleConn) badSubPreauth() string {
	return "allows you to control (e.g. start/stop) the execution of the virtual device\r\n\r\navailable sub-commands:\r\n" +
		"    name             query virtual device name\r\n\r\nKO:  bad sub-command\r\n"
}

// TestConsoleEmptyTokenDisablesAuth: an empty token file turns auth off
// (console_auth.cpp): the banner is the help prompt and every command works.
func TestConsoleEmptyTokenDisablesAuth(t *testing.T) {
	tokPath := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokPath, nil, 0o600)
	e, _, err := sim.Launch(context.Background(), sim.LaunchConfig{Profile: simtest.Profile(t, "default"), Log: zerolog.Nop(),
		AVDName: "Pixel8_API_34", ConsoleTokenPath: tokPath, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cc := dialConsole(t, e.ConsolePort())
	if got, want := cc.reply(), capture(t, "banner-auth-disabled.txt"); got != want {
		t.Errorf("banner %q, want %q", got, want)
	}
	cc.expect("avd status", capture(t, "avd-status.txt"))
	cc.expect("avd snapshot save x", capture(t, "avd-snapshot-save-read-only.txt"))
}

// TestSnapshotListFormatMatchesCapture formats one snapshot as the captured
// `adb emu avd snapshot list` shows it (the capture's LF line ends).
func TestSnapshotListFormatMatchesCapture(t *testing.T) {
	date := time.Date(2026, 9, 9, 11, 41, 45, 0, time.Local)
	got := sim.FormatSnapshotList([]sim.Snapshot{{Name: "default_boot", Size: 75 << 20, Date: date, Clock: 10*time.Minute + 7753*time.Millisecond}}) + "OK\r\n"
	if got = strings.ReplaceAll(got, "\r\n", "\n"); got != capture(t, "avd-snapshot-list.txt") {
		t.Errorf("got\n%q\nwant\n%q", got, capture(t, "avd-snapshot-list.txt"))
	}
}

// TestConsoleKillRemovesDevice: `kill` on the console ends the emulator and the
// real adb server drops emulator-P from `adb devices`.
func TestConsoleKillRemovesDevice(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	srv := simtest.StartADBServer(t)
	e, _ := simtest.Launch(t, srv, simtest.Profile(t, "default"))
	srv.WaitState(t, e.Serial(), "device", 30*time.Second)
	cc := dialConsole(t, e.ConsolePort())
	cc.reply()
	tok, _ := os.ReadFile(sim.ConsoleTokenPath())
	cc.expect("auth "+string(tok), capture(t, "auth-ok.txt"))
	cc.expect("kill", capture(t, "kill.txt"))
	select {
	case <-e.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the emulator did not stop after kill")
	}
	if e.Err() == nil {
		t.Error("Err() is nil after kill")
	}
	srv.WaitState(t, e.Serial(), "", 10*time.Second)
}

// TestUnauthorizedThenAccepted: a device whose profile says unauthorizedFor
// answers CNXN with AUTH TOKEN; the real adb server lists it "unauthorized"
// until the key is accepted, then "device".
func TestUnauthorizedThenAccepted(t *testing.T) {
	srv := simtest.StartADBServer(t)
	p := simtest.Profile(t, "default")
	p.Faults.UnauthorizedFor = 4 * time.Second
	e, _ := simtest.Launch(t, srv, p)
	srv.WaitState(t, e.Serial(), "unauthorized", 10*time.Second)
	srv.WaitState(t, e.Serial(), "device", 15*time.Second)
	if out, _, code := srv.Run(t, "-s", e.Serial(), "shell", "echo", "hi"); code != 0 || out != "hi\n" {
		t.Errorf("shell after authorization: %q exit %d", out, code)
	}
}

// TestUnauthorizedForever: unauthorizedFor < 0 never accepts the key; shell
// fails the way adb reports an unauthorized device.
func TestUnauthorizedForever(t *testing.T) {
	srv := simtest.StartADBServer(t)
	p := simtest.Profile(t, "default")
	p.Faults.UnauthorizedFor = -1
	e, _ := simtest.Launch(t, srv, p)
	srv.WaitState(t, e.Serial(), "unauthorized", 10*time.Second)
	time.Sleep(2 * time.Second)
	srv.WaitState(t, e.Serial(), "unauthorized", time.Second)
	_, errOut, code := srv.Run(t, "-s", e.Serial(), "shell", "echo", "hi")
	if code == 0 || !strings.Contains(errOut, "unauthorized") {
		t.Errorf("shell on an unauthorized device: exit %d, stderr %q", code, errOut)
	}
}
