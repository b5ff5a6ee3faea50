package android

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"time"
)

// Unix st_mode bits, as the sync protocol carries them.
const (
	sIFMT  = 0o170000
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
)

// FileInfo is what the sync service's STAT/LIST report about a file.
type FileInfo struct {
	Name  string    // base name
	Mode  uint32    // unix st_mode: type bits (S_IFREG 0100000, S_IFDIR 0040000) | permission bits
	Size  int64     // bytes; 0 for directories' own content and for /proc files
	MTime time.Time // modification time
}

// IsDir reports whether the entry is a directory.
func (f FileInfo) IsDir() bool { return f.Mode&sIFMT == sIFDIR }

// Filesystem errors. Each wraps the io/fs sentinel a caller tests with errors.Is.
var (
	errReadOnly = fmt.Errorf("read-only file system: %w", fs.ErrPermission)
	errIsDir    = errors.New("is a directory")
	errNotDir   = errors.New("not a directory")
	errNotEmpty = errors.New("directory not empty")
	errNoSpace  = errors.New("no space left on device")
)

// Users and groups of the nodes (Android's AID names and numbers).
type owner struct{ user, group string }

var (
	ownerRoot      = owner{"root", "root"}
	ownerSystem    = owner{"system", "system"}
	ownerShell     = owner{"shell", "shell"}
	ownerSdcard    = owner{"root", "sdcard_rw"}
	shellGroupsSet = map[string]bool{"shell": true, "input": true, "log": true, "adb": true, "sdcard_rw": true, "sdcard_r": true, "ext_data_rw": true, "ext_obb_rw": true, "net_bt_admin": true, "net_bt": true, "inet": true, "net_bw_stats": true, "readproc": true, "uhid": true, "readtracefs": true}
)

type fsNode struct {
	dir   bool
	perm  uint32 // permission bits only
	data  []byte
	gen   func() []byte // content computed on read (generated /proc files)
	lazy  *lazyContent  // content made once, read through settle
	mtime time.Time
	own   owner
}

// lazyContent is a regular file's content that costs something to make:
// a finished screenrecord's MP4, which a device's hardware encoder writes
// while it records and the simulator encodes on the host's CPU
// (screenrecord.go). It is made once, by whichever comes first of its
// maker's own start (get in a goroutine) and the file's first read or
// size (settle). Removing or replacing the file abandons it: a making in
// progress is stopped (its context cancelled), one not started never runs.
type lazyContent struct {
	once   sync.Once
	make   func(context.Context) []byte
	data   []byte
	ctx    context.Context
	cancel context.CancelFunc
}

func newLazyContent(mk func(context.Context) []byte) *lazyContent {
	ctx, cancel := context.WithCancel(context.Background())
	return &lazyContent{make: mk, ctx: ctx, cancel: cancel}
}

// get makes the content, or waits for the making in progress, and returns it.
func (l *lazyContent) get() []byte {
	l.once.Do(func() {
		if l.ctx.Err() == nil {
			l.data = l.make(l.ctx)
		}
		l.make = nil
		l.cancel()
	})
	return l.data
}

// abandon stops the making: the file is gone.
func (l *lazyContent) abandon() { l.cancel() }

// memFS is the device's filesystem: a map of canonical absolute paths. It is
// guarded by Device.mu; its methods expect the lock held.
type memFS struct {
	nodes map[string]*fsNode
	used  int64 // bytes of regular files on the /data partition (incl. /storage/emulated)
}

// aliases are symlinks resolved by prefix (the emulated sdcard and its views).
var aliases = []struct{ from, to string }{
	{"/sdcard", "/storage/emulated/0"},
	{"/storage/self/primary", "/storage/emulated/0"},
	{"/mnt/sdcard", "/storage/emulated/0"},
	{"/data/user/0", "/data/data"},
}

// readOnlyRoots are mounted read-only: writes fail with EROFS.
var readOnlyRoots = []string{"/system", "/vendor", "/product", "/system_ext", "/apex", "/proc", "/sys"}

func newMemFS(t time.Time) *memFS {
	m := &memFS{nodes: map[string]*fsNode{}}
	dirs := []struct {
		p    string
		perm uint32
		o    owner
	}{
		{"/", 0o755, ownerRoot},
		{"/system", 0o755, ownerRoot}, {"/system/bin", 0o755, owner{"root", "shell"}},
		{"/system/app", 0o755, ownerRoot}, {"/system/priv-app", 0o755, ownerRoot},
		{"/system/framework", 0o755, ownerRoot},
		{"/vendor", 0o755, ownerRoot}, {"/product", 0o755, ownerRoot},
		{"/proc", 0o555, ownerRoot}, {"/proc/net", 0o555, ownerRoot},
		{"/data", 0o771, ownerSystem}, {"/data/local", 0o751, ownerRoot},
		{"/data/local/tmp", 0o771, ownerShell},
		{"/data/app", 0o771, ownerSystem}, {"/data/data", 0o771, ownerSystem},
		{"/data/system", 0o775, ownerSystem},
		{"/storage", 0o755, ownerRoot}, {"/storage/emulated", 0o751, owner{"root", "sdcard_rw"}},
		{"/storage/emulated/0", 0o771, ownerSdcard},
		{"/dev", 0o755, ownerRoot},
	}
	for _, d := range dirs {
		m.nodes[d.p] = &fsNode{dir: true, perm: d.perm, mtime: t, own: d.o}
	}
	for _, d := range []string{"Alarms", "DCIM", "Documents", "Download", "Movies", "Music", "Notifications", "Pictures", "Podcasts", "Ringtones", "Android"} {
		m.nodes["/storage/emulated/0/"+d] = &fsNode{dir: true, perm: 0o771, mtime: t, own: ownerSdcard}
	}
	for _, b := range []string{"sh", "toybox", "app_process64", "linker64"} {
		m.nodes["/system/bin/"+b] = &fsNode{perm: 0o755, mtime: t, own: owner{"root", "shell"}, data: []byte("\x7fELF")}
	}
	m.nodes["/dev/null"] = &fsNode{perm: 0o666, mtime: t, own: ownerRoot}
	return m
}

// canon makes an absolute, clean path with aliases resolved.
func canon(p string) string {
	if !path.IsAbs(p) {
		p = "/" + p
	}
	p = path.Clean(p)
	for _, a := range aliases {
		if p == a.from || strings.HasPrefix(p, a.from+"/") {
			return a.to + p[len(a.from):]
		}
	}
	return p
}

func underAny(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

func onDataPartition(p string) bool {
	return underAny(p, []string{"/data", "/storage/emulated"})
}

// shellCan reports whether uid shell has access bit (4 read, 2 write, 1 exec)
// on n, from its owner, group and mode.
func shellCan(n *fsNode, bit uint32) bool {
	switch {
	case n.own.user == "shell":
		return n.perm&(bit<<6) != 0
	case shellGroupsSet[n.own.group]:
		return n.perm&(bit<<3) != 0
	}
	return n.perm&bit != 0
}

// lookup walks p checking search (x) permission on every parent for the shell
// user when asShell is set.
func (m *memFS) lookup(p string, asShell bool) (*fsNode, error) {
	if asShell {
		for dir := path.Dir(p); ; dir = path.Dir(dir) {
			if n, ok := m.nodes[dir]; ok && n.dir && !shellCan(n, 1) {
				return nil, fs.ErrPermission
			}
			if dir == "/" {
				break
			}
		}
	}
	n, ok := m.nodes[p]
	if !ok {
		parent := path.Dir(p)
		for parent != "/" {
			if pn, ok := m.nodes[parent]; ok && !pn.dir {
				return nil, errNotDir
			}
			parent = path.Dir(parent)
		}
		return nil, fs.ErrNotExist
	}
	return n, nil
}

func (m *memFS) info(name string, n *fsNode) FileInfo {
	fi := FileInfo{Name: name, MTime: n.mtime, Mode: n.perm}
	if n.dir {
		fi.Mode |= sIFDIR
		fi.Size = 4096
	} else {
		fi.Mode |= sIFREG
		fi.Size = int64(len(n.data))
	}
	return fi
}

// mkdirAll creates p and its missing parents with perm and owner; asShell
// applies the shell user's permissions and read-only mounts.
func (m *memFS) mkdirAll(p string, perm uint32, o owner, t time.Time, asShell bool) error {
	if n, ok := m.nodes[p]; ok {
		if !n.dir {
			return errNotDir
		}
		return nil
	}
	parent := path.Dir(p)
	if err := m.mkdirAll(parent, perm, o, t, asShell); err != nil {
		return err
	}
	if err := m.canCreateIn(parent, asShell); err != nil {
		return err
	}
	m.nodes[p] = &fsNode{dir: true, perm: perm, mtime: t, own: o}
	return nil
}

func (m *memFS) canCreateIn(dir string, asShell bool) error {
	if !asShell {
		return nil
	}
	if underAny(dir, readOnlyRoots) || dir == "/" {
		return errReadOnly
	}
	n, ok := m.nodes[dir]
	if !ok {
		return fs.ErrNotExist
	}
	if !shellCan(n, 2) || !shellCan(n, 1) {
		return fs.ErrPermission
	}
	return nil
}

func (m *memFS) writeFile(p string, data []byte, perm uint32, t time.Time, o owner, asShell bool, freeBytes int64) error {
	if n, ok := m.nodes[p]; ok && n.dir {
		return errIsDir
	}
	if asShell && underAny(p, readOnlyRoots) {
		return errReadOnly
	}
	parent := path.Dir(p)
	if err := m.mkdirAll(parent, 0o771, o, t, asShell); err != nil {
		return err
	}
	old, exists := m.nodes[p]
	if exists && asShell && !shellCan(old, 2) {
		return fs.ErrPermission
	}
	if !exists {
		if err := m.canCreateIn(parent, asShell); err != nil {
			return err
		}
	}
	if onDataPartition(p) {
		delta := int64(len(data))
		if exists {
			delta -= int64(len(old.data))
		}
		if m.used+delta > freeBytes {
			return errNoSpace
		}
		m.used += delta
	}
	if exists {
		if old.lazy != nil {
			old.lazy.abandon()
		}
		old.data = append([]byte(nil), data...)
		old.mtime = t
		old.gen, old.lazy = nil, nil
		return nil
	}
	m.nodes[p] = &fsNode{perm: perm & 0o7777, data: append([]byte(nil), data...), mtime: t, own: o}
	return nil
}

// removeAll deletes p and everything under it (no permission checks).
func (m *memFS) removeAll(p string) {
	for k, n := range m.nodes {
		if k == p || strings.HasPrefix(k, p+"/") {
			if !n.dir && onDataPartition(k) {
				m.used -= int64(len(n.data))
			}
			if n.lazy != nil {
				n.lazy.abandon()
			}
			delete(m.nodes, k)
		}
	}
}

func (m *memFS) children(p string) []string {
	prefix := p + "/"
	if p == "/" {
		prefix = "/"
	}
	var out []string
	for k := range m.nodes {
		if k != "/" && strings.HasPrefix(k, prefix) && !strings.Contains(k[len(prefix):], "/") {
			out = append(out, k[len(prefix):])
		}
	}
	sort.Strings(out)
	return out
}

func pathErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: p, Err: err}
}

// --- public API, as the sync service (which runs as uid shell) sees it -------

// Stat describes p (following the /sdcard symlink). Errors: fs.ErrNotExist,
// fs.ErrPermission (a parent the shell user cannot search).
func (d *Device) Stat(p string) (FileInfo, error) {
	d.settle(canon(p))
	return d.lstat(p)
}

// lstat is Stat without making a lazy file's content first: its Size is 0
// until then. For what needs a file's kind or existence only (the shell's
// rm, cd, redirections), so that removing a recording unread costs no
// encoding.
func (d *Device) lstat(p string) (FileInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, err := d.fs.lookup(canon(p), true)
	if err != nil {
		return FileInfo{}, pathErr("stat", p, err)
	}
	return d.fs.info(path.Base(canon(p)), n), nil
}

// ReadFile returns a file's content. Generated files are computed now (their
// generator runs without d.mu held). Errors: fs.ErrNotExist, fs.ErrPermission,
// errIsDir.
func (d *Device) ReadFile(p string) ([]byte, error) {
	d.settle(canon(p))
	d.mu.Lock()
	n, err := d.fs.lookup(canon(p), true)
	if err == nil && n.dir {
		err = errIsDir
	}
	if err == nil && !shellCan(n, 4) {
		err = fs.ErrPermission
	}
	if err != nil {
		d.mu.Unlock()
		return nil, pathErr("open", p, err)
	}
	gen := n.gen
	data := append([]byte(nil), n.data...)
	d.mu.Unlock()
	if gen != nil {
		return gen(), nil
	}
	return data, nil
}

// WriteFile creates or replaces a file with the given permission bits (mode may
// carry the S_IFREG type bits, as sync SEND does) and modification time,
// creating missing parent directories like adbd. Errors: fs.ErrPermission
// (read-only mount or a directory the shell user cannot write), errIsDir,
// errNoSpace when /data is full.
func (d *Device) WriteFile(p string, data []byte, mode uint32, mtime time.Time) error {
	return d.writeFileAs(canon(p), data, mode, mtime, ownerShell)
}

func (d *Device) writeFileAs(p string, data []byte, mode uint32, mtime time.Time, o owner) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp := canon(p)
	if underAny(cp, []string{"/storage/emulated"}) {
		o = ownerSdcard
		mode = 0o660
	}
	return pathErr("open", p, d.fs.writeFile(cp, data, mode&0o7777, mtime, o, true, d.freeStorageLocked()))
}

// ReadDir lists a directory sorted by name, without "." and "..". Errors:
// fs.ErrNotExist, fs.ErrPermission (no read permission, e.g. /data), errNotDir.
func (d *Device) ReadDir(p string) ([]FileInfo, error) {
	d.settleDir(canon(p))
	return d.readDir(p)
}

// readDir is ReadDir without making lazy files' content first (their Size
// is 0 until then): for the names only (the shell's globs).
func (d *Device) readDir(p string) ([]FileInfo, error) {
	cp := canon(p)
	d.mu.Lock()
	defer d.mu.Unlock()
	n, err := d.fs.lookup(cp, true)
	if err == nil && !n.dir {
		err = errNotDir
	}
	if err == nil && !shellCan(n, 4) {
		err = fs.ErrPermission
	}
	if err != nil {
		return nil, pathErr("open", p, err)
	}
	var out []FileInfo
	for _, name := range d.fs.children(cp) {
		out = append(out, d.fs.info(name, d.fs.nodes[path.Join(cp, name)]))
	}
	return out, nil
}

// settle makes the content of the lazy file at cp (canonical), if it is
// one, without d.mu held (an encoding takes a while), and stores it in the
// file unless the file was replaced meanwhile. The bytes count against
// /data's free space as a device's writes did while it recorded: what does
// not fit is cut off (the muxer's write failed with ENOSPC there).
func (d *Device) settle(cp string) {
	d.mu.Lock()
	n := d.fs.nodes[cp]
	var lc *lazyContent
	if n != nil {
		lc = n.lazy
	}
	d.mu.Unlock()
	if lc == nil {
		return
	}
	b := lc.get()
	d.mu.Lock()
	defer d.mu.Unlock()
	if n.lazy != lc {
		return // replaced, or settled by another reader
	}
	n.lazy = nil
	if d.fs.nodes[cp] == n && onDataPartition(cp) {
		room := max(d.freeStorageLocked()-d.fs.used, 0)
		if int64(len(b)) > room {
			b = b[:room]
		}
		d.fs.used += int64(len(b))
	}
	n.data = b
}

// settleDir settles the lazy files directly in the directory cp, whose
// sizes a listing shows.
func (d *Device) settleDir(cp string) {
	d.mu.Lock()
	var lazy []string
	for _, name := range d.fs.children(cp) {
		if n := d.fs.nodes[path.Join(cp, name)]; n != nil && n.lazy != nil {
			lazy = append(lazy, path.Join(cp, name))
		}
	}
	d.mu.Unlock()
	for _, p := range lazy {
		d.settle(p)
	}
}

// setLazyLocked gives the empty file node n the content mk makes (see
// lazyContent), modified at t, and returns it. Callers hold d.mu. n need
// not be linked any more (a file removed while written): then the content
// is abandoned at once, and mk never runs.
func (d *Device) setLazyLocked(cp string, n *fsNode, mk func(context.Context) []byte, t time.Time) *lazyContent {
	lc := newLazyContent(mk)
	n.gen, n.lazy, n.mtime = nil, lc, t
	if d.fs.nodes[cp] != n {
		lc.abandon()
	}
	return lc
}

// Remove deletes a file or an empty directory. Errors: fs.ErrNotExist,
// fs.ErrPermission, errNotEmpty.
func (d *Device) Remove(p string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return pathErr("remove", p, d.removeLocked(canon(p), false))
}

func (d *Device) removeLocked(cp string, recursive bool) error {
	n, err := d.fs.lookup(cp, true)
	if err != nil {
		return err
	}
	if underAny(cp, readOnlyRoots) {
		return errReadOnly
	}
	parent := d.fs.nodes[path.Dir(cp)]
	if parent == nil || !shellCan(parent, 2) || cp == "/" {
		return fs.ErrPermission
	}
	if n.dir && !recursive && len(d.fs.children(cp)) > 0 {
		return errNotEmpty
	}
	if n.dir && recursive {
		// Everything below must be deletable by the shell user.
		for _, c := range d.fs.children(cp) {
			if err := d.removeLocked(path.Join(cp, c), true); err != nil {
				return err
			}
		}
	}
	d.fs.removeAll(cp)
	return nil
}

// mkdir creates a directory as the shell user (parents when all is set).
func (d *Device) mkdir(p string, all bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp := canon(p)
	if n, ok := d.fs.nodes[cp]; ok {
		if all && n.dir {
			return nil
		}
		return fs.ErrExist
	}
	o := ownerShell
	perm := uint32(0o775)
	if underAny(cp, []string{"/storage/emulated"}) {
		o, perm = ownerSdcard, 0o771
	}
	if all {
		return d.fs.mkdirAll(cp, perm, o, d.now(), true)
	}
	if _, err := d.fs.lookup(path.Dir(cp), true); err != nil {
		return err
	}
	if err := d.fs.canCreateIn(path.Dir(cp), true); err != nil {
		return err
	}
	d.fs.nodes[cp] = &fsNode{dir: true, perm: perm, mtime: d.now(), own: o}
	return nil
}

// touch updates a file's mtime, creating it empty when missing.
func (d *Device) touch(p string) error {
	d.mu.Lock()
	n, err := d.fs.lookup(canon(p), true)
	if err == nil {
		if !n.dir && !shellCan(n, 2) {
			d.mu.Unlock()
			return fs.ErrPermission
		}
		n.mtime = d.now()
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return d.writeFileAs(p, nil, 0o666, d.now(), ownerShell)
}

// nodeOwner returns the owner and group names of p (for ls -l).
func (d *Device) nodeOwner(p string) owner {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n, ok := d.fs.nodes[canon(p)]; ok {
		return n.own
	}
	return ownerRoot
}

// addGeneratedFile makes a read-only file (mode 0444, size 0 as /proc files
// report) whose content gen computes on every read. gen is called without d.mu
// held, so it may take it. Callers must not hold d.mu.
func (d *Device) addGeneratedFile(p string, gen func() []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp := canon(p)
	d.fs.mkdirAll(path.Dir(cp), 0o555, ownerRoot, d.started, false)
	d.fs.nodes[cp] = &fsNode{perm: 0o444, gen: gen, mtime: d.started, own: ownerRoot}
}

// putSystemFile writes a file bypassing permissions (the package manager's
// writes under /data/app, preinstalled files).
func (d *Device) putSystemFileLocked(p string, data []byte, perm uint32, o owner) error {
	return d.fs.writeFile(canon(p), data, perm, d.now(), o, false, d.freeStorageLocked())
}

// freeStorageLocked is what is left of Profile.FreeStorageBytes: the budget for
// everything written to /data after start-up.
func (d *Device) freeStorageLocked() int64 { return d.profile.FreeStorageBytes }
