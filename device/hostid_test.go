package device

import (
	"context"
	"errors"
	"testing"
)

// HostID: one adb server reached by any loopback spelling is one machine;
// two ports (two adb servers, two simulated hosts on one machine) and a
// remote server are others; the same address always gives the same id; the
// machine id itself never shows. No traffic: only names are resolved.
func TestHostID(t *testing.T) {
	ctx := context.Background()
	id := func(addr string) string {
		t.Helper()
		h, err := HostID(ctx, addr)
		if err != nil {
			t.Fatalf("HostID(%s): %v", addr, err)
		}
		if len(h) != 12 {
			t.Fatalf("HostID(%s) = %q, want 12 hex digits", addr, h)
		}
		return h
	}
	a := id("127.0.0.1:15037")
	for _, same := range []string{"localhost:15037", "[::1]:15037", "127.0.0.1:15037"} {
		if got := id(same); got != a {
			t.Errorf("HostID(%s) = %s, want %s (one adb server)", same, got, a)
		}
	}
	b := id("127.0.0.1:15038")
	remote := id("192.0.2.10:15037") // TEST-NET-1: never dialed
	if a == b || a == remote || b == remote {
		t.Errorf("distinct adb servers share an id: %s %s %s", a, b, remote)
	}
	if id("192.0.2.10:15037") != remote {
		t.Error("a remote server's id changed between calls")
	}
	mid, err := machineID()
	if err != nil {
		t.Fatalf("no host identity (machine-id or hostname) here: %v", err)
	}
	if len(mid) != 32 || a == mid[:12] {
		t.Errorf("machine id %q shows in the host id", mid)
	}
	for _, bad := range []string{"", "127.0.0.1", "127.0.0.1:5037:1"} {
		if _, err := HostID(ctx, bad); err == nil {
			t.Errorf("HostID(%q) succeeded", bad)
		}
	}
}

// Without a machine id (a container) the hostname identifies the machine:
// two containers' local adb servers differ. With no distinctive hostname
// either, a clear error, not a shared id.
func TestHostIDWithoutMachineID(t *testing.T) {
	oldFiles, oldHost := machineIDFiles, hostname
	defer func() { machineIDFiles, hostname = oldFiles, oldHost }()
	machineIDFiles = []string{t.TempDir() + "/missing"}
	ids := map[string]string{}
	for _, h := range []string{"3f1c0ffee123", "9a8b7c6d5e4f"} {
		hostname = func() (string, error) { return h, nil }
		id, err := HostID(context.Background(), "127.0.0.1:15037")
		if err != nil {
			t.Fatalf("HostID on container %s: %v", h, err)
		}
		ids[h] = id
	}
	if ids["3f1c0ffee123"] == ids["9a8b7c6d5e4f"] {
		t.Errorf("two containers' local adb servers share the id %s", ids["3f1c0ffee123"])
	}
	for _, h := range []string{"", "localhost"} {
		hostname = func() (string, error) { return h, nil }
		if _, err := HostID(context.Background(), "127.0.0.1:15037"); !errors.Is(err, ErrNoHostID) {
			t.Errorf("HostID with hostname %q and no machine id: %v, want ErrNoHostID", h, err)
		}
	}
}

// $SCREENGRAPH_MACHINE_ID stands in for the machine id: two values are two
// machines (two containers on one host, or a test's two hosts).
func TestHostIDMachineIDEnv(t *testing.T) {
	ids := map[string]bool{}
	for _, v := range []string{"0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"} {
		t.Setenv(MachineIDEnv, v)
		id, err := HostID(context.Background(), "127.0.0.1:15037")
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	if len(ids) != 2 {
		t.Errorf("two machine ids gave one host id: %v", ids)
	}
}
