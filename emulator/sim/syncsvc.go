package sim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Sync protocol ids (adb file_sync_protocol.h).
const (
	syncMaxData = 64 * 1024 // SYNC_DATA_MAX
	// syncMaxPath bounds a request's path, as adbd does (1024 bytes).
	syncMaxPath = 1024
)

// syncRequest is one sync request header: a 4-byte id and a little-endian
// length, followed by that many bytes of path.
type syncRequest struct {
	id   string
	path string
}

// readSyncRequest decodes one request; paths over syncMaxPath are refused.
func readSyncRequest(r io.Reader) (syncRequest, error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return syncRequest{}, err
	}
	id := string(h[:4])
	n := binary.LittleEndian.Uint32(h[4:])
	switch id {
	case "STAT", "STA2", "LST2", "LIST", "SEND", "RECV", "QUIT":
	default:
		return syncRequest{}, fmt.Errorf("sync: unknown request %q", id)
	}
	if n > syncMaxPath {
		return syncRequest{}, fmt.Errorf("sync: %s path length %d over %d", id, n, syncMaxPath)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return syncRequest{}, err
	}
	return syncRequest{id: id, path: string(p)}, nil
}

func syncFail(w io.Writer, msg string) error {
	b := append([]byte("FAIL"), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(msg)))
	_, err := w.Write(append(b, msg...))
	return err
}

func errno(err error) uint32 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, fs.ErrNotExist):
		return uint32(syscall.ENOENT)
	case errors.Is(err, fs.ErrPermission):
		return uint32(syscall.EACCES)
	}
	return uint32(syscall.EIO)
}

// serveSync serves the `sync:` service until QUIT, an error, or the stream ends.
func serveSync(s io.ReadWriter, dev Device, log zerolog.Logger) {
	for {
		req, err := readSyncRequest(s)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				log.Debug().Err(err).Msg("sync")
			}
			return
		}
		log.Debug().Str("req", req.id).Str("path", req.path).Msg("sync")
		switch req.id {
		case "QUIT":
			return
		case "STAT":
			st, err := dev.Stat(req.path)
			b := []byte("STAT")
			if err != nil {
				st = FileStat{}
			}
			b = binary.LittleEndian.AppendUint32(b, st.Mode)
			b = binary.LittleEndian.AppendUint32(b, uint32(st.Size))
			b = binary.LittleEndian.AppendUint32(b, uint32(st.MTime.Unix()))
			if _, err := s.Write(b); err != nil {
				return
			}
		case "STA2", "LST2":
			st, err := dev.Stat(req.path)
			b := []byte(req.id)
			b = binary.LittleEndian.AppendUint32(b, errno(err))
			if err != nil {
				b = append(b, make([]byte, 64)...)
			} else {
				mt := uint64(st.MTime.Unix())
				b = binary.LittleEndian.AppendUint64(b, 0xfd00)          // dev
				b = binary.LittleEndian.AppendUint64(b, inode(req.path)) // ino
				b = binary.LittleEndian.AppendUint32(b, st.Mode)         // mode
				b = binary.LittleEndian.AppendUint32(b, 1)               // nlink
				b = binary.LittleEndian.AppendUint32(b, 2000)            // uid shell
				b = binary.LittleEndian.AppendUint32(b, 2000)            // gid shell
				b = binary.LittleEndian.AppendUint64(b, uint64(st.Size)) // size
				b = binary.LittleEndian.AppendUint64(b, mt)              // atime
				b = binary.LittleEndian.AppendUint64(b, mt)              // mtime
				b = binary.LittleEndian.AppendUint64(b, mt)              // ctime
			}
			if _, err := s.Write(b); err != nil {
				return
			}
		case "LIST":
			ents, _ := dev.ReadDir(req.path)
			var b []byte
			for _, e := range ents {
				b = append(b, "DENT"...)
				b = binary.LittleEndian.AppendUint32(b, e.Mode)
				b = binary.LittleEndian.AppendUint32(b, uint32(e.Size))
				b = binary.LittleEndian.AppendUint32(b, uint32(e.MTime.Unix()))
				b = binary.LittleEndian.AppendUint32(b, uint32(len(e.Name)))
				b = append(b, e.Name...)
			}
			b = append(b, "DONE"...)
			b = append(b, make([]byte, 16)...)
			if _, err := s.Write(b); err != nil {
				return
			}
		case "RECV":
			data, err := dev.ReadFile(req.path)
			if err != nil {
				if syncFail(s, recvErr(err)) != nil {
					return
				}
				continue
			}
			var b []byte
			for len(data) > 0 {
				n := min(len(data), syncMaxData)
				b = append(b[:0], "DATA"...)
				b = binary.LittleEndian.AppendUint32(b, uint32(n))
				b = append(b, data[:n]...)
				if _, err := s.Write(b); err != nil {
					return
				}
				data = data[n:]
			}
			if _, err := s.Write([]byte("DONE\x00\x00\x00\x00")); err != nil {
				return
			}
		case "SEND":
			if !recvFile(s, dev, req.path) {
				return
			}
		}
	}
}

func recvErr(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "No such file or directory"
	case errors.Is(err, fs.ErrPermission):
		return "Permission denied"
	}
	return err.Error()
}

// recvFile takes a pushed file: DATA chunks, then DONE with the mtime. It
// answers OKAY or FAIL and reports whether the session can go on.
func recvFile(s io.ReadWriter, dev Device, spec string) bool {
	p, modeStr, _ := strings.Cut(spec, ",")
	if i := strings.LastIndexByte(spec, ','); i >= 0 {
		p, modeStr = spec[:i], spec[i+1:]
	}
	mode64, err := strconv.ParseUint(modeStr, 10, 32)
	if err != nil {
		mode64 = 0100644
	}
	var buf bytes.Buffer
	var h [8]byte
	for {
		if _, err := io.ReadFull(s, h[:]); err != nil {
			return false
		}
		n := binary.LittleEndian.Uint32(h[4:])
		switch string(h[:4]) {
		case "DATA":
			if n > syncMaxData {
				syncFail(s, fmt.Sprintf("DATA chunk of %d bytes over %d", n, syncMaxData))
				return false
			}
			if _, err := io.CopyN(&buf, s, int64(n)); err != nil {
				return false
			}
		case "DONE":
			mtime := time.Unix(int64(n), 0)
			if err := dev.WriteFile(p, buf.Bytes(), uint32(mode64), mtime); err != nil {
				msg := fmt.Sprintf("couldn't create file: %s", recvErr(err))
				return syncFail(s, msg) == nil
			}
			_, err := s.Write([]byte("OKAY\x00\x00\x00\x00"))
			return err == nil
		default:
			syncFail(s, fmt.Sprintf("invalid data message %q", h[:4]))
			return false
		}
	}
}

// inode gives a stable fake inode per path.
func inode(p string) uint64 {
	var h uint64 = 1469598103934665603
	for _, c := range []byte(path.Clean(p)) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h & 0xffffffff
}
