package artifacts

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// The dial-time rule judges the IPv4 address an IPv6 address embeds
// (IPv4-compatible, 6to4, Teredo server and client), refuses site-local and
// IPv4-compatible addresses while tenanted, and leaves public ones alone.
func TestDeniedRuleEmbeddedIPv4(t *testing.T) {
	for _, c := range []struct {
		addr               string
		tenanted, untenant bool // refused with tenants, without
	}{
		{"::7f00:1", true, false},                              // IPv4-compatible 127.0.0.1
		{"::a9fe:a9fe", true, true},                            // IPv4-compatible 169.254.169.254
		{"::808:808", true, false},                             // IPv4-compatible, public: deprecated anyway
		{"::ffff:10.0.0.1", true, false},                       // IPv4-mapped private
		{"2002:7f00:1::1", true, false},                        // 6to4 of 127.0.0.1
		{"2002:a9fe:a9fe::1", true, true},                      // 6to4 of the metadata address
		{"2002:c0a8:101::1", true, false},                      // 6to4 of 192.168.1.1
		{"2002:808:808::1", false, false},                      // 6to4 of 8.8.8.8
		{"2001:0:a00:1::1", true, false},                       // Teredo, server 10.0.0.1
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", true, false},  // Teredo, client 127.0.0.1 (inverted)
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", false, false}, // Teredo, server 65.54.227.120, client 192.0.2.45
		{"fec0::1", true, false},                               // site-local
		{"64:ff9b::7f00:1", true, false},                       // NAT64 of 127.0.0.1
		{"2606:4700::1111", false, false},                      // public
	} {
		ip := netip.MustParseAddr(c.addr)
		if got := deniedRule(ip, true) != ""; got != c.tenanted {
			t.Errorf("%s tenanted: refused %v (%q), want %v", c.addr, got, deniedRule(ip, true), c.tenanted)
		}
		if got := deniedRule(ip, false) != ""; got != c.untenant {
			t.Errorf("%s without tenants: refused %v (%q), want %v", c.addr, got, deniedRule(ip, false), c.untenant)
		}
	}
}

// While tenanted the host's own interface addresses are refused at dial
// time unless --artifact-allow-cidr lists them; the refusal names the rule,
// not the address.
func TestControlRefusesOwnAddresses(t *testing.T) {
	own := netip.MustParseAddr("203.0.113.7")
	defer func(f func() ([]netip.Addr, error)) { interfaceAddrs = f }(interfaceAddrs)
	interfaceAddrs = func() ([]netip.Addr, error) { return []netip.Addr{own}, nil }
	ctx := context.Background()
	var p Policy
	err := p.control(true)(ctx, "tcp4", "203.0.113.7:443", nil)
	if d := destinationError(err); d == nil || d.Code != CodeDestination || !strings.Contains(d.Msg, "this host's own addresses") || strings.Contains(d.Msg, "203.0.113.7") {
		t.Errorf("own address: %v", err)
	}
	if err := p.control(false)(ctx, "tcp4", "203.0.113.7:443", nil); err != nil {
		t.Errorf("own address without tenants: %v", err)
	}
	if err := p.control(true)(ctx, "tcp4", "203.0.113.8:443", nil); err != nil {
		t.Errorf("another public address: %v", err)
	}
	allowed := Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}
	if err := allowed.control(true)(ctx, "tcp4", "203.0.113.7:443", nil); err != nil {
		t.Errorf("own address listed in --artifact-allow-cidr: %v", err)
	}
	interfaceAddrs = func() ([]netip.Addr, error) { return nil, errors.New("no netlink") }
	if err := p.control(true)(ctx, "tcp4", "203.0.113.8:443", nil); destinationError(err) == nil {
		t.Errorf("interfaces unreadable: %v, want refused", err)
	}
}

// A fetch error a tenant sees says what failed, never the resolver's
// address, the addresses a name resolved to or the daemon's own.
func TestFetchErrorsHideNetworkLayout(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now: connection refused
	layout := []string{"127.0.0.1", "::1", "[::1]"}
	check := func(what string, err error, want string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		msg := err.Error()
		for _, l := range layout {
			if strings.Contains(msg, l) {
				t.Errorf("%s names %s: %s", what, l, msg)
			}
		}
		if !strings.Contains(msg, want) {
			t.Errorf("%s: %q does not say %q", what, msg, want)
		}
	}
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	f := newFetcher(t, Options{Policy: Policy{Tenanted: tenanted, AllowCIDRs: loop}})
	_, err = f.Fetch(ctx, "https://localhost:"+strconv.Itoa(port)+"/app.apk", nil)
	check("a refused connection", err, "connecting to localhost: connection refused")
	strict := newFetcher(t, Options{Policy: Policy{Tenanted: tenanted}})
	_, err = strict.Fetch(ctx, "https://localhost:"+strconv.Itoa(port)+"/app.apk", nil)
	check("a refused destination", err, "loopback addresses are not fetched")

	// A lookup failure names the resolver (Go's "lookup x on 10.0.0.53:53").
	dns := &url.Error{Op: "Get", URL: "https://artifacts.example/app.apk", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{Err: "no such host", Name: "artifacts.example", Server: "10.0.0.53:53", IsNotFound: true}}}
	if !strings.Contains(dns.Error(), "10.0.0.53") {
		t.Fatal("the test's DNS error does not name its resolver")
	}
	dns.Err = quietNet(dns.Err, "artifacts.example")
	if msg := dns.Error(); strings.Contains(msg, "10.0.0.53") || !strings.Contains(msg, "the name lookup of artifacts.example found no such host") {
		t.Errorf("lookup failure: %s", msg)
	}
	var de *net.DNSError
	if !errors.As(dns, &de) {
		t.Error("the DNS error left the chain")
	}
	reset := &net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 41234},
		Addr: &net.TCPAddr{IP: net.IPv4(10, 9, 9, 9), Port: 443}, Err: errors.New("connection reset by peer")}
	if msg := quietNet(reset, "h").Error(); strings.Contains(msg, "10.0.0.2") || strings.Contains(msg, "10.9.9.9") {
		t.Errorf("read failure: %s", msg)
	}
}
