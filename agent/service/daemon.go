package service

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"
)

// HTTPServer is what Daemon needs of the daemon's HTTP server
// (*http.Server, httpapi.NewServer's).
type HTTPServer interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
}

// Daemon is a daemon's lifecycle around its service: Run starts the service
// (Start), the background loops and the HTTP server, and when ctx ends stops
// them in the order a restart needs.
type Daemon struct {
	Service  *Service
	Server   HTTPServer
	Listener net.Listener
	// Background loops (the retention cleaner) run from after Start until
	// the runs stopped; each gets a context of its own, ended then, and Run
	// waits for all of them to return.
	Background []func(ctx context.Context)
	// Ready is called once the server serves and runs resume (systemd's
	// READY=1, the "serving" log line); may be nil.
	Ready func()
	// Log reports each step of the stop and what went wrong in it; may be nil.
	Log func(level slog.Level, msg string, err error)
	// HTTPGrace bounds the HTTP server's shutdown (0: 5 s), RunsGrace the
	// runs' stop and lease release (0: 15 s).
	HTTPGrace, RunsGrace time.Duration
}

// Run serves until ctx ends or the HTTP server fails (logged at error
// level), then stops, each step with its own budget: stop taking work and
// end the event streams (an open SSE follower would hold the HTTP
// shutdown), shut the HTTP server, stop the runs (the node in flight is
// discarded and re-run on resume; the runs stay resumable) and release
// their leases, then end the background loops. A step out of budget is
// logged at warn level and the next one goes on. Errors: only Start's;
// nothing is started then.
func (d Daemon) Run(ctx context.Context) error {
	if err := d.Service.Start(ctx); err != nil {
		return err
	}
	logf := d.Log
	if logf == nil {
		logf = func(slog.Level, string, error) {}
	}
	bctx, stopBackground := context.WithCancel(context.Background())
	var background sync.WaitGroup
	for _, f := range d.Background {
		background.Go(func() { f(bctx) })
	}
	srvErr := make(chan error, 1)
	go func() { srvErr <- d.Server.Serve(d.Listener) }()
	if d.Ready != nil {
		d.Ready()
	}
	select {
	case <-ctx.Done():
	case err := <-srvErr:
		logf(slog.LevelError, "HTTP server stopped", err)
	}
	logf(slog.LevelInfo, "stopping: runs in flight stay resumable", nil)
	d.Service.StopTaking()
	hctx, hcancel := context.WithTimeout(context.Background(), orDefault(d.HTTPGrace, 5*time.Second))
	if err := d.Server.Shutdown(hctx); err != nil {
		logf(slog.LevelWarn, "HTTP requests did not end in time", err)
	}
	hcancel()
	sctx, scancel := context.WithTimeout(context.Background(), orDefault(d.RunsGrace, 15*time.Second))
	if err := d.Service.Shutdown(sctx); err != nil {
		logf(slog.LevelWarn, "runs did not stop in time", err)
	}
	scancel()
	stopBackground()
	background.Wait()
	return nil
}

// orDefault is d, or def when d is not positive.
func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
