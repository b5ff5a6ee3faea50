package sqlite

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/oklog/ulid/v2"
)

// LockDataDir takes the data dir's daemon lock (flock on DIR/daemon.lock,
// created 0600; DIR is created 0700), so one daemon at a time drives the
// embedded store and its data dir; the lock lasts until the returned file is
// closed or the process dies. The lock file records "pid N" and the
// instance id (lease holder, a per-process "serve:<ulid>") of the daemon
// that holds it. LockDataDir returns the instance the previous holder
// recorded ("" when none): that daemon is dead, since the lock is ours, so
// its leases are ours to take back. An instance "" (`runs resume`, which
// holds no daemon leases) keeps the previous record. Errors: a lock held by
// a live process wraps syscall.EWOULDBLOCK and names the holder's record;
// file system errors as they are.
func LockDataDir(dir, instance string) (*os.File, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	f, err := os.OpenFile(filepath.Join(dir, "daemon.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, "", err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		b, _ := os.ReadFile(filepath.Join(dir, "daemon.lock"))
		return nil, "", fmt.Errorf("another daemon uses data dir %s (%s): %w", dir, strings.Join(strings.Fields(string(b)), " "), err)
	}
	prev, err := readLockInstance(f)
	if err != nil {
		f.Close()
		return nil, "", err
	}
	if instance == "" {
		instance = prev
	}
	rec := fmt.Sprintf("pid %d\n", os.Getpid())
	if instance != "" {
		rec += "instance " + instance + "\n"
	}
	// Rewritten in place: the file is the lock, it is not replaced.
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, "", err
	}
	if _, err := f.WriteAt([]byte(rec), 0); err != nil {
		f.Close()
		return nil, "", err
	}
	return f, prev, nil
}

// readLockInstance reads the "instance <id>" line of a lock file (at most
// 4 KiB are read; "" when there is none). Only ids of the form serve:<ulid>
// are taken: the record is taken back on its word, so nothing else may
// widen what a successor releases.
func readLockInstance(f *os.File) (string, error) {
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "instance "); ok {
			v = strings.TrimSpace(v)
			if id, ok := strings.CutPrefix(v, "serve:"); ok {
				if _, err := ulid.ParseStrict(id); err == nil {
					return v, nil
				}
			}
		}
	}
	return "", nil
}
