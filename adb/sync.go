package adb

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"time"
)

// SyncMaxChunk is the largest DATA payload of the sync protocol (adb SYNC_DATA_MAX).
const SyncMaxChunk = 64 * 1024

// Progress receives bytes done and the total (-1 when unknown) during a transfer.
// It is called from the transferring goroutine after every chunk; keep it cheap.
type Progress func(done, total int64)

// FileInfo is a remote file's metadata from STAT/STA2 or LIST.
type FileInfo struct {
	Name    string // base name (LIST) or the path asked (Stat)
	Mode    fs.FileMode
	Size    int64
	ModTime time.Time
}

// IsDir reports a directory (S_IFDIR in the raw mode).
func (f FileInfo) IsDir() bool { return f.Mode.IsDir() }

// syncConn is a sync: service stream.
type syncConn struct{ *conn }

func (c *Client) openSync(ctx context.Context, op, serial string) (*syncConn, error) {
	cn, err := c.openService(ctx, op, serial, "sync:")
	if err != nil {
		return nil, err
	}
	return &syncConn{cn}, nil
}

// sendReq writes ID + u32 LE length + payload.
func (s *syncConn) sendReq(id string, payload []byte) error {
	b := make([]byte, 8+len(payload))
	copy(b, id)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(payload)))
	copy(b[8:], payload)
	return s.write(b)
}

func (s *syncConn) readHdr() (string, uint32, error) {
	var h [8]byte
	if _, err := io.ReadFull(s.r, h[:]); err != nil {
		return "", 0, s.fail(err)
	}
	return string(h[:4]), binary.LittleEndian.Uint32(h[4:]), nil
}

// readFail reads the FAIL message of length n.
func (s *syncConn) readFail(n uint32) error {
	if n > 64*1024 {
		return protocolError(s.op, "FAIL message too long (%d)", n)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(s.r, msg); err != nil {
		return s.fail(err)
	}
	return &Error{ID: IDProcessError, Msg: s.op + ": " + string(msg)}
}

func (s *syncConn) quit() { _ = s.sendReq("QUIT", nil) }

// Stat returns the remote file's metadata (STA2 when the device has stat_v2, which
// carries 64-bit sizes; STAT otherwise). A missing file is a process_error wrapping
// fs.ErrNotExist.
func (c *Client) Stat(ctx context.Context, serial, remote string) (FileInfo, error) {
	f, err := c.cachedFeatures(ctx, serial)
	if err != nil {
		return FileInfo{}, err
	}
	s, err := c.openSync(ctx, "stat", serial)
	if err != nil {
		return FileInfo{}, err
	}
	defer s.Close()
	defer s.quit()
	return s.stat(remote, f.Has("stat_v2"))
}

func (s *syncConn) stat(remote string, v2 bool) (FileInfo, error) {
	id := "STAT"
	if v2 {
		id = "STA2"
	}
	if err := s.sendReq(id, []byte(remote)); err != nil {
		return FileInfo{}, err
	}
	if !v2 {
		// STAT reply: "STAT" mode u32, size u32, mtime u32; all zero = not found.
		var b [16]byte
		if _, err := io.ReadFull(s.r, b[:]); err != nil {
			return FileInfo{}, s.fail(err)
		}
		if string(b[:4]) != "STAT" {
			return FileInfo{}, protocolError(s.op, "unexpected %q", b[:4])
		}
		mode := binary.LittleEndian.Uint32(b[4:])
		if mode == 0 {
			return FileInfo{}, &Error{ID: IDProcessError, Msg: s.op + ": " + remote + ": no such file", Err: fs.ErrNotExist}
		}
		return FileInfo{Name: remote, Mode: unixMode(mode), Size: int64(binary.LittleEndian.Uint32(b[8:])),
			ModTime: time.Unix(int64(binary.LittleEndian.Uint32(b[12:])), 0)}, nil
	}
	// STA2 reply (72 bytes): id, error u32, dev u64, ino u64, mode u32, nlink u32,
	// uid u32, gid u32, size u64, atime i64, mtime i64, ctime i64.
	var b [72]byte
	if _, err := io.ReadFull(s.r, b[:]); err != nil {
		return FileInfo{}, s.fail(err)
	}
	if string(b[:4]) != "STA2" {
		return FileInfo{}, protocolError(s.op, "unexpected %q", b[:4])
	}
	if errno := binary.LittleEndian.Uint32(b[4:]); errno != 0 {
		e := &Error{ID: IDProcessError, Msg: s.op + ": " + remote + ": errno " + strconv.Itoa(int(errno))}
		if errno == 2 { // ENOENT
			e.Err = fs.ErrNotExist
		}
		return FileInfo{}, e
	}
	return FileInfo{Name: remote, Mode: unixMode(binary.LittleEndian.Uint32(b[24:])),
		Size:    int64(binary.LittleEndian.Uint64(b[40:])),
		ModTime: time.Unix(int64(binary.LittleEndian.Uint64(b[56:])), 0)}, nil
}

// unixMode converts st_mode to fs.FileMode (type bits + permissions).
func unixMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & 0o170000 {
	case 0o040000:
		mode |= fs.ModeDir
	case 0o120000:
		mode |= fs.ModeSymlink
	case 0o020000:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case 0o060000:
		mode |= fs.ModeDevice
	case 0o010000:
		mode |= fs.ModeNamedPipe
	case 0o140000:
		mode |= fs.ModeSocket
	}
	return mode
}

// List returns the entries of a remote directory (LIST → DENT… DONE), "." and ".."
// included as the device sends them.
func (c *Client) List(ctx context.Context, serial, dir string) ([]FileInfo, error) {
	s, err := c.openSync(ctx, "list", serial)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	defer s.quit()
	if err := s.sendReq("LIST", []byte(dir)); err != nil {
		return nil, err
	}
	var out []FileInfo
	for {
		// DENT/DONE: id, mode u32, size u32, mtime u32, namelen u32, name.
		var b [20]byte
		if _, err := io.ReadFull(s.r, b[:]); err != nil {
			return nil, s.fail(err)
		}
		switch string(b[:4]) {
		case "DONE":
			return out, nil
		case "DENT":
		default:
			return nil, protocolError("list", "unexpected %q", b[:4])
		}
		n := binary.LittleEndian.Uint32(b[16:])
		if n > 4096 {
			return nil, protocolError("list", "name too long (%d)", n)
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(s.r, name); err != nil {
			return nil, s.fail(err)
		}
		out = append(out, FileInfo{Name: string(name), Mode: unixMode(binary.LittleEndian.Uint32(b[4:])),
			Size:    int64(binary.LittleEndian.Uint32(b[8:])),
			ModTime: time.Unix(int64(binary.LittleEndian.Uint32(b[12:])), 0)})
	}
}

// Push writes size bytes from r to the device file remote (SEND "remote,mode",
// DATA chunks of at most 64 KiB, DONE mtime; the device answers OKAY or FAIL).
// size is only used for progress (-1 when unknown). Errors from the device (e.g.
// "Read-only file system") are process_error.
func (c *Client) Push(ctx context.Context, serial string, r io.Reader, size int64, remote string,
	mode fs.FileMode, mtime time.Time, progress Progress) error {
	s, err := c.openSync(ctx, "push", serial)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.sendReq("SEND", []byte(remote+","+strconv.FormatUint(uint64(mode.Perm()|0o100000), 10))); err != nil {
		return err
	}
	// One buffer holds header + payload so each chunk is a single write.
	buf := make([]byte, 8+SyncMaxChunk)
	copy(buf, "DATA")
	var done int64
	for {
		n, rerr := io.ReadFull(r, buf[8:])
		if n > 0 {
			binary.LittleEndian.PutUint32(buf[4:], uint32(n))
			if err := s.write(buf[:8+n]); err != nil {
				return s.pushFailure(err)
			}
			done += int64(n)
			if progress != nil {
				progress(done, size)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return &Error{ID: IDProcessError, Msg: "push: reading local data", Err: rerr}
		}
	}
	var d [8]byte
	copy(d[:], "DONE")
	binary.LittleEndian.PutUint32(d[4:], uint32(mtime.Unix()))
	if err := s.write(d[:]); err != nil {
		return s.pushFailure(err)
	}
	id, n, err := s.readHdr()
	if err != nil {
		return err
	}
	switch id {
	case "OKAY":
		s.quit()
		return nil
	case "FAIL":
		return s.readFail(n)
	}
	return protocolError("push", "unexpected %q", id)
}

// pushFailure: the device may have answered FAIL (e.g. read-only path) and closed
// while we were still writing; prefer its message to the broken pipe.
func (s *syncConn) pushFailure(werr error) error {
	_ = s.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if id, n, err := s.readHdr(); err == nil && id == "FAIL" {
		return s.readFail(n)
	}
	return werr
}

// PushFile pushes the local file to remote with its permissions and mtime.
func (c *Client) PushFile(ctx context.Context, serial, local, remote string, progress Progress) error {
	f, err := os.Open(local)
	if err != nil {
		return &Error{ID: IDProcessError, Msg: "push: open local file", Err: err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return &Error{ID: IDProcessError, Msg: "push: stat local file", Err: err}
	}
	return c.Push(ctx, serial, f, st.Size(), remote, st.Mode().Perm(), st.ModTime(), progress)
}

// Pull copies the device file remote into w and returns the bytes written. The
// total for progress comes from a STAT/STA2 on the same sync stream. A missing
// file is a process_error with the device's message (e.g. "No such file or
// directory") wrapping fs.ErrNotExist when the stat says so.
func (c *Client) Pull(ctx context.Context, serial, remote string, w io.Writer, progress Progress) (int64, error) {
	f, err := c.cachedFeatures(ctx, serial)
	if err != nil {
		return 0, err
	}
	s, err := c.openSync(ctx, "pull", serial)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	total := int64(-1)
	if progress != nil {
		st, err := s.stat(remote, f.Has("stat_v2"))
		if err != nil {
			return 0, err
		}
		total = st.Size
	}
	if err := s.sendReq("RECV", []byte(remote)); err != nil {
		return 0, err
	}
	return s.recv(w, total, progress)
}

// recv reads the answer to a RECV into w: DATA chunks (at most
// SyncMaxChunk bytes each) up to DONE, or FAIL. It returns the bytes
// written; progress, when not nil, gets them with total after each chunk.
func (s *syncConn) recv(w io.Writer, total int64, progress Progress) (int64, error) {
	buf := make([]byte, SyncMaxChunk)
	var done int64
	for {
		id, n, err := s.readHdr()
		if err != nil {
			return done, err
		}
		switch id {
		case "DATA":
			if err := s.recvData(w, buf, n); err != nil {
				return done, err
			}
			done += int64(n)
			if progress != nil {
				progress(done, total)
			}
		case "DONE":
			s.quit()
			return done, nil
		case "FAIL":
			return done, s.recvFail(n)
		default:
			return done, protocolError("pull", "unexpected %q", id)
		}
	}
}

// recvData copies one DATA chunk of n bytes to w through buf.
func (s *syncConn) recvData(w io.Writer, buf []byte, n uint32) error {
	if n > SyncMaxChunk {
		return protocolError("pull", "DATA chunk of %d bytes", n)
	}
	if _, err := io.ReadFull(s.r, buf[:n]); err != nil {
		return s.fail(err)
	}
	if _, err := w.Write(buf[:n]); err != nil {
		return &Error{ID: IDProcessError, Msg: "pull: writing local data", Err: err}
	}
	return nil
}

// recvFail reads a FAIL's message of n bytes: a process_error, wrapping
// fs.ErrNotExist when the device says "No such file".
func (s *syncConn) recvFail(n uint32) error {
	ferr := s.readFail(n)
	var e *Error
	if errors.As(ferr, &e) && containsFold(e.Msg, "No such file") {
		e.Err = fs.ErrNotExist
	}
	return ferr
}

// PullFile pulls remote into the local path (created or truncated).
func (c *Client) PullFile(ctx context.Context, serial, remote, local string, progress Progress) (int64, error) {
	f, err := os.Create(local)
	if err != nil {
		return 0, &Error{ID: IDProcessError, Msg: "pull: create local file", Err: err}
	}
	n, err := c.Pull(ctx, serial, remote, f, progress)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = &Error{ID: IDProcessError, Msg: "pull: close local file", Err: cerr}
	}
	return n, err
}
