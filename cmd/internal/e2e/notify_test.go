package e2e

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// serve tells systemd (Type=notify) it is ready once its API answers.
func TestServeNotifiesSystemdReady(t *testing.T) {
	dir, err := os.MkdirTemp("", "sd-") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	srv := simtest.StartADBServer(t)
	startDaemonEnv(t, srv, []string{"NOTIFY_SOCKET=" + sock})
	// startDaemonEnv returned after /healthz answered: the datagram was sent.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("notify socket: %q %v", buf[:n], err)
	}
}
