package adb

import (
	"net"
	"os"
	"syscall"
	"testing"
)

// A dial that fails because this process (EMFILE) or the host (ENFILE) is
// out of descriptors is resource_exhausted, retryable: not a network error
// (the adb server and the device are fine).
func TestClassifyOutOfDescriptors(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		err := classify(nil, "devices", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", errno)})
		e, ok := err.(*Error)
		if !ok || e.ID != IDResourceExhausted || !e.Retryable {
			t.Errorf("%v: got %#v", errno, err)
		}
	}
	if e := classify(nil, "devices", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}).(*Error); e.ID != IDNetworkError {
		t.Errorf("ECONNREFUSED: %v", e)
	}
}
