package sim

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The emulator console (the telnet port P of `emulator -port P`): a banner,
// `auth <token>` against ~/.emulator_console_auth_token, then one command per
// line answered with its output and "OK" or a "KO: ..." line. Every text below
// is the real console's, from android/android-emu/android/console.cpp (AOSP
// platform_external_qemu) and console_auth.cpp; see
// fixtures/captures/SOURCES.md, "Emulator console". Lines end in CRLF: the
// console turns every "\n" it writes into "\r\n" (control_control_write).
const (
	consoleBannerAuth1  = "Android Console: Authentication required\r\n"
	consoleBannerAuth2  = "Android Console: type 'auth <auth_token>' to authenticate\r\n"
	consoleBannerAuth3  = "Android Console: you can find your <auth_token> in \r\n'"
	consoleHelpPrompt   = "Android Console: type 'help' for a list of commands\r\n"
	consoleOK           = "OK\r\n"
	consoleUnknown      = "KO: unknown command, try 'help'\r\n"
	consoleMissingSub   = "KO: missing sub-command\r\n"
	consoleBadSub       = "KO:  bad sub-command\r\n"
	consoleAuthMissing  = "KO: missing authentication token\r\n"
	consoleAuthMismatch = "KO: authentication token does not match ~/.emulator_console_auth_token\r\n"
	consoleAuthUnread   = "KO: unable to read ~/.emulator_console_auth_token\r\n"
	consoleKill         = "OK: killing emulator, bye bye\r\n"
	consolePing         = "I am alive!\r\n"
	consoleHTTP         = "KO: Forbidden HTTP request. Aborting\r\n"
	consoleBinary       = "KO: Forbidden binary request. Aborting\r\n"
)

// consoleCommand is one entry of the console's command tables: names as the
// help lists them ("help|h|?"), the one-line abstract, the text `help CMD`
// prints (description; "" means the abstract plus CRLF), and either a handler
// or sub-commands.
type consoleCommand struct {
	names, abstract, description string
	run                          func(c *consoleClient, args string) bool // false: a KO line was written
	sub                          []consoleCommand
}

// consoleMainNames are the names `help` lists after auth, in the order of the
// real main_commands table (emulator 30.x console.cpp). Only some of them do
// something here; the others answer like a command whose agent is absent.
var consoleMainNames = []string{"help|h|?", "help-verbose", "ping", "automation", "event", "geo", "gsm", "cdma",
	"crash", "crash-on-exit", "kill", "restart", "network", "grpc", "wifi", "power", "quit|exit", "redir", "sms",
	"avd", "qemu", "sensor", "physics", "finger", "debug", "rotate", "screenrecord", "fold", "unfold", "posture",
	"multidisplay", "icebox", "nodraw"}

// ConsoleTokenPath is where the console keeps its auth token:
// $HOME/.emulator_console_auth_token (console_auth.cpp tokenGetPathDefault).
func ConsoleTokenPath() string {
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.Getenv("HOME")
	}
	return filepath.Join(home, ".emulator_console_auth_token")
}

// consoleToken reads the token file, creating it (mode 0600, 16 base64
// characters from 12 random bytes, no newline) when missing, as
// console_auth.cpp tokenLoadOrCreate does. An empty token disables auth.
//
// The file appears whole: the token is written to a temporary file that is
// then hard-linked into place (link fails when the path exists), so an
// emulator starting at the same moment reads either no file or the whole
// token, never the empty file a create-then-write would show it (which
// would turn its console's auth off).
func consoleToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tok := base64.StdEncoding.EncodeToString(b[:])
	tmp, err := os.CreateTemp(filepath.Dir(path), ".emulator_console_auth_token.*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.WriteString(tok)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return "", werr
	}
	if err := os.Link(tmp.Name(), path); err == nil {
		return tok, nil
	} else if !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	// Another emulator made it first: its token is the one.
	got, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(got)), nil
}

// Snapshot is one saved state as `avd snapshot list` shows it.
type Snapshot struct {
	Name  string
	Size  int64 // bytes (the VM SIZE column)
	Date  time.Time
	Clock time.Duration // guest run time when saved (VM CLOCK)
}

// SnapshotStore keeps an AVD's snapshots. Load errors are what the console
// prints after "KO: ".
type SnapshotStore interface {
	List() ([]Snapshot, error)
	Save(s Snapshot) error
	Load(name string) error
	Delete(name string) error
}

// memSnapshots is the store of an emulator started without an AVD directory.
type memSnapshots struct {
	mu sync.Mutex
	m  map[string]Snapshot
}

func (s *memSnapshots) List() ([]Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Snapshot, 0, len(s.m))
	for _, v := range s.m {
		out = append(out, v)
	}
	sortSnapshots(out)
	return out, nil
}

func (s *memSnapshots) Save(v Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]Snapshot{}
	}
	s.m[v.Name] = v
	return nil
}

func (s *memSnapshots) Load(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[name]; !ok {
		return errSnapshotMissing(name)
	}
	return nil
}

func (s *memSnapshots) Delete(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, name)
	return nil
}

func sortSnapshots(s []Snapshot) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && (s[j].Date.Before(s[j-1].Date) || s[j].Date.Equal(s[j-1].Date) && s[j].Name < s[j-1].Name); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// errSnapshotMissing is the simulator's text for loading a snapshot that does
// not exist. Not from a capture: the real text comes from the snapshot
// loader and was not found (see SOURCES.md).
func errSnapshotMissing(name string) error {
	return fmt.Errorf("snapshot '%s' does not exist", name)
}

// FormatSnapshotList prints `avd snapshot list` the way QEMU's
// bdrv_snapshot_dump does (the header and row widths of a real capture, see
// fixtures/captures/console/avd-snapshot-list.txt): "%-10s%-20s%7s%20s%15s".
func FormatSnapshotList(snaps []Snapshot) string {
	if len(snaps) == 0 {
		return "There is no snapshot available.\r\n"
	}
	var b strings.Builder
	b.WriteString("List of snapshots present on all disks:\r\n")
	fmt.Fprintf(&b, "%-10s%-20s%7s%20s%15s\r\n", "ID", "TAG", "VM SIZE", "DATE", "VM CLOCK")
	for _, s := range snaps {
		c := s.Clock
		clock := fmt.Sprintf("%02d:%02d:%02d.%03d", int(c.Hours()), int(c.Minutes())%60, int(c.Seconds())%60, c.Milliseconds()%1000)
		fmt.Fprintf(&b, "%-10s%-20s%7s%20s%15s\r\n", "--", s.Name, humanSize(s.Size), s.Date.Local().Format("2006-01-02 15:04:05"), clock)
	}
	return b.String()
}

// humanSize is QEMU's size_to_str as the capture shows it ("75M").
func humanSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.3gG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprintf("%d", n)
}

// consoleClient is one connection to the console.
type consoleClient struct {
	e      *Emulator
	conn   net.Conn
	w      *bufio.Writer
	cmds   []consoleCommand
	quit   bool
	authed bool
}

func (c *consoleClient) write(s string) { c.w.WriteString(s) }

// serveConsole accepts console connections until the listener closes.
func (e *Emulator) serveConsole() {
	defer e.wg.Done()
	for {
		conn, err := e.consoleLn.Accept()
		if err != nil {
			return
		}
		e.mu.Lock()
		e.consoleConns[conn] = struct{}{}
		e.mu.Unlock()
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.serveConsoleConn(conn)
			e.mu.Lock()
			delete(e.consoleConns, conn)
			e.mu.Unlock()
			conn.Close()
		}()
	}
}

func (e *Emulator) serveConsoleConn(conn net.Conn) {
	c := &consoleClient{e: e, conn: conn, w: bufio.NewWriter(conn)}
	path := e.cfg.ConsoleTokenPath
	if path == "" {
		path = ConsoleTokenPath()
	}
	tok, err := consoleToken(path)
	switch {
	case err != nil:
		// CONSOLE_AUTH_STATUS_ERROR: the connection is closed at once.
		e.log.Warn().Err(err).Msgf("ERROR: Unable to access '%s': emulator console will not work", path)
		return
	case tok == "":
		c.authed = true
		c.cmds = e.mainCommands()
		c.write(consoleHelpPrompt + consoleOK)
	default:
		c.cmds = e.preauthCommands()
		c.write(consoleBannerAuth1 + consoleBannerAuth2 + consoleBannerAuth3 + path + "'\r\n" + consoleOK)
	}
	c.w.Flush()
	r := bufio.NewReader(conn)
	for !c.quit {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.ReplaceAll(strings.TrimSuffix(line, "\n"), "\r", "")
		c.doCommand(line)
		if c.w.Flush() != nil {
			return
		}
	}
}

// doCommand is control_client_do_command: the HTTP and UTF-8 guards, then
// the command table walk.
func (c *consoleClient) doCommand(line string) {
	if isHTTPRequestLine(line) {
		c.write(consoleHTTP)
		c.quit = true
		return
	}
	if !utf8.ValidString(line) {
		c.write(consoleBinary)
		c.quit = true
		return
	}
	cmd, args, ok := findConsoleCommand(line, c.cmds)
	if !ok {
		c.write(consoleUnknown)
		return
	}
	for {
		if cmd.run != nil {
			if cmd.run(c, args) {
				c.write(consoleOK)
			}
			return
		}
		if args == "" {
			c.dumpHelp(cmd, "")
			c.write(consoleMissingSub)
			return
		}
		sub, rest, ok := findConsoleCommand(args, cmd.sub)
		if !ok {
			c.dumpHelp(cmd, "")
			c.write(consoleBadSub)
			return
		}
		cmd, args = sub, rest
	}
}

// isHTTPRequestLine is android_http_is_request_line: "METHOD SP URI SP HTTP/".
func isHTTPRequestLine(line string) bool {
	f := strings.Fields(line)
	if len(f) != 3 || !strings.HasPrefix(f[2], "HTTP/") {
		return false
	}
	switch f[0] {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH":
		return true
	}
	return false
}

// findConsoleCommand is find_command: the first word (names split on '|')
// must equal a name; args are what follows the first space, leading spaces
// dropped.
func findConsoleCommand(input string, cmds []consoleCommand) (consoleCommand, string, bool) {
	args := ""
	if i := strings.IndexByte(input, ' '); i >= 0 {
		args = strings.TrimLeft(input[i:], " ")
	}
	for _, cmd := range cmds {
		for _, name := range strings.Split(cmd.names, "|") {
			if strings.HasPrefix(input, name) && (len(input) == len(name) || input[len(name)] == ' ') {
				return cmd, args, true
			}
		}
	}
	return consoleCommand{}, "", false
}

// dumpHelp is dump_help.
func (c *consoleClient) dumpHelp(cmd consoleCommand, prefix string) {
	if cmd.description != "" {
		c.write(cmd.description)
	} else {
		c.write(cmd.abstract + "\r\n")
	}
	if len(cmd.sub) > 0 {
		c.write("\r\navailable sub-commands:\r\n")
		for _, s := range cmd.sub {
			c.write(fmt.Sprintf("   %s %-15s  %s\r\n", prefix, s.names, s.abstract))
		}
		c.write("\r\n")
	}
}

func (e *Emulator) preauthCommands() []consoleCommand {
	return []consoleCommand{
		helpCommand, helpVerboseCommand, pingCommand,
		{names: "avd", abstract: "control virtual device execution",
			description: "allows you to control (e.g. start/stop) the execution of the virtual device\r\n",
			sub:         []consoleCommand{avdNameCommand}},
		{names: "auth", abstract: "user authentication for the emulator console",
			description: "use 'auth <auth_token>' to get extended console functionality\r\n", run: doAuth},
		quitCommand,
	}
}

var (
	helpCommand        = consoleCommand{names: "help|h|?", abstract: "print a list of commands"}
	helpVerboseCommand = consoleCommand{names: "help-verbose", abstract: "print a list of commands with descriptions"}
	pingCommand        = consoleCommand{names: "ping", abstract: "check if the emulator is alive",
		run: func(c *consoleClient, _ string) bool { c.write(consolePing); return true }}
	quitCommand = consoleCommand{names: "quit|exit", abstract: "quit control session",
		run: func(c *consoleClient, _ string) bool { c.quit = true; return false }}
	avdNameCommand = consoleCommand{names: "name", abstract: "query virtual device name",
		description: "'avd name' will return the name of this virtual device\r\n",
		run:         func(c *consoleClient, _ string) bool { c.write(c.e.AVDName() + "\r\n"); return true }}
)

func init() {
	// help and help-verbose read the client's own table, so they are bound here
	// to break the initialization cycle.
	helpCommand.run = doHelp
	helpVerboseCommand.run = doHelpVerbose
}

func doAuth(c *consoleClient, args string) bool {
	if args == "" {
		c.write(consoleAuthMissing)
		return false
	}
	path := c.e.cfg.ConsoleTokenPath
	if path == "" {
		path = ConsoleTokenPath()
	}
	tok, err := consoleToken(path)
	if err != nil {
		c.write(consoleAuthUnread)
		return false
	}
	if tok != args {
		c.write(consoleAuthMismatch)
		return false
	}
	c.write(consoleHelpPrompt)
	c.authed = true
	c.cmds = c.e.mainCommands()
	return true
}

func doHelp(c *consoleClient, args string) bool {
	if args == "" {
		c.write("Android console commands:\r\n")
		for _, cmd := range c.cmds {
			c.write("    " + cmd.names + "\r\n")
		}
		c.write("\r\nTry 'help-verbose' for more description\r\nTry 'help <command>' for command-specific help\r\n")
		return true
	}
	start := args
	cmds := c.cmds
	for {
		sub, rest, ok := findConsoleCommand(args, cmds)
		if !ok {
			doHelp(c, "")
			c.write("\r\nKO: unknown command\r\n")
			return false
		}
		if rest == "" || len(sub.sub) == 0 {
			c.dumpHelp(sub, start)
			return true
		}
		cmds, args = sub.sub, rest
	}
}

func doHelpVerbose(c *consoleClient, _ string) bool {
	c.write("Android console command help:\r\n\r\n")
	for _, cmd := range c.cmds {
		c.write(fmt.Sprintf("    %-15s  %s\r\n", cmd.names, cmd.abstract))
	}
	c.write("\r\ntry 'help <command>' for command-specific help\r\n")
	return true
}

// mainCommands is the table after auth: the real names in the real order
// (help lists them all); kill, ping, quit, help and avd work, the rest answer
// as a command whose part of the emulator is not simulated.
func (e *Emulator) mainCommands() []consoleCommand {
	var out []consoleCommand
	for _, n := range consoleMainNames {
		switch n {
		case "help|h|?":
			out = append(out, helpCommand)
		case "help-verbose":
			out = append(out, helpVerboseCommand)
		case "ping":
			out = append(out, pingCommand)
		case "quit|exit":
			out = append(out, quitCommand)
		case "kill":
			out = append(out, consoleCommand{names: "kill", abstract: "kill the emulator instance", run: func(c *consoleClient, _ string) bool {
				c.write(consoleKill)
				c.w.Flush()
				c.e.log.Info().Msg("Emulator killed by console kill command.")
				go c.e.Kill()
				return true
			}})
		case "avd":
			out = append(out, consoleCommand{names: "avd", abstract: "control virtual device execution",
				description: "allows you to control (e.g. start/stop) the execution of the virtual device\r\n",
				sub:         e.avdCommands()})
		default:
			name := n
			out = append(out, consoleCommand{names: name, abstract: consoleAbstracts[name], run: func(c *consoleClient, _ string) bool {
				c.write("KO: '" + name + "' is not supported by the simulated emulator\r\n")
				return false
			}})
		}
	}
	return out
}

// consoleAbstracts are the real abstracts of the commands not simulated
// (help-verbose prints them).
var consoleAbstracts = map[string]string{
	"automation": "manage emulator automation", "event": "simulate hardware events",
	"geo": "Geo-location commands", "gsm": "GSM related commands", "cdma": "CDMA related commands",
	"crash": "crash the emulator instance", "crash-on-exit": "simulate crash on exit for the emulator instance",
	"restart": "restart the emulator instance", "network": "manage network settings",
	"grpc": "enable the grpc endpoint", "wifi": "manage wifi settings", "power": "power related commands",
	"redir": "manage port redirections", "sms": "SMS related commands", "qemu": "QEMU-specific commands",
	"sensor": "manage emulator sensors", "physics": "manage physical model",
	"finger": "manage emulator finger print", "debug": "control the emulator debug output tags",
	"rotate": "rotate the screen clockwise by 90 degrees", "screenrecord": "Records the emulator's display",
	"fold": "fold the device", "unfold": "unfold the device", "posture": "set the device posture",
	"multidisplay": "configure the multi-display", "icebox": "auto-snapshot on uncaught exceptions",
	"nodraw": "turn on/off NoDraw mode. (experimental)",
}

func (e *Emulator) avdCommands() []consoleCommand {
	snap := func(names, abstract, description string, run func(c *consoleClient, args string) bool) consoleCommand {
		return consoleCommand{names: names, abstract: abstract, description: description, run: run}
	}
	readOnly := func(c *consoleClient, what string) bool {
		if c.e.cfg.ReadOnly {
			// The real text ends in a bare "\n", which the console sends as CRLF.
			c.write("KO: Snapshot " + what + " is disabled because \"-read-only\" was specified\r\n")
			return true
		}
		return false
	}
	del := func(c *consoleClient, args string) bool {
		if readOnly(c, "delete") {
			return false
		}
		if args == "" {
			c.write("KO: Argument missing, try 'avd snapshot list <name>'\r\n")
			return false
		}
		if err := c.e.snapshots.Delete(args); err != nil {
			c.write("KO: " + err.Error() + "\r\n")
			return false
		}
		return true
	}
	snapshots := []consoleCommand{
		snap("list", "list available state snapshots", "'avd snapshot list' will show a list of all state snapshots that can be loaded\r\n",
			func(c *consoleClient, _ string) bool {
				l, err := c.e.snapshots.List()
				if err != nil {
					c.write("KO: " + err.Error() + "\r\n")
					return false
				}
				c.write(FormatSnapshotList(l))
				return true
			}),
		snap("save", "save state snapshot", "'avd snapshot save <name>' will save the current (run-time) state to a snapshot with the given name\r\n",
			func(c *consoleClient, args string) bool {
				if readOnly(c, "save") {
					return false
				}
				if args == "" {
					c.write("KO: Argument missing, try 'avd snapshot save <name>'\r\n")
					return false
				}
				if err := c.e.SaveSnapshot(args); err != nil {
					c.write("KO: " + err.Error() + "\r\n")
					return false
				}
				return true
			}),
		snap("load", "load state snapshot", "'avd snapshot load <name>' will load the state snapshot of the given name\r\n",
			func(c *consoleClient, args string) bool {
				if readOnly(c, "load") {
					return false
				}
				if args == "" {
					c.write("KO: Argument missing, try 'avd snapshot load <name>'\r\n")
					return false
				}
				if err := c.e.snapshots.Load(args); err != nil {
					c.write("KO: " + err.Error() + "\r\n")
					return false
				}
				return true
			}),
		snap("del", "delete state snapshot", "'avd snapshot del <name>' will delete the state snapshot with the given name\r\n", del),
		snap("delete", "delete state snapshot", "'avd snapshot delete <name>' will delete the state snapshot with the given name\r\n", del),
	}
	notSimulated := func(names, abstract string) consoleCommand {
		return consoleCommand{names: names, abstract: abstract, run: func(c *consoleClient, _ string) bool {
			c.write("KO: 'avd " + names + "' is not supported by the simulated emulator\r\n")
			return false
		}}
	}
	snapshots = append(snapshots,
		notSimulated("remap", "remap current snapshot RAM"),
		notSimulated("get", "print the name of the snapshot loaded into the current session"),
		notSimulated("pull", "print the name of the snapshot loaded into the current session"))
	// The vm_commands table of console.cpp, in its order.
	return []consoleCommand{
		{names: "stop", abstract: "stop the virtual device",
			description: "'avd stop' stops the virtual device immediately, use 'avd start' to continue execution\r\n",
			run: func(c *consoleClient, _ string) bool {
				c.write("KO: virtual device already stopped\r\n")
				return false
			}},
		{names: "start", abstract: "start/restart the virtual device",
			description: "'avd start' will start or continue the virtual device, use 'avd stop' to stop it\r\n",
			run: func(c *consoleClient, _ string) bool {
				c.write("KO: virtual device already running\r\n")
				return false
			}},
		{names: "status", abstract: "query virtual device status",
			description: "'avd status' will indicate whether the virtual device is running or not\r\n",
			run: func(c *consoleClient, _ string) bool {
				c.write("virtual device is running\r\n")
				return true
			}},
		notSimulated("heartbeat", "query the heart beat number of the guest system"),
		notSimulated("rewindaudio", "rewind the input audio to the beginning"),
		avdNameCommand,
		{names: "snapshot", abstract: "state snapshot commands",
			description: "allows you to save and restore the virtual device state in snapshots\r\n", sub: snapshots},
		notSimulated("pause", "pause the virtual device"),
		notSimulated("hostmicon", "activate the host audio input device"),
		notSimulated("hostmicoff", "deactivate the host audio input device"),
		notSimulated("resume", "resume the virtual device"),
		notSimulated("bugreport", "generate bug report info."),
		notSimulated("id", "query virtual device ID"),
		{names: "windowtype", abstract: "query virtual device headless or qtwindow",
			description: "'avd windowtype' will return either windowtype=headless or windowtype=qtwindow.\r\n",
			run: func(c *consoleClient, _ string) bool {
				c.write("windowtype=headless\r\n")
				return true
			}},
		notSimulated("path", "query AVD path"),
		notSimulated("discoverypath", "query AVD discovery path"),
		notSimulated("snapshotspath", "query AVD snapshots path"),
		notSimulated("snapshotpath", "query path to a particular AVD snapshot"),
	}
}

// AVDName is what `avd name` prints.
func (e *Emulator) AVDName() string {
	if e.cfg.AVDName == "" {
		return "<build>"
	}
	return e.cfg.AVDName
}

// SaveSnapshot saves the current state under name (`avd snapshot save`).
func (e *Emulator) SaveSnapshot(name string) error {
	return e.snapshots.Save(Snapshot{Name: name, Size: 75 << 20, Date: time.Now(), Clock: time.Since(e.started)})
}

// errKilled is the reason Done reports after the console's kill.
var errKilled = errors.New("killed by console command")

// readConsoleReply reads console output up to and including a line that is
// "OK" or starts with "KO:" (a helper for tests and clients).
func readConsoleReply(r *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := r.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			if err == io.EOF && b.Len() > 0 {
				return b.String(), nil
			}
			return b.String(), err
		}
		t := strings.TrimRight(line, "\r\n")
		if t == "OK" || strings.HasPrefix(t, "KO:") || strings.HasPrefix(t, "OK:") {
			return b.String(), nil
		}
	}
}
