package blobs_test

import (
	"errors"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/blobs"
)

// FakeS3 starts gofakes3 on loopback with bucket and points the AWS SDK's
// default chain at it with static credentials (no instance metadata).
func fakeS3(t *testing.T, bucket string) string {
	t.Helper()
	be := s3mem.New()
	hs := httptest.NewServer(gofakes3.New(be).Server())
	t.Cleanup(hs.Close)
	if err := be.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_REGION", "us-east-1")
	return hs.URL
}

func testContract(t *testing.T, b agent.BlobStore) {
	ctx := t.Context()
	data := []byte("\x89PNG\r\n\x1a\n evidence")
	sum := blobs.Sum(data)
	if _, err := b.Open(ctx, sum); !errors.Is(err, agent.ErrNotFound) {
		t.Fatalf("Open before Put = %v, want ErrNotFound", err)
	}
	if err := b.Put(ctx, sum, data); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, sum, data); err != nil {
		t.Fatalf("Put again: %v", err)
	}
	got, err := blobs.ReadAll(ctx, b, sum)
	if err != nil || string(got) != string(data) {
		t.Fatalf("ReadAll = %q, %v", got, err)
	}
	// Content addressing is checked: bytes that do not hash to the name are refused.
	if err := b.Put(ctx, blobs.Sum([]byte("other")), data); err == nil {
		t.Error("Put under another digest succeeded")
	}
	// A name that is not a digest never becomes a path or key.
	for _, bad := range []string{"../../etc/passwd", strings.Repeat("A", 64), "", sum[:63] + "/"} {
		if _, err := b.Open(ctx, bad); errID(err) != agent.ErrInvalidRequest {
			t.Errorf("Open(%q) = %v, want invalid_request_error", bad, err)
		}
		if err := b.Delete(ctx, bad); errID(err) != agent.ErrInvalidRequest {
			t.Errorf("Delete(%q) = %v, want invalid_request_error", bad, err)
		}
	}
	var listed []string
	if err := b.List(ctx, func(s string, mod time.Time) error {
		if mod.IsZero() || time.Since(mod) > time.Hour {
			t.Errorf("blob %s modified %v", s, mod)
		}
		listed = append(listed, s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0] != sum {
		t.Errorf("List = %v, want [%s]", listed, sum)
	}
	if err := b.Delete(ctx, sum); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, sum); err != nil {
		t.Errorf("Delete of a missing blob: %v", err)
	}
	if _, err := b.Open(ctx, sum); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("Open after Delete = %v, want ErrNotFound", err)
	}
}

func TestDir(t *testing.T) {
	root := filepath.Join(t.TempDir(), "evidence")
	d, err := blobs.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	testContract(t, d)
	data := []byte("mode check")
	if err := d.Put(t.Context(), blobs.Sum(data), data); err != nil {
		t.Fatal(err)
	}
	// Owner only, like the rest of the data dir.
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, _ := e.Info()
		want := os.FileMode(0o600)
		if e.IsDir() {
			want = 0o700
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s mode %o, want %o", p, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Storing an existing blob again renews its time: the sweep's grace
	// counts from the latest capture that names it.
	old := time.Now().Add(-48 * time.Hour)
	p := filepath.Join(root, "sha256", blobs.Sum(data)[:2], blobs.Sum(data))
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if err := d.Put(t.Context(), blobs.Sum(data), data); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || time.Since(st.ModTime()) > time.Hour {
		t.Errorf("Put of an existing blob kept its old time: %v %v", st.ModTime(), err)
	}
	if left, _ := os.ReadDir(filepath.Join(root, "tmp")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestS3(t *testing.T) {
	endpoint := fakeS3(t, "evidence")
	b, err := blobs.NewS3(t.Context(), "s3://evidence/fleet/a", blobs.S3Options{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	testContract(t, b)
}

func TestParseS3URL(t *testing.T) {
	for in, want := range map[string][2]string{
		"s3://evidence":          {"evidence", ""},
		"s3://evidence/fleet/a/": {"evidence", "fleet/a"},
		"s3://my.bucket-1/x":     {"my.bucket-1", "x"},
	} {
		b, p, err := blobs.ParseS3URL(in)
		if err != nil || b != want[0] || p != want[1] {
			t.Errorf("ParseS3URL(%q) = %q, %q, %v; want %v", in, b, p, err, want)
		}
	}
	for _, bad := range []string{"https://evidence/x", "s3://", "s3://UP/x", "s3://ab", "s3://evidence/../x", "s3://evidence/a?b"} {
		if _, _, err := blobs.ParseS3URL(bad); errID(err) != agent.ErrInvalidRequest {
			t.Errorf("ParseS3URL(%q) = %v, want invalid_request_error", bad, err)
		}
	}
}

func errID(err error) agent.ErrorID {
	if err == nil {
		return ""
	}
	return agent.Classify(err).ID
}

// TestOpen: no --artifact-store keeps blobs under the data dir; an
// s3:// one keeps them in the bucket, which another host opening the same
// URL reads.
func TestOpen(t *testing.T) {
	root := filepath.Join(t.TempDir(), "evidence")
	d, err := blobs.Open(t.Context(), root, "", "")
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("local")
	if err := d.Put(t.Context(), blobs.Sum(data), data); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "sha256", blobs.Sum(data)[:2], blobs.Sum(data))); err != nil {
		t.Errorf("blob not under the dir: %v", err)
	}

	endpoint := fakeS3(t, "evidence")
	a, err := blobs.Open(t.Context(), root, "s3://evidence/fleet", endpoint)
	if err != nil {
		t.Fatal(err)
	}
	shared := []byte("shared")
	if err := a.Put(t.Context(), blobs.Sum(shared), shared); err != nil {
		t.Fatal(err)
	}
	b, err := blobs.NewS3(t.Context(), "s3://evidence/fleet", blobs.S3Options{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := blobs.ReadAll(t.Context(), b, blobs.Sum(shared)); err != nil || string(got) != "shared" {
		t.Errorf("the bucket's blob: %q, %v", got, err)
	}
	if _, err := blobs.Open(t.Context(), root, "s3://", endpoint); err == nil {
		t.Error("s3:// without a bucket opened")
	}
}
