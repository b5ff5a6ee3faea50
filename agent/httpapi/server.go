package httpapi

import (
	"net/http"
	"time"
)

// Limits bound what one client can hold of the server: how long a request
// (headers and body) may take to arrive, how long a response may take to be
// written, how long an idle keep-alive connection stays open, how big the
// headers may be, how long one SSE event may take to be written, and how
// many event streams (GET /v1/runs/{id}/events?follow=1) one tenant may
// hold open at once.
type Limits struct {
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (a client
	// sending its body one byte a minute is cut off).
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response; event streams instead set a
	// deadline per event (EventWriteTimeout).
	WriteTimeout time.Duration
	IdleTimeout  time.Duration
	// MaxHeaderBytes bounds the request line and headers (431 above).
	MaxHeaderBytes int
	// EventWriteTimeout bounds writing one SSE event: a follower that stops
	// reading is dropped instead of holding its goroutine forever.
	EventWriteTimeout time.Duration
	// FollowersPerTenant caps the open event streams of one tenant (the
	// admin or unauthenticated caller counts as one tenant, ""); 429 above.
	FollowersPerTenant int
}

// DefaultLimits are the daemon's limits.
var DefaultLimits = Limits{
	ReadHeaderTimeout:  10 * time.Second,
	ReadTimeout:        30 * time.Second,
	WriteTimeout:       60 * time.Second,
	IdleTimeout:        2 * time.Minute,
	MaxHeaderBytes:     64 << 10,
	EventWriteTimeout:  10 * time.Second,
	FollowersPerTenant: 64,
}

// withDefaults fills the zero fields of l from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	return Limits{
		ReadHeaderTimeout:  positiveOr(l.ReadHeaderTimeout, d.ReadHeaderTimeout),
		ReadTimeout:        positiveOr(l.ReadTimeout, d.ReadTimeout),
		WriteTimeout:       positiveOr(l.WriteTimeout, d.WriteTimeout),
		IdleTimeout:        positiveOr(l.IdleTimeout, d.IdleTimeout),
		MaxHeaderBytes:     positiveOr(l.MaxHeaderBytes, d.MaxHeaderBytes),
		EventWriteTimeout:  positiveOr(l.EventWriteTimeout, d.EventWriteTimeout),
		FollowersPerTenant: positiveOr(l.FollowersPerTenant, d.FollowersPerTenant),
	}
}

func positiveOr[T int | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// NewServer returns the http.Server that serves h under limits l (zero
// fields: DefaultLimits). Pass the same l as Config.Limits so event streams
// get their per-event deadlines.
func NewServer(h http.Handler, l Limits) *http.Server {
	l = l.withDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}
