package httpapi

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/screengraph/screengraph-agent/agent/service"
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
//	screengraph_screen_viewers              gauge, open live screen streams
//	screengraph_screen_capture_loops        gauge, device capture loops running
//	screengraph_screen_frames_total{result} counter, live screen frames: captured,
//	                                        failed (captures), delivered, dropped
//	                                        (lost by a slow viewer to a newer one)
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
	cs := []prometheus.Collector{m.requests, open}
	if svc := a.cfg.Service; svc != nil {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "screengraph_screen_viewers",
			Help: "Live screen streams open now (GET /v1/devices/{serial}/screen), all tenants.",
		}, func() float64 { return float64(svc.ScreenStats().Viewers) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "screengraph_screen_capture_loops",
			Help: "Device screen capture loops running now (one per watched device).",
		}, func() float64 { return float64(svc.ScreenStats().Loops) }), screenFrames{svc})
	}
	for _, c := range cs {
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

// screenFrames exports the live screen's frame counters.
type screenFrames struct {
	svc interface{ ScreenStats() service.ScreenStats }
}

var screenFramesDesc = prometheus.NewDesc("screengraph_screen_frames_total",
	"Live screen frames by result: captured, failed (captures), delivered (to viewers), dropped (a slow viewer's frame replaced by a newer one).",
	[]string{"result"}, nil)

func (s screenFrames) Describe(ch chan<- *prometheus.Desc) { ch <- screenFramesDesc }

func (s screenFrames) Collect(ch chan<- prometheus.Metric) {
	st := s.svc.ScreenStats()
	for _, v := range []struct {
		result string
		n      uint64
	}{{"captured", st.Captured}, {"failed", st.Failed}, {"delivered", st.Delivered}, {"dropped", st.Dropped}} {
		ch <- prometheus.MustNewConstMetric(screenFramesDesc, prometheus.CounterValue, float64(v.n), v.result)
	}
}
