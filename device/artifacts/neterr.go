package artifacts

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// netFailure is a transport error told without the host's network layout:
// its text says what failed (the name lookup of a host, a connection to
// it, a read) but not the DNS resolver's address, the addresses a name
// resolved to or the daemon's own; its chain keeps the original error for
// errors.Is/As (retry and exhaustion classification).
type netFailure struct {
	msg string
	err error
}

func (e *netFailure) Error() string { return e.msg }
func (e *netFailure) Unwrap() error { return e.err }

// quietNet returns err as a netFailure when it holds a *net.DNSError or a
// *net.OpError (whose texts name "on 127.0.0.53:53", "dial tcp
// 10.0.0.5:443", "read tcp 10.0.0.2:41234->…"), err itself otherwise. host
// is the reference's host as the tenant wrote it.
func quietNet(err error, host string) error {
	if err == nil {
		return nil
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		what := "failed"
		switch {
		case dns.IsNotFound:
			what = "found no such host"
		case dns.IsTimeout:
			what = "timed out"
		case dns.IsTemporary:
			what = "failed temporarily"
		}
		return &netFailure{msg: "the name lookup of " + host + " " + what, err: err}
	}
	var op *net.OpError
	if !errors.As(err, &op) {
		return err
	}
	what := "failed"
	var errno syscall.Errno
	switch {
	case op.Timeout():
		what = "timed out"
	case errors.As(op.Err, &errno):
		what = errno.Error()
	case errors.Is(op.Err, os.ErrDeadlineExceeded):
		what = "timed out"
	}
	switch op.Op {
	case "dial":
		return &netFailure{msg: "connecting to " + host + ": " + what, err: err}
	case "read", "write":
		return &netFailure{msg: op.Op + " from " + host + ": " + what, err: err}
	}
	return &netFailure{msg: op.Op + " " + host + ": " + what, err: err}
}
