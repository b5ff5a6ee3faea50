package httpapi

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"github.com/screengraph/screengraph-agent/agent"
)

// CodeOpenListen is the error code of serve refusing to listen beyond
// loopback while the store holds no API token.
const CodeOpenListen = "listen_without_tokens"

// Listen is one address serve listens on, with the flag that set it.
type Listen struct {
	Flag string // "--listen", "--nats-listen"
	Addr string // HOST:PORT
}

// Loopback reports whether addr (HOST:PORT) only ever binds loopback: an IP
// literal that is loopback, or a name every address of which is loopback
// (looked up). An empty host or an unspecified address (0.0.0.0, ::) binds
// every interface: false. The error is a failed lookup or a malformed addr.
func Loopback(ctx context.Context, addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "" {
		return false, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().IsLoopback(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return false, err
	}
	for _, ip := range ips {
		if !ip.Unmap().IsLoopback() {
			return false, nil
		}
	}
	return len(ips) > 0, nil
}

// CheckExposure refuses listening beyond loopback without authentication:
// it returns the listens that are not loopback (Loopback) and, when there
// are any, the store holds no API token (hasTokens) and insecure
// (--insecure-no-auth) is false, an invalid_request_error (code
// CodeOpenListen) naming the first such flag. hasTokens is asked only when
// some listen is not loopback. An address that cannot be resolved is
// refused the same way (it cannot be shown to be loopback).
func CheckExposure(ctx context.Context, ls []Listen, hasTokens func(context.Context) (bool, error), insecure bool) ([]Listen, error) {
	var open []Listen
	for _, l := range ls {
		lo, err := Loopback(ctx, l.Addr)
		if err != nil {
			return nil, &agent.Error{ID: agent.ErrInvalidRequest, Code: CodeOpenListen,
				Msg: l.Flag + " " + l.Addr + ": cannot tell whether it is a loopback address", Err: err}
		}
		if !lo {
			open = append(open, l)
		}
	}
	if len(open) == 0 || insecure {
		return open, nil
	}
	has, err := hasTokens(ctx)
	if err != nil {
		return open, agent.Wrap(agent.ErrProcess, err, "reading whether the store holds API tokens")
	}
	if has {
		return open, nil
	}
	names := make([]string, len(open))
	for i, l := range open {
		names[i] = l.Flag + " " + l.Addr
	}
	return open, &agent.Error{ID: agent.ErrInvalidRequest, Code: CodeOpenListen, Msg: strings.Join(names, ", ") +
		": not a loopback address, and the store holds no API token: anyone who reaches it could submit and read runs. " +
		"Create a token first (screengraph-agent token create --admin --tenant ops), listen on 127.0.0.1, or pass --insecure-no-auth"}
}
