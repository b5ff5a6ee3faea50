// Package blobs keeps evidence artifacts' bytes by their sha256 (content
// addressing): Dir under the data dir on one host, S3 in a bucket a fleet
// shares. Both implement agent.BlobStore; a blob is written before the row
// naming it commits, and the retention cleaner removes the blobs no row
// names (agent/retention).
package blobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

var _ agent.BlobStore = (*Dir)(nil)

// checkSum refuses a name that is not a sha256 digest: a blob's name comes
// from a row, and a row's digest must never become a path like "../x".
func checkSum(sum string) error {
	if !agent.ValidSHA256(sum) {
		return agent.Errorf(agent.ErrInvalidRequest, "blob name %q is not a lowercase hex sha256", cut(sum))
	}
	return nil
}

func cut(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// verify checks that data hashes to sum.
func verify(sum string, data []byte) error {
	if err := checkSum(sum); err != nil {
		return err
	}
	got := sha256.Sum256(data)
	if hex.EncodeToString(got[:]) != sum {
		return agent.Errorf(agent.ErrInternal, "blob %s: content hashes to %s", sum, hex.EncodeToString(got[:]))
	}
	if len(data) > agent.MaxArtifactBytes {
		return agent.Errorf(agent.ErrInvalidRequest, "blob %s: %d bytes, at most %d", sum, len(data), agent.MaxArtifactBytes)
	}
	return nil
}

// Dir keeps blobs as files root/sha256/<first two hex>/<digest>, owner-only
// (directories 0700, files 0600), written to a temporary file in root/tmp,
// synced, then renamed into place, so a blob is whole or absent.
type Dir struct{ root string }

// NewDir returns the blob directory at root, creating it (0700).
func NewDir(root string) (*Dir, error) {
	for _, d := range []string{root, filepath.Join(root, "sha256"), filepath.Join(root, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, agent.Wrap(agent.ErrProcess, err, "evidence blob dir")
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, agent.Wrap(agent.ErrProcess, err, "evidence blob dir")
		}
	}
	return &Dir{root: root}, nil
}

func (d *Dir) path(sum string) string { return filepath.Join(d.root, "sha256", sum[:2], sum) }

// Put implements agent.BlobStore.
func (d *Dir) Put(ctx context.Context, sum string, data []byte) error {
	if err := verify(sum, data); err != nil {
		return err
	}
	p := d.path(sum)
	if _, err := os.Stat(p); err == nil {
		// Already there (the same screen twice): renew its time, so the
		// retention sweep's grace counts from this capture, not from the
		// first one (a row of that one may be gone already).
		now := time.Now()
		if err := os.Chtimes(p, now, now); err == nil {
			return nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return agent.Wrap(agent.ErrProcess, err, "evidence blob %s", sum)
	}
	f, err := os.CreateTemp(filepath.Join(d.root, "tmp"), "blob-*")
	if err != nil {
		return agent.Wrap(agent.ErrProcess, err, "evidence blob %s", sum)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing left to remove
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		return agent.Wrap(agent.ErrProcess, err, "evidence blob %s", sum)
	}
	return nil
}

// Open implements agent.BlobStore.
func (d *Dir) Open(ctx context.Context, sum string) (io.ReadCloser, error) {
	if err := checkSum(sum); err != nil {
		return nil, err
	}
	f, err := os.Open(d.path(sum))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("evidence blob %s: %w", sum, agent.ErrNotFound)
	}
	if err != nil {
		return nil, agent.Wrap(agent.ErrProcess, err, "evidence blob %s", sum)
	}
	return f, nil
}

// Delete implements agent.BlobStore.
func (d *Dir) Delete(ctx context.Context, sum string) error {
	if err := checkSum(sum); err != nil {
		return err
	}
	if err := os.Remove(d.path(sum)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return agent.Wrap(agent.ErrProcess, err, "evidence blob %s", sum)
	}
	return nil
}

// List implements agent.BlobStore: the files of root/sha256 named by a
// digest (anything else there is not a blob and is left alone).
func (d *Dir) List(ctx context.Context, fn func(sum string, modified time.Time) error) error {
	return filepath.WalkDir(filepath.Join(d.root, "sha256"), func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.IsDir() || !e.Type().IsRegular() || !agent.ValidSHA256(e.Name()) {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		return fn(e.Name(), info.ModTime())
	})
}

// ReadAll reads a whole blob (at most agent.MaxArtifactBytes).
func ReadAll(ctx context.Context, b agent.BlobStore, sum string) ([]byte, error) {
	rc, err := b.Open(ctx, sum)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(rc, agent.MaxArtifactBytes+1)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Sum is the lowercase hex sha256 of data: the blob's name.
func Sum(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// ParseS3URL splits s3://bucket/prefix into the bucket and the key prefix
// (no leading or trailing '/'). Errors: another scheme, no bucket, a bucket
// name S3 refuses, a prefix with "..".
func ParseS3URL(u string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(u, "s3://")
	if !ok {
		return "", "", agent.Errorf(agent.ErrInvalidRequest, "--artifact-store %q: want s3://bucket/prefix", cut(u))
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	prefix = strings.Trim(prefix, "/")
	if len(bucket) < 3 || len(bucket) > 63 || strings.Trim(bucket, "abcdefghijklmnopqrstuvwxyz0123456789.-") != "" {
		return "", "", agent.Errorf(agent.ErrInvalidRequest, "--artifact-store %q: bucket must be 3-63 of a-z, 0-9, '.' and '-'", cut(u))
	}
	if len(prefix) > 512 || strings.Contains("/"+prefix+"/", "/../") || strings.ContainsAny(prefix, "?#\\") {
		return "", "", agent.Errorf(agent.ErrInvalidRequest, "--artifact-store %q: prefix must be at most 512 bytes without '..', '?', '#' or '\\'", cut(u))
	}
	return bucket, prefix, nil
}
