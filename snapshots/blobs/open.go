package blobs

import (
	"context"

	"github.com/screengraph/screengraph-agent/agent"
)

// Open is a host's evidence blob store: Dir under dir when url is "" (the
// data dir's evidence/), else the bucket of url (s3://bucket/prefix,
// --artifact-store) through endpoint ("" for AWS's; a custom one makes
// requests path-style). Errors: NewDir's or NewS3's.
func Open(ctx context.Context, dir, url, endpoint string) (agent.BlobStore, error) {
	if url == "" {
		return NewDir(dir)
	}
	return NewS3(ctx, url, S3Options{Endpoint: endpoint})
}
