package emulator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// TokenFile is the console auth token file in the user's home directory.
const TokenFile = ".emulator_console_auth_token"

// DefaultConsoleTimeout bounds a console exchange whose context has no deadline.
const DefaultConsoleTimeout = 5 * time.Second

// Console is a session on an emulator console (TCP 127.0.0.1:P, the P of
// emulator-P). The console writes its banner, then answers each command line
// with its output lines and a final "OK" (or "OK: text"), or one "KO: reason"
// line; lines end in CRLF (developer.android.com "Send emulator console
// commands"; fixtures/captures/console).
type Console struct {
	Port int
	conn net.Conn
	r    *bufio.Reader
}

// ConsoleError is a console "KO: ..." answer.
type ConsoleError struct {
	Command, Reason string
}

func (e *ConsoleError) Error() string {
	return fmt.Sprintf("console %q: KO: %s", e.Command, e.Reason)
}

// ReadToken reads the console auth token from home/.emulator_console_auth_token
// (whitespace trimmed). A missing file gives "" and no error: the emulator
// creates it at start-up, and an empty token turns auth off.
func ReadToken(home string) (string, error) {
	b, err := os.ReadFile(filepath.Join(home, TokenFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// DialConsole connects to the console on port, reads the banner and, when the
// banner asks for it, authenticates with token. Errors: network_error (nothing
// listens, or the connection broke), permission_error (auth refused or no
// token while one is required).
func DialConsole(ctx context.Context, port int, token string) (*Console, error) {
	var d net.Dialer
	dctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, agent.Wrap(agent.ErrNetwork, err, "emulator console on port %d", port)
	}
	c := &Console{Port: port, conn: conn, r: bufio.NewReader(conn)}
	stop := c.deadline(dctx)
	banner, err := c.readReply("(banner)")
	stop()
	if err != nil {
		conn.Close()
		return nil, err
	}
	if !strings.Contains(strings.Join(banner, "\n"), "Authentication required") {
		return c, nil
	}
	if token == "" {
		conn.Close()
		return nil, &agent.Error{ID: agent.ErrPermission, Msg: fmt.Sprintf("emulator console %d requires auth and ~/%s is missing or empty", port, TokenFile)}
	}
	if _, err := c.Command(ctx, "auth "+token); err != nil {
		conn.Close()
		var ce *ConsoleError
		if errors.As(err, &ce) {
			return nil, &agent.Error{ID: agent.ErrPermission, Msg: fmt.Sprintf("emulator console %d refused the token of ~/%s: %s", port, TokenFile, ce.Reason)}
		}
		return nil, err
	}
	return c, nil
}

// Close ends the session (without `quit`).
func (c *Console) Close() error { return c.conn.Close() }

// Command sends one command line and returns its output lines (without the
// final OK). A "KO: reason" answer is a *ConsoleError wrapped as
// process_error; a broken connection network_error.
func (c *Console) Command(ctx context.Context, line string) ([]string, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	stop := c.deadline(ctx)
	defer stop()
	if _, err := io.WriteString(c.conn, line+"\r\n"); err != nil {
		return nil, agent.Wrap(agent.ErrNetwork, err, "emulator console %d: %s", c.Port, line)
	}
	return c.readReply(line)
}

// readReply reads lines up to "OK", "OK: ..." (included as the last line when
// it carries text) or "KO: ...".
func (c *Console) readReply(cmd string) ([]string, error) {
	var lines []string
	for {
		l, err := c.r.ReadString('\n')
		l = strings.TrimRight(l, "\r\n")
		if err != nil {
			if l != "" {
				lines = append(lines, l)
			}
			if err == io.EOF && len(lines) > 0 && strings.HasPrefix(lines[len(lines)-1], "OK") {
				return lines, nil
			}
			return lines, agent.Wrap(agent.ErrNetwork, err, "emulator console %d: %s (read so far %q)", c.Port, cmd, lines)
		}
		switch {
		case l == "OK":
			return lines, nil
		case strings.HasPrefix(l, "OK:"):
			return append(lines, l), nil
		case strings.HasPrefix(l, "KO"):
			reason := strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(l, "KO"), ":"))
			return lines, &agent.Error{ID: agent.ErrProcess, Msg: fmt.Sprintf("emulator console %d", c.Port), Err: &ConsoleError{Command: cmd, Reason: reason}}
		}
		lines = append(lines, l)
	}
}

// deadline applies ctx's deadline to the connection and closes it when ctx is
// canceled; the returned func undoes both.
func (c *Console) deadline(ctx context.Context) func() {
	if d, ok := ctx.Deadline(); ok {
		c.conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		c.conn.SetDeadline(time.Time{})
	}
}

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultConsoleTimeout)
}

// AVDName is `avd name`: the AVD this emulator runs.
func (c *Console) AVDName(ctx context.Context) (string, error) {
	ls, err := c.Command(ctx, "avd name")
	if err != nil {
		return "", err
	}
	if len(ls) == 0 {
		return "", agent.Errorf(agent.ErrProcess, "emulator console %d: `avd name` printed no name", c.Port)
	}
	return strings.TrimSpace(ls[0]), nil
}

// Snapshot is one row of `avd snapshot list`.
type Snapshot struct {
	ID, Tag, VMSize, Date, VMClock string
}

// SnapshotList is `avd snapshot list`.
func (c *Console) SnapshotList(ctx context.Context) ([]Snapshot, error) {
	ls, err := c.Command(ctx, "avd snapshot list")
	if err != nil {
		return nil, err
	}
	return ParseSnapshotList(ls), nil
}

// ParseSnapshotList reads the rows of `avd snapshot list` (QEMU's
// "List of snapshots present on all disks:" table: ID, TAG, VM SIZE, DATE
// (date and time), VM CLOCK).
func ParseSnapshotList(lines []string) []Snapshot {
	var out []Snapshot
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 2 || strings.HasPrefix(l, "List of") || f[0] == "ID" {
			continue
		}
		s := Snapshot{ID: f[0], Tag: f[1]}
		if len(f) >= 6 {
			s.VMSize, s.Date, s.VMClock = f[2], f[3]+" "+f[4], f[5]
		}
		out = append(out, s)
	}
	return out
}

// SnapshotSave is `avd snapshot save NAME`.
func (c *Console) SnapshotSave(ctx context.Context, name string) error {
	_, err := c.Command(ctx, "avd snapshot save "+name)
	return err
}

// SnapshotLoad is `avd snapshot load NAME`.
func (c *Console) SnapshotLoad(ctx context.Context, name string) error {
	_, err := c.Command(ctx, "avd snapshot load "+name)
	return err
}

// Kill is `kill`: the emulator answers "OK: killing emulator, bye bye" and exits.
func (c *Console) Kill(ctx context.Context) error {
	_, err := c.Command(ctx, "kill")
	return err
}
