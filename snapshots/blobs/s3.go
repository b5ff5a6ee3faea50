package blobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/screengraph/screengraph-agent/agent"
)

var _ agent.BlobStore = (*S3)(nil)

// S3API is the part of *s3.Client the bucket store uses.
type S3API interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, opts ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, opts ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
}

// S3 keeps blobs as objects <prefix>/sha256/<digest> of one bucket, shared
// by every daemon of a fleet: an artifact written by one is served by any.
type S3 struct {
	api            S3API
	bucket, prefix string
}

// S3Options configure the client of NewS3. Empty fields fall back to the
// AWS SDK's default chain (AWS_REGION, AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL_S3, instance roles).
type S3Options struct {
	// Endpoint is a custom endpoint URL (MinIO, gofakes3); it also makes
	// requests path-style (endpoint/bucket/key).
	Endpoint string
	Region   string
}

// NewS3 returns the store of s3://bucket/prefix (ParseS3URL) with an SDK
// client from the default chain and o.
func NewS3(ctx context.Context, url string, o S3Options) (*S3, error) {
	bucket, prefix, err := ParseS3URL(url)
	if err != nil {
		return nil, err
	}
	var lo []func(*config.LoadOptions) error
	if o.Region != "" {
		lo = append(lo, config.WithRegion(o.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, agent.Wrap(agent.ErrInvalidRequest, err, "--artifact-store: AWS configuration")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	cl := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
			so.UsePathStyle = true
		}
		so.DisableLogOutputChecksumValidationSkipped = true
	})
	return NewS3With(cl, bucket, prefix), nil
}

// NewS3With returns the store of bucket/prefix over api.
func NewS3With(api S3API, bucket, prefix string) *S3 {
	return &S3{api: api, bucket: bucket, prefix: strings.Trim(prefix, "/")}
}

func (b *S3) dir() string {
	if b.prefix == "" {
		return "sha256/"
	}
	return b.prefix + "/sha256/"
}

func (b *S3) key(sum string) string { return b.dir() + sum }

// Put implements agent.BlobStore. An existing blob is uploaded again (the
// same bytes): that renews its LastModified, so the retention sweep's grace
// counts from this capture, not from the first one.
func (b *S3) Put(ctx context.Context, sum string, data []byte) error {
	if err := verify(sum, data); err != nil {
		return err
	}
	_, err := b.api.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(b.key(sum)),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data)))})
	if err != nil {
		return s3Error(err, "s3 PutObject "+b.key(sum))
	}
	return nil
}

// Open implements agent.BlobStore.
func (b *S3) Open(ctx context.Context, sum string) (io.ReadCloser, error) {
	if err := checkSum(sum); err != nil {
		return nil, err
	}
	out, err := b.api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(b.key(sum))})
	if err != nil {
		return nil, s3Error(err, "s3 GetObject "+b.key(sum))
	}
	return out.Body, nil
}

// Delete implements agent.BlobStore.
func (b *S3) Delete(ctx context.Context, sum string) error {
	if err := checkSum(sum); err != nil {
		return err
	}
	_, err := b.api.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(b.key(sum))})
	if err != nil {
		if e := s3Error(err, "s3 DeleteObject "+b.key(sum)); !errors.Is(e, agent.ErrNotFound) {
			return e
		}
	}
	return nil
}

// List implements agent.BlobStore over ListObjectsV2 pages of the prefix.
func (b *S3) List(ctx context.Context, fn func(sum string, modified time.Time) error) error {
	p := s3.NewListObjectsV2Paginator(b.api, &s3.ListObjectsV2Input{Bucket: aws.String(b.bucket), Prefix: aws.String(b.dir())})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return s3Error(err, "s3 ListObjectsV2")
		}
		for _, o := range page.Contents {
			sum := strings.TrimPrefix(aws.ToString(o.Key), b.dir())
			if !agent.ValidSHA256(sum) {
				continue
			}
			if err := fn(sum, aws.ToTime(o.LastModified)); err != nil {
				return err
			}
		}
	}
	return nil
}

// s3Error: a missing object is ErrNotFound; the rest an *agent.Error
// (network_error, retryable, without a response; else process_error).
func s3Error(err error, what string) error {
	var ae smithy.APIError
	if errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound") {
		return fmt.Errorf("%s: %w", what, agent.ErrNotFound)
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		if re.HTTPStatusCode() == http.StatusNotFound {
			return fmt.Errorf("%s: %w", what, agent.ErrNotFound)
		}
		return agent.Wrap(agent.ErrProcess, err, "%s", what)
	}
	return agent.Wrap(agent.ErrNetwork, err, "%s", what)
}
