package sim

import (
	"context"
	"io"
	"net"
	"time"
)

// Device is what the transport needs of a device model (android.Device through
// an adapter, or a test double).
type Device interface {
	// Banner is the CNXN system-identity string ("device::ro.product.name=…;…;features=…").
	Banner() string
	// Prompt is the interactive shell prompt ("emu64xa:/ $ ").
	Prompt() string
	// Shell runs a command line and returns its exit status.
	Shell(ctx context.Context, cmdline string, stdin io.Reader, stdout, stderr io.Writer) int
	Stat(path string) (FileStat, error)
	ReadFile(path string) ([]byte, error)
	WriteFile(path string, data []byte, mode uint32, mtime time.Time) error
	ReadDir(path string) ([]FileStat, error)
	// DialTCP connects to an in-device TCP listener (the `tcp:PORT` service).
	DialTCP(port int) (net.Conn, error)
}

// FileStat is a file's metadata as the sync protocol carries it; Mode is a unix
// st_mode including the file type bits (S_IFREG 0100000, S_IFDIR 0040000).
type FileStat struct {
	Name  string
	Mode  uint32
	Size  int64
	MTime time.Time
}
