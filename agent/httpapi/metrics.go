package httpapi

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// apiMetrics are the API's own figures: requests by route pattern and the
// open event streams, so the cost of a client (an inspector tab left open)
// can be read off /metrics.
type apiMetrics struct {
	requests *prometheus.CounterVec
}

// registerMetrics registers the API's metrics on reg (nil: none):
//
//	screengraph_http_requests_total{route}  counter, route = the pattern
//	                                        ("GET /v1/runs/{id}") or "unmatched"
//	screengraph_http_event_streams_open     gauge, open SSE event streams
//
// A registration that fails (the names taken on reg) is reported through
// Logf and leaves the API without them.
func (a *api) registerMetrics(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	m := &apiMetrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "screengraph_http_requests_total",
		Help: "HTTP requests answered, by route pattern (\"unmatched\": no route).",
	}, []string{"route"})}
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "screengraph_http_event_streams_open",
		Help: "Server-Sent Event streams open now (GET /v1/runs/{id}/events?follow=1), all tenants.",
	}, func() float64 { return float64(a.openStreams()) })
	for _, c := range []prometheus.Collector{m.requests, open} {
		if err := reg.Register(c); err != nil {
			if a.cfg.Logf != nil {
				a.cfg.Logf("httpapi: registering metrics: %v", err)
			}
			return
		}
	}
	a.metrics = m
}

// counted counts the requests of route pattern p.
func (a *api) counted(p string, h http.HandlerFunc) http.HandlerFunc {
	if a.metrics == nil {
		return h
	}
	c := a.metrics.requests.WithLabelValues(p)
	return func(w http.ResponseWriter, r *http.Request) {
		c.Inc()
		h(w, r)
	}
}

// openStreams is the number of event streams open now, all tenants.
func (a *api) openStreams() int {
	a.followersMu.Lock()
	defer a.followersMu.Unlock()
	n := 0
	for _, c := range a.followers {
		n += c
	}
	return n
}
