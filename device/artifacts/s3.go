package artifacts

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/screengraph/screengraph-agent/device/artifacts/apk"
)

// s3API is the part of *s3.Client the fetcher uses.
type s3API interface {
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

// s3Client builds the S3 client on first use (the default credential chain
// reads files and may call out, so not at construction).
func (f *Fetcher) s3Client(ctx context.Context) (s3API, error) {
	f.s3once.Do(func() {
		o := f.opt.S3
		var lo []func(*config.LoadOptions) error
		if o.Region != "" {
			lo = append(lo, config.WithRegion(o.Region))
		}
		if o.AccessKeyID != "" || o.SecretAccessKey != "" {
			lo = append(lo, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, o.SessionToken)))
		}
		if o.MaxAttempts > 0 {
			lo = append(lo, config.WithRetryMaxAttempts(o.MaxAttempts))
		}
		cfg, err := config.LoadDefaultConfig(ctx, lo...)
		if err != nil {
			f.s3err = unavailable(false, err, "s3: load AWS configuration")
			return
		}
		if cfg.Region == "" {
			cfg.Region = "us-east-1"
		}
		f.s3 = s3.NewFromConfig(cfg, func(so *s3.Options) {
			if o.Endpoint != "" {
				so.BaseEndpoint = aws.String(o.Endpoint)
			}
			so.UsePathStyle = o.PathStyle
			// Objects stored without a checksum (most) make the SDK log a line per GET.
			so.DisableLogOutputChecksumValidationSkipped = true
		})
	})
	return f.s3, f.s3err
}

// fetchS3 heads the object and downloads it unless the index holds the same
// ETag and size.
func (f *Fetcher) fetchS3(ctx context.Context, ref, bucket, key string, progress func(done, total int64)) (apk.Artifact, error) {
	if err := f.opt.Policy.checkBucket(ctx, bucket); err != nil {
		return apk.Artifact{}, err
	}
	ctx, cancelT := context.WithTimeout(ctx, f.opt.Timeout)
	defer cancelT()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cl, err := f.s3Client(ctx)
	if err != nil {
		return apk.Artifact{}, err
	}
	head, err := cl.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return apk.Artifact{}, s3Failure(err, "s3 HeadObject "+ref)
	}
	etag, size := aws.ToString(head.ETag), aws.ToInt64(head.ContentLength)
	if size > f.opt.MaxBytes {
		return apk.Artifact{}, tooLarge(size, f.opt.MaxBytes)
	}
	if prev, ok := f.lookup(ref); ok && etag != "" && prev.ETag == etag && prev.Size == size {
		return f.hit(ref, prev), nil
	}
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
	if etag != "" {
		// The bytes must be the version just headed (a concurrent overwrite
		// fails with 412 and is retryable).
		in.IfMatch = aws.String(etag)
	}
	out, err := cl.GetObject(ctx, in)
	if err != nil {
		return apk.Artifact{}, s3Failure(err, "s3 GetObject "+ref)
	}
	defer out.Body.Close()
	body := newIdleReader(out.Body, f.opt.IdleTimeout, cancel)
	defer body.stop()
	sum, n, err := f.store(body, aws.ToInt64(out.ContentLength), progress)
	if err != nil {
		return apk.Artifact{}, stalled(ctx, err, f.opt.IdleTimeout)
	}
	lm := ""
	if out.LastModified != nil {
		lm = out.LastModified.UTC().Format(http.TimeFormat)
	}
	f.record(ref, indexEntry{SHA256: sum, Size: n, ETag: aws.ToString(out.ETag), LastModified: lm, FetchedAt: time.Now().UTC()})
	return apk.Artifact{Path: f.blobPath(sum), SHA256: sum, Size: n}, nil
}

// s3Failure classifies an SDK error: missing object/bucket and denied access
// are final; server errors, throttling, a changed object (412) and transport
// failures are retryable.
func s3Failure(err error, what string) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NoSuchBucket", "NotFound", "AccessDenied", "Forbidden", "InvalidAccessKeyId",
			"SignatureDoesNotMatch", "InvalidBucketName", "AllAccessDisabled", "InvalidObjectState":
			return unavailable(false, err, "%s", what)
		}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		code := re.HTTPStatusCode()
		// Status 0: the request never got a response (refused, reset, DNS).
		if code == 0 {
			err = quietNet(err, "the S3 endpoint")
		}
		return unavailable(code == 0 || retryableStatus(code) || code == http.StatusPreconditionFailed, err, "%s", what)
	}
	// No HTTP response at all: connection refused, DNS, reset, timeout.
	return unavailable(true, quietNet(err, "the S3 endpoint"), "%s", what)
}
