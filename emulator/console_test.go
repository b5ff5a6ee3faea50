package emulator

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// capture reads fixtures/captures/<rel> (the real console's texts, CRLF).
func capture(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "fixtures", "captures", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeConsole serves one connection: banner, then for each command line the
// capture answers[cmd] (a file under fixtures/captures/console); unknown
// commands get unknown-command.txt. It records the lines it read.
func fakeConsole(t *testing.T, banner string, answers map[string]string) (int, *[]string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var got []string
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte(banner))
		r := bufio.NewReader(c)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			l = strings.TrimRight(l, "\r\n")
			got = append(got, l)
			a, ok := answers[l]
			if !ok {
				a = capture(t, "console/unknown-command.txt")
			}
			c.Write([]byte(a))
			if l == "kill" {
				return
			}
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, &got
}

func TestConsoleAuthAndCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	port, got := fakeConsole(t, capture(t, "console/banner-auth-required.txt"), map[string]string{
		"auth tok123":            capture(t, "console/auth-ok.txt"),
		"avd name":               capture(t, "console/avd-name.txt"),
		"avd snapshot list":      capture(t, "console/avd-snapshot-list.txt"),
		"avd snapshot save warm": capture(t, "console/avd-snapshot-save.txt"),
		"avd snapshot load ro":   capture(t, "console/avd-snapshot-save-read-only.txt"),
		"kill":                   capture(t, "console/kill.txt"),
	})
	c, err := DialConsole(ctx, port, "tok123")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if name, err := c.AVDName(ctx); err != nil || name != "Pixel8_API_34" {
		t.Fatalf("avd name = %q, %v", name, err)
	}
	snaps, err := c.SnapshotList(ctx)
	if err != nil || len(snaps) != 1 || snaps[0].Tag != "default_boot" || snaps[0].VMSize != "75M" || snaps[0].Date != "2026-09-09 11:41:45" {
		t.Fatalf("snapshot list = %+v, %v", snaps, err)
	}
	if err := c.SnapshotSave(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	err = c.SnapshotLoad(ctx, "ro")
	var ce *ConsoleError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, `"-read-only" was specified`) || agent.Classify(err).ID != agent.ErrProcess {
		t.Fatalf("KO answer: %v", err)
	}
	if _, err := c.Command(ctx, "frobnicate"); !errors.As(err, &ce) || ce.Reason != "unknown command, try 'help'" {
		t.Fatalf("unknown command: %v", err)
	}
	if err := c.Kill(ctx); err != nil {
		t.Fatalf("kill: %v", err)
	}
	want := []string{"auth tok123", "avd name", "avd snapshot list", "avd snapshot save warm", "avd snapshot load ro", "frobnicate", "kill"}
	if strings.Join(*got, "|") != strings.Join(want, "|") {
		t.Errorf("console read %q, want %q", *got, want)
	}
}

func TestConsoleAuthFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	banner := capture(t, "console/banner-auth-required.txt")
	port, _ := fakeConsole(t, banner, map[string]string{"auth wrong": capture(t, "console/auth-mismatch.txt")})
	if _, err := DialConsole(ctx, port, "wrong"); agent.Classify(err).ID != agent.ErrPermission || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("mismatched token: %v", err)
	}
	port, _ = fakeConsole(t, banner, nil)
	if _, err := DialConsole(ctx, port, ""); agent.Classify(err).ID != agent.ErrPermission {
		t.Errorf("no token: %v", err)
	}
	// Auth disabled (empty token file): no auth command is sent.
	port, got := fakeConsole(t, capture(t, "console/banner-auth-disabled.txt"), map[string]string{"avd name": capture(t, "console/avd-name.txt")})
	c, err := DialConsole(ctx, port, "unused")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.AVDName(ctx); err != nil || n != "Pixel8_API_34" || len(*got) != 1 {
		t.Errorf("auth disabled: %q %v, read %q", n, err, *got)
	}
	c.Close()
	// Nothing listening: network_error.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	free := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if _, err := DialConsole(ctx, free, "x"); agent.Classify(err).ID != agent.ErrNetwork {
		t.Errorf("closed port: %v", err)
	}
}

func TestReadToken(t *testing.T) {
	home := t.TempDir()
	if tok, err := ReadToken(home); tok != "" || err != nil {
		t.Fatalf("missing file: %q %v", tok, err)
	}
	os.WriteFile(filepath.Join(home, TokenFile), []byte("AbCdEfGh12345678"), 0o600)
	if tok, _ := ReadToken(home); tok != "AbCdEfGh12345678" {
		t.Fatalf("token %q", tok)
	}
}
