package sqlite

import (
	"os"
	"path/filepath"

	"github.com/screengraph/screengraph-agent/agent"
)

// PrepareDataDir makes dir ready for a host: dir and dir/tmp (downloads
// being installed) exist, and dir is the owner's only (0700), even when an
// older version created it 0755: it holds the store (run requests with their
// references), tokens' hashes and tenants' artifacts. Errors:
// invalid_request_error naming dir (not a directory, not ours to change).
func PrepareDataDir(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "data dir %s", dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "data dir %s", dir)
	}
	return nil
}

// PredecessorPrefix is the lease-holder prefix whose leases a daemon
// starting on dataDir takes back (service.Config.HolderPrefix): the
// instance LockDataDir returned, or, when the lock named none (a daemon of
// before instance ids), the holders that daemon used,
// serve:<hostname>:<clean dataDir>:<ulid>.
func PredecessorPrefix(dataDir, predecessor string) string {
	if predecessor != "" {
		return predecessor
	}
	hostname, _ := os.Hostname()
	return "serve:" + hostname + ":" + filepath.Clean(dataDir) + ":"
}
