package simtest

import (
	"net"
	"os"
	"slices"
	"testing"
)

// The old adb server is found by its listening socket and process: a
// listener of this test process is listed with its inode and owned by this
// process, and a closed one is not listed.
func TestListenInodesAndOwners(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	inodes := listenInodes(port)
	if len(inodes) != 1 {
		t.Fatalf("listening sockets on %d: %v, want one", port, inodes)
	}
	if pids := socketOwners(inodes); !slices.Contains(pids, os.Getpid()) {
		t.Fatalf("owners %v, want this process %d", pids, os.Getpid())
	}
	ln.Close()
	if left := listenInodes(port); len(left) != 0 {
		t.Fatalf("a closed listener is still listed: %v", left)
	}
}

// Restart replaces the server: the old listening socket is gone and a
// server answers on the same port.
func TestADBServerRestart(t *testing.T) {
	s := StartADBServer(t)
	old := listenInodes(s.Port)
	if len(old) == 0 {
		t.Fatal("no adb server listening")
	}
	s.Restart(t)
	now := listenInodes(s.Port)
	for ino := range old {
		if now[ino] {
			t.Fatalf("the old server's socket %s still listens", ino)
		}
	}
	if _, errOut, code := s.Run(t, "devices"); code != 0 {
		t.Fatalf("adb devices after the restart: exit %d %s", code, errOut)
	}
}
