package sim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// transport is one connection from the adb server to the simulated adbd: the
// CNXN handshake, then OPEN/OKAY/WRTE/CLSE stream multiplexing with adbd's flow
// control (one WRTE in flight per stream and direction).
type transport struct {
	conn net.Conn
	dev  Device
	log  zerolog.Logger
	// online is consulted when the host's CNXN arrives: while it returns false the
	// device does not answer, and the adb server lists it as "offline".
	online      func() bool
	slowReplies time.Duration
	// authorized is consulted before answering a CNXN: while it returns false
	// the device sends AUTH(TOKEN) instead (adbd with ro.adb.secure=1 and the
	// host's key not yet accepted). onPublicKey is called when the host, out of
	// keys to sign with, sends its public key (the device shows its prompt).
	authorized  func() bool
	onPublicKey func()
	// onOpen, when set, is told each service the host opens.
	onOpen func(service string)

	wmu  sync.Mutex // serializes writes to conn
	wbuf []byte

	mu      sync.Mutex
	streams map[uint32]*stream
	nextID  uint32
	maxData int // the smaller of the host's and our max payload
	cnxnOK  bool
	pending bool // a host CNXN is waiting for the device to come online

	ctx    context.Context
	cancel context.CancelFunc
}

func newTransport(parent context.Context, c net.Conn, dev Device, log zerolog.Logger, online func() bool, slow time.Duration) *transport {
	ctx, cancel := context.WithCancel(parent)
	return &transport{conn: c, dev: dev, log: log, online: online, slowReplies: slow,
		streams: map[uint32]*stream{}, maxData: 4096, ctx: ctx, cancel: cancel}
}

func (t *transport) send(m message) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.wbuf = appendMessage(t.wbuf[:0], m)
	_, err := t.conn.Write(t.wbuf)
	return err
}

// run reads messages until the connection ends; it closes every stream then.
func (t *transport) run() error {
	defer t.shutdown()
	go func() { <-t.ctx.Done(); t.conn.Close() }()
	for {
		m, err := readMessage(t.conn)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || t.ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := t.handle(m); err != nil {
			return err
		}
	}
}

func (t *transport) shutdown() {
	t.cancel()
	t.conn.Close()
	t.mu.Lock()
	ss := make([]*stream, 0, len(t.streams))
	for _, s := range t.streams {
		ss = append(ss, s)
	}
	t.mu.Unlock()
	for _, s := range ss {
		s.closeLocal(false)
	}
}

// answerCNXN sends the device's CNXN if a host CNXN is pending and the device is
// online. It is called on the host's CNXN and when an offline period ends.
func (t *transport) answerCNXN() error {
	t.mu.Lock()
	if !t.pending || (t.online != nil && !t.online()) {
		t.mu.Unlock()
		return nil
	}
	if t.authorized != nil && !t.authorized() {
		t.mu.Unlock()
		return t.sendAuthToken()
	}
	t.pending = false
	t.cnxnOK = true
	t.mu.Unlock()
	return t.send(message{cmd: cmdCNXN, arg0: protocolVersion, arg1: deviceMaxData, data: []byte(t.dev.Banner())})
}

func (t *transport) handle(m message) error {
	switch m.cmd {
	case cmdCNXN:
		hostMax := int(m.arg1)
		t.mu.Lock()
		t.maxData = min(max(hostMax, 4096), deviceMaxData)
		t.pending = true
		t.mu.Unlock()
		t.log.Debug().Str("host", string(bytes.TrimRight(m.data, "\x00"))).Int("maxdata", hostMax).Msg("host CNXN")
		return t.answerCNXN()
	case cmdAUTH:
		return t.handleAuth(m)
	case cmdSTLS, cmdSYNC:
		// We never send STLS, so a host has no reason to; ignore as adbd ignores
		// what it does not expect.
		return nil
	case cmdOPEN:
		t.mu.Lock()
		ready := t.cnxnOK
		t.mu.Unlock()
		if !ready || m.arg0 == 0 {
			return nil
		}
		t.open(m.arg0, string(bytes.TrimRight(m.data, "\x00")))
		return nil
	case cmdOKAY:
		if s := t.lookup(m.arg1); s != nil && s.remote == m.arg0 {
			select {
			case s.okay <- struct{}{}:
			default:
			}
		}
		return nil
	case cmdWRTE:
		s := t.lookup(m.arg1)
		if s == nil || s.remote != m.arg0 {
			return nil
		}
		select {
		case s.in <- m.data:
		case <-s.done:
		}
		return nil
	case cmdCLSE:
		// The host echoes our CLSE; ids we no longer know are ignored.
		if s := t.lookup(m.arg1); s != nil && (m.arg0 == 0 || s.remote == m.arg0) {
			s.closeLocal(false)
		}
		return nil
	}
	return nil
}

// AUTH message types (adb.h).
const (
	authToken        = 1
	authSignature    = 2
	authRSAPublicKey = 3
	authTokenSize    = 20
)

// sendAuthToken sends AUTH(TOKEN, 0, 20 random bytes), adbd's challenge.
func (t *transport) sendAuthToken() error {
	tok := make([]byte, authTokenSize)
	rand.Read(tok)
	return t.send(message{cmd: cmdAUTH, arg0: authToken, data: tok})
}

// handleAuth answers the host's AUTH messages while a CNXN is pending: a
// signature is refused with a new token until the key is accepted (adbd's
// answer to a signature it cannot verify); the public key raises the prompt.
func (t *transport) handleAuth(m message) error {
	t.mu.Lock()
	pending := t.pending
	t.mu.Unlock()
	if !pending {
		return nil
	}
	if t.authorized == nil || t.authorized() {
		return t.answerCNXN()
	}
	switch m.arg0 {
	case authSignature:
		return t.sendAuthToken()
	case authRSAPublicKey:
		t.log.Info().Msg("adb: host offered its public key; waiting for the user to accept it")
		if t.onPublicKey != nil {
			t.onPublicKey()
		}
	}
	return nil
}

func (t *transport) lookup(id uint32) *stream {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.streams[id]
}

// open starts the service named by an OPEN. A service the device does not have
// is refused with CLSE(0, remote), as adbd does.
func (t *transport) open(remote uint32, service string) {
	if t.onOpen != nil {
		t.onOpen(service)
	}
	h := t.resolve(service)
	if h == nil {
		t.log.Debug().Str("service", service).Msg("refused")
		_ = t.send(message{cmd: cmdCLSE, arg0: 0, arg1: remote})
		return
	}
	t.mu.Lock()
	t.nextID++
	if t.nextID == 0 {
		t.nextID = 1
	}
	s := &stream{t: t, local: t.nextID, remote: remote, maxData: t.maxData,
		in: make(chan []byte, 1), okay: make(chan struct{}, 1), done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(t.ctx)
	t.streams[s.local] = s
	t.mu.Unlock()
	t.log.Debug().Str("service", service).Uint32("local", s.local).Uint32("remote", remote).Msg("open")
	go func() {
		if t.slowReplies > 0 {
			select {
			case <-time.After(t.slowReplies):
			case <-s.ctx.Done():
				return
			}
		}
		if err := t.send(message{cmd: cmdOKAY, arg0: s.local, arg1: remote}); err != nil {
			s.closeLocal(false)
			return
		}
		h(s)
		s.Close()
	}()
}

// stream is one multiplexed stream as seen by a service: Read returns what the
// host wrote (OKAY-ing each WRTE once consumed, which is adbd's backpressure),
// Write sends WRTE messages no larger than the negotiated max payload and waits
// for the host's OKAY after each.
type stream struct {
	t             *transport
	local, remote uint32
	maxData       int
	in            chan []byte
	okay          chan struct{}
	done          chan struct{}
	once          sync.Once
	ctx           context.Context
	cancel        context.CancelFunc

	rbuf []byte
	wmu  sync.Mutex
}

func (s *stream) Read(p []byte) (int, error) {
	if len(s.rbuf) == 0 {
		select {
		case b := <-s.in:
			s.rbuf = b
		default:
			select {
			case b := <-s.in:
				s.rbuf = b
			case <-s.done:
				return 0, io.EOF
			}
		}
		if len(s.rbuf) == 0 {
			_ = s.t.send(message{cmd: cmdOKAY, arg0: s.local, arg1: s.remote})
			return 0, nil
		}
	}
	n := copy(p, s.rbuf)
	s.rbuf = s.rbuf[n:]
	if len(s.rbuf) == 0 {
		_ = s.t.send(message{cmd: cmdOKAY, arg0: s.local, arg1: s.remote})
	}
	return n, nil
}

func (s *stream) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	written := 0
	for len(p) > 0 {
		n := min(len(p), s.maxData)
		select {
		case <-s.done:
			return written, io.ErrClosedPipe
		default:
		}
		if err := s.t.send(message{cmd: cmdWRTE, arg0: s.local, arg1: s.remote, data: p[:n]}); err != nil {
			return written, err
		}
		select {
		case <-s.okay:
		case <-s.done:
			return written, io.ErrClosedPipe
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// Close ends the stream from the device side (CLSE to the host).
func (s *stream) Close() error { s.closeLocal(true); return nil }

func (s *stream) closeLocal(notify bool) {
	s.once.Do(func() {
		s.t.mu.Lock()
		delete(s.t.streams, s.local)
		s.t.mu.Unlock()
		s.cancel()
		close(s.done)
		if notify {
			_ = s.t.send(message{cmd: cmdCLSE, arg0: s.local, arg1: s.remote})
		}
	})
}

// handler serves one opened stream; the stream is closed when it returns.
type handler func(s *stream)

func (t *transport) resolve(service string) handler {
	switch {
	case strings.HasPrefix(service, "shell,") || strings.HasPrefix(service, "shell:"):
		args, cmd, _ := strings.Cut(service, ":")
		opts := strings.Split(args, ",")[1:]
		v2 := false
		for _, o := range opts {
			if o == "v2" {
				v2 = true
			}
		}
		if v2 {
			return func(s *stream) { t.shellV2(s, cmd) }
		}
		return func(s *stream) { t.shellRaw(s, cmd) }
	case strings.HasPrefix(service, "exec:"):
		cmd := strings.TrimPrefix(service, "exec:")
		return func(s *stream) { t.shellRaw(s, cmd) }
	case service == "sync:":
		return func(s *stream) { serveSync(s, t.dev, t.log) }
	case strings.HasPrefix(service, "tcp:"):
		portStr, _, _ := strings.Cut(strings.TrimPrefix(service, "tcp:"), ":")
		var port int
		if _, err := fmt.Sscanf(portStr, "%d", &port); err != nil || port <= 0 || port > 65535 {
			return nil
		}
		c, err := t.dev.DialTCP(port)
		if err != nil {
			return nil // connection refused: adbd fails the OPEN
		}
		return func(s *stream) { pipeTCP(s, c) }
	case strings.HasPrefix(service, "reboot:"):
		return func(s *stream) {}
	}
	return nil
}

// shellRaw serves `shell:CMD` and `exec:CMD`: raw bytes, stdout and stderr
// merged, no exit status (adbd's non-pty subprocess without the shell protocol).
// An empty command would be an interactive pty shell; we run one command per
// line read from the host instead.
func (t *transport) shellRaw(s *stream, cmd string) {
	if strings.TrimSpace(cmd) == "" {
		interactive(s, t.dev)
		return
	}
	w := newCoalescer(s)
	t.dev.Shell(s.ctx, cmd, s, w, w)
	w.Close()
}

// coalescer batches a service's small writes into few WRTEs: each WRTE costs
// a round trip through the adb server (we wait for its OKAY), so a short
// command's output and its exit packet travel in one message. Buffered bytes
// go out when the buffer reaches the stream's max payload, flushDelay after
// the first unflushed write (so streamed output such as logcat still flows),
// and on Close. It is safe for concurrent use (stdout and stderr share it).
type coalescer struct {
	mu    sync.Mutex
	w     io.Writer
	limit int
	buf   []byte
	timer *time.Timer
	err   error
}

const flushDelay = 2 * time.Millisecond

func newCoalescer(s *stream) *coalescer {
	return &coalescer{w: s, limit: s.maxData}
}

func (c *coalescer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	c.buf = append(c.buf, p...)
	if len(c.buf) >= c.limit {
		c.flushLocked()
	} else if c.timer == nil {
		c.timer = time.AfterFunc(flushDelay, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.timer = nil
			c.flushLocked()
		})
	}
	return len(p), c.err
}

func (c *coalescer) flushLocked() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if len(c.buf) == 0 || c.err != nil {
		return
	}
	_, c.err = c.w.Write(c.buf)
	c.buf = c.buf[:0]
}

// Close flushes what is left.
func (c *coalescer) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushLocked()
	return c.err
}

// Shell protocol v2 packet ids (adb shell_protocol.h).
const (
	shellStdin      = 0
	shellStdout     = 1
	shellStderr     = 2
	shellExit       = 3
	shellCloseStdin = 4
	shellWindowSize = 5
	// shellMaxData keeps packets within what a host's ShellProtocol buffer holds.
	shellMaxData = 16 * 1024
)

type packetWriter struct {
	mu *sync.Mutex
	s  io.Writer
	id byte
}

func (p packetWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for len(b) > 0 {
		k := min(len(b), shellMaxData)
		pkt := make([]byte, 5+k)
		pkt[0] = p.id
		binary.LittleEndian.PutUint32(pkt[1:], uint32(k))
		copy(pkt[5:], b[:k])
		if _, err := p.s.Write(pkt); err != nil {
			return n, err
		}
		n += k
		b = b[k:]
	}
	return n, nil
}

// shellV2 serves `shell,v2[,TERM=…][,raw|,pty]:CMD`: stdin, stdout, stderr and
// the exit status travel as [id u8][len u32 LE][data] packets.
func (t *transport) shellV2(s *stream, cmd string) {
	stdinR, stdinW := io.Pipe()
	go func() {
		defer stdinW.Close()
		var h [5]byte
		for {
			if _, err := io.ReadFull(s, h[:]); err != nil {
				return
			}
			n := binary.LittleEndian.Uint32(h[1:])
			if n > maxMessageData {
				return
			}
			data := make([]byte, n)
			if _, err := io.ReadFull(s, data); err != nil {
				return
			}
			switch h[0] {
			case shellStdin:
				if _, err := stdinW.Write(data); err != nil {
					// The command stopped reading; keep draining control packets.
					continue
				}
			case shellCloseStdin:
				stdinW.Close()
			case shellWindowSize:
			}
		}
	}()
	var mu sync.Mutex
	out := newCoalescer(s)
	stdout := packetWriter{mu: &mu, s: out, id: shellStdout}
	stderr := packetWriter{mu: &mu, s: out, id: shellStderr}
	var code int
	if strings.TrimSpace(cmd) == "" {
		interactive(readWriter{stdinR, stdout}, t.dev)
	} else {
		code = t.dev.Shell(s.ctx, cmd, stdinR, stdout, stderr)
	}
	stdinR.Close()
	packetWriter{mu: &mu, s: out, id: shellExit}.Write([]byte{byte(code)})
	out.Close()
}

type readWriter struct {
	io.Reader
	io.Writer
}

// interactive runs one command per line, the way a user types into `adb shell`.
func interactive(rw io.ReadWriter, dev Device) {
	prompt := func() { fmt.Fprint(rw, dev.Prompt()) }
	prompt()
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := rw.Read(b); err != nil {
			return
		}
		if b[0] != '\n' && b[0] != '\r' {
			line = append(line, b[0])
			continue
		}
		cmd := strings.TrimSpace(string(line))
		line = line[:0]
		if cmd == "exit" {
			return
		}
		if cmd != "" {
			dev.Shell(context.Background(), cmd, strings.NewReader(""), rw, rw)
		}
		prompt()
	}
}

// pipeTCP joins a stream to an in-device TCP connection (`tcp:PORT`).
func pipeTCP(s *stream, c net.Conn) {
	defer c.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(c, s)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			c.Close()
		}
		close(done)
	}()
	buf := make([]byte, 64*1024)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := s.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	s.Close()
	<-done
}
