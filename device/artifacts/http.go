package artifacts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device/artifacts/apk"
)

// fetchHTTP GETs ref, conditionally when the index holds a validator,
// through the client of the policy's current mode (tenanted or not).
func (f *Fetcher) fetchHTTP(ctx context.Context, ref string, u *url.URL, progress func(done, total int64)) (apk.Artifact, error) {
	ctx, cancelT := context.WithTimeout(ctx, f.opt.Timeout)
	defer cancelT()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return apk.Artifact{}, unavailable(false, err, "%s", redact(u))
	}
	prev, cached := f.lookup(ref)
	if cached {
		switch {
		case prev.ETag != "":
			req.Header.Set("If-None-Match", prev.ETag)
		case prev.LastModified != "":
			req.Header.Set("If-Modified-Since", prev.LastModified)
		default:
			cached = false
		}
	}
	resp, err := f.http[f.opt.Policy.tenanted(ctx)].Do(req)
	if err != nil {
		if d := destinationError(err); d != nil {
			return apk.Artifact{}, d
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redact(u)
			ue.Err = quietNet(ue.Err, u.Hostname())
		} else {
			err = quietNet(err, u.Hostname())
		}
		return apk.Artifact{}, unavailable(!finalTransportErr(err), err, "GET %s", redact(u))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && cached:
		return f.hit(ref, prev), nil
	case resp.StatusCode == http.StatusOK:
	default:
		return apk.Artifact{}, unavailable(retryableStatus(resp.StatusCode), nil, "GET %s: HTTP %s", redact(u), resp.Status)
	}
	body := newIdleReader(resp.Body, f.opt.IdleTimeout, cancel)
	defer body.stop()
	sum, n, err := f.store(body, resp.ContentLength, progress)
	if err != nil {
		return apk.Artifact{}, stalled(ctx, err, f.opt.IdleTimeout)
	}
	f.record(ref, indexEntry{SHA256: sum, Size: n, ETag: resp.Header.Get("ETag"),
		LastModified: resp.Header.Get("Last-Modified"), FetchedAt: time.Now().UTC()})
	return apk.Artifact{Path: f.blobPath(sum), SHA256: sum, Size: n}, nil
}

// stalled reports err as CodeStalled (retryable) when the idle timer ended it.
func stalled(ctx context.Context, err error, idle time.Duration) error {
	if !errors.Is(context.Cause(ctx), errStalled) {
		return err
	}
	e := unavailable(true, errStalled, "the download sent nothing for %s (--artifact-idle-timeout)", idle)
	e.Code = CodeStalled
	return e
}

// retryableStatus: server-side and throttling statuses are worth another
// attempt; a missing object or denied access is not.
func retryableStatus(code int) bool {
	return code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests
}

// redact drops the query (pre-signed URLs carry credentials there), path
// parameters (";token=…") and userinfo.
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	if c.RawQuery != "" {
		c.RawQuery = "REDACTED"
	}
	return agent.RedactString(c.String())
}

// finalTransportErr reports transport failures that another attempt cannot
// cure: the server's certificate is not trusted or does not match.
func finalTransportErr(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn)
}
