package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/screengraph/screengraph-agent/agent"
)

// artifactRoutes are the evidence routes (issue 14).
var artifactRoutes = []Route{{"GET", "/v1/runs/{id}/artifacts"}, {"GET", "/v1/runs/{id}/artifacts/{artifactId}"}}

func (a *api) artifactHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /v1/runs/{id}/artifacts":              a.artifacts,
		"GET /v1/runs/{id}/artifacts/{artifactId}": a.artifact,
	}
}

// ArtifactView is one entry of GET /v1/runs/{id}/artifacts.
type ArtifactView struct {
	ArtifactID  string `json:"artifactId"`
	Kind        string `json:"kind"`
	Node        string `json:"node"`
	StepOrdinal int    `json:"stepOrdinal"`
	ContentType string `json:"contentType"`
	Bytes       int64  `json:"bytes"`
	SHA256      string `json:"sha256"`
	// CreatedAt is ISO-8601 UTC with milliseconds.
	CreatedAt string `json:"createdAt"`
}

// ArtifactsResponse is the body of GET /v1/runs/{id}/artifacts.
type ArtifactsResponse struct {
	Artifacts []ArtifactView `json:"artifacts"`
}

func (a *api) artifacts(w http.ResponseWriter, r *http.Request) {
	list, err := a.cfg.Service.Artifacts(r.Context(), scope(r), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := ArtifactsResponse{Artifacts: []ArtifactView{}}
	for _, x := range list {
		out.Artifacts = append(out.Artifacts, ArtifactView{ArtifactID: x.ArtifactID, Kind: x.Kind, Node: x.Node, StepOrdinal: x.StepOrdinal,
			ContentType: x.ContentType, Bytes: x.Bytes, SHA256: x.SHA256, CreatedAt: agent.FormatTS(x.CreatedAt)})
	}
	writeJSON(w, 200, out)
}

// artifact streams one artifact's bytes with its content type. The bytes
// are the device's, not ours: nosniff, a sandboxing CSP, and (but for
// PNG screenshots) attachment, so a hierarchy or a log with markup is
// never rendered as a page of the API's origin.
func (a *api) artifact(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("artifactId")
	if len(id) != 26 {
		a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "artifactId %q: not a ULID", cutID(id)))
		return
	}
	art, rc, err := a.cfg.Service.OpenArtifact(r.Context(), scope(r), r.PathValue("id"), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer rc.Close()
	a.serveArtifact(w, r, art, rc, "private, max-age=86400, immutable")
}

// serveArtifact writes one artifact's bytes from rc under the headers
// that keep device bytes from being rendered as a page of the API's origin
// (nosniff, a sandboxing CSP, attachment but for PNG and video), the given
// Cache-Control, its digest as ETag (If-None-Match: 304) and Last-Modified.
// Byte ranges are served (Accept-Ranges: bytes; a Range header gets 206
// with Content-Range, RFC 9110 section 14, through http.ServeContent), so a
// browser's <video> can seek and read an MP4's index at its end: from the
// blob itself when it can be read at an offset (the data dir's files),
// else from the blob read whole (at most agent.MaxArtifactBytes) when a
// range is asked.
func (a *api) serveArtifact(w http.ResponseWriter, r *http.Request, art agent.Artifact, rc io.Reader, cacheControl string) {
	h := w.Header()
	h.Set("Content-Type", art.ContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	h.Set("Cache-Control", cacheControl)
	h.Set("ETag", `"`+art.SHA256+`"`)
	h.Set("Last-Modified", art.CreatedAt.UTC().Format(http.TimeFormat))
	h.Set("Accept-Ranges", "bytes")
	disp := "attachment"
	if art.ContentType == "image/png" || strings.HasPrefix(art.ContentType, "video/") {
		disp = "inline"
	}
	h.Set("Content-Disposition", disp+`; filename="`+ArtifactFileName(art.ArtifactID, art.Kind, art.ContentType)+`"`)
	if r.Header.Get("If-None-Match") == `"`+art.SHA256+`"` {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	// Exactly the recorded length: a blob longer than its row says is cut
	// (Content-Length was promised), a shorter one ends the response early.
	var rs io.ReadSeeker
	if ra, ok := rc.(io.ReaderAt); ok {
		rs = io.NewSectionReader(ra, 0, art.Bytes)
	} else if r.Header.Get("Range") != "" && art.Bytes <= agent.MaxArtifactBytes {
		if b, err := io.ReadAll(io.LimitReader(rc, art.Bytes)); err == nil && int64(len(b)) == art.Bytes {
			rs = bytes.NewReader(b)
		} else {
			a.fail(w, r, agent.Errorf(agent.ErrInternal, "artifact %s: reading its blob for a range", art.ArtifactID))
			return
		}
	}
	if rs != nil {
		// ServeContent answers Range, If-Range and HEAD; the headers above
		// stay (it keeps a Content-Type and ETag already set).
		http.ServeContent(w, r, "", art.CreatedAt, rs)
		return
	}
	h.Set("Content-Length", strconv.FormatInt(art.Bytes, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, io.LimitReader(rc, art.Bytes)); err != nil && a.cfg.Logf != nil {
		a.cfg.Logf("%s %s: streaming artifact %s: %v", r.Method, r.URL.Path, art.ArtifactID, err)
	}
}

// ArtifactFileName is the file name an artifact is offered and downloaded
// under: <artifactId>-<kind>.<ext> (ext from the content type: png, xml,
// txt; bin otherwise). It never holds a path separator.
func ArtifactFileName(artifactID, kind, contentType string) string {
	ext := "bin"
	switch {
	case strings.HasPrefix(contentType, "image/png"):
		ext = "png"
	case strings.HasPrefix(contentType, "application/xml"), strings.HasPrefix(contentType, "text/xml"):
		ext = "xml"
	case strings.HasPrefix(contentType, "text/plain"):
		ext = "txt"
	case strings.HasPrefix(contentType, "video/mp4"):
		ext = "mp4"
	case strings.HasPrefix(contentType, "video/webm"):
		ext = "webm"
	}
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
				return r
			}
			return '-'
		}, s)
	}
	return clean(artifactID) + "-" + clean(kind) + "." + ext
}

func cutID(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
