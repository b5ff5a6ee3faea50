package service

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/screengraph/screengraph-agent/agent"
)

// OutboxCounter counts the outbox rows the relay has not published yet
// (unpublished) and those it parked; the stores implement it
// (snapshots.OutboxCounter is the same method, asserted on each store).
type OutboxCounter interface {
	OutboxCounts(ctx context.Context) (unpublished, parked int64, err error)
}

// Metrics are the daemon's Prometheus metrics, measured here:
//
//	screengraph_runs{status}                        gauge, runs in the store by status (at scrape)
//	screengraph_runs_active                         gauge, runs this daemon drives now
//	screengraph_node_duration_seconds{node,outcome} histogram, per node attempt (SUCCESS, FAILURE, …)
//	screengraph_outbox_lag_events                   gauge, committed events not yet published (at scrape)
//	screengraph_devices{state}                      gauge, devices of the adb server by readiness (at scrape)
//	screengraph_leases_held                         gauge, active device leases (at scrape)
type Metrics struct {
	s         *Service
	lag       OutboxCounter
	nodeDur   *prometheus.HistogramVec
	runsDesc  *prometheus.Desc
	activeDsc *prometheus.Desc
	lagDesc   *prometheus.Desc
	devDesc   *prometheus.Desc
	leaseDesc *prometheus.Desc
}

// RegisterMetrics registers the service's metrics on reg. lag may be nil.
func (s *Service) RegisterMetrics(reg prometheus.Registerer, lag OutboxCounter) error {
	m := &Metrics{
		s: s, lag: lag,
		nodeDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "screengraph_node_duration_seconds",
			Help:    "Duration of each node attempt of the setup chain, by node and outcome.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"node", "outcome"}),
		runsDesc:  prometheus.NewDesc("screengraph_runs", "Runs in the store by status.", []string{"status"}, nil),
		activeDsc: prometheus.NewDesc("screengraph_runs_active", "Runs this daemon is driving now.", nil, nil),
		lagDesc:   prometheus.NewDesc("screengraph_outbox_lag_events", "Committed events the outbox relay has not published yet.", nil, nil),
		devDesc:   prometheus.NewDesc("screengraph_devices", "Devices of the adb server by readiness (ready, booting, offline, unauthorized, ...).", []string{"state"}, nil),
		leaseDesc: prometheus.NewDesc("screengraph_leases_held", "Active device leases.", nil, nil),
	}
	if err := reg.Register(m.nodeDur); err != nil {
		return err
	}
	if err := reg.Register(m); err != nil {
		return err
	}
	s.Observe(m.observe)
	return nil
}

func (m *Metrics) observe(st agent.Step) {
	for _, e := range st.Events {
		if e.Kind != agent.KindNodeFinished {
			continue
		}
		p, ok := nodeFinishedFields(e.Payload)
		if !ok || p.NodeName == "" {
			continue
		}
		m.nodeDur.WithLabelValues(p.NodeName, p.Outcome).Observe(float64(p.DurationMillis) / 1000)
	}
}

// finishedFields are what the node duration histogram reads of an
// agent.node.finished payload (agent.NodeFinishedPayload).
type finishedFields struct {
	NodeName       string
	Outcome        string
	DurationMillis int64
}

// nodeFinishedFields reads nodeName, nodeExecutionOutcomeStatus and
// durationMillis of an agent.node.finished payload (a JSON object) and stops
// reading once it has all three: the payload is canonical (RFC 8785, keys in
// order), where they come before the node's output, which can be most of
// the payload and is not read. Another key order is read to the end. ok is
// false for a payload that is not an object or is malformed before the
// three are found.
func nodeFinishedFields(payload []byte) (finishedFields, bool) {
	var f finishedFields
	dec := json.NewDecoder(bytes.NewReader(payload))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return f, false
	}
	for found := 0; found < 3; {
		if !dec.More() {
			return f, true // the end of the object: the keys missing stay zero
		}
		t, err := dec.Token()
		if err != nil {
			return f, false
		}
		var dst any
		switch t {
		case "nodeName":
			dst = &f.NodeName
		case "nodeExecutionOutcomeStatus":
			dst = &f.Outcome
		case "durationMillis":
			dst = &f.DurationMillis
		default:
			var skip json.RawMessage
			dst = &skip
			found-- // not one of the three
		}
		if err := dec.Decode(dst); err != nil {
			return f, false
		}
		found++
	}
	return f, true
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.runsDesc
	ch <- m.activeDsc
	ch <- m.lagDesc
	ch <- m.devDesc
	ch <- m.leaseDesc
}

// Collect implements prometheus.Collector: the gauges read at scrape time.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts := map[agent.RunStatus]int{}
	for _, st := range []agent.RunStatus{agent.RunPending, agent.RunRunning, agent.RunPaused, agent.RunCancelRequested, agent.RunCanceled, agent.RunFinished, agent.RunFailed} {
		counts[st] = 0
	}
	if by, err := m.s.countRuns(ctx); err == nil {
		for st, n := range by {
			counts[st] = n
		}
		for st, n := range counts {
			ch <- prometheus.MustNewConstMetric(m.runsDesc, prometheus.GaugeValue, float64(n), string(st))
		}
	}
	ch <- prometheus.MustNewConstMetric(m.activeDsc, prometheus.GaugeValue, float64(m.s.ActiveRuns()))
	if m.lag != nil {
		if n, _, err := m.lag.OutboxCounts(ctx); err == nil {
			ch <- prometheus.MustNewConstMetric(m.lagDesc, prometheus.GaugeValue, float64(n))
		}
	}
	if devs, err := m.s.Devices(ctx, agent.Admin()); err == nil {
		by := map[string]int{"ready": 0, "booting": 0, "offline": 0, "unauthorized": 0}
		for _, d := range devs {
			by[d.Readiness]++
		}
		for st, n := range by {
			ch <- prometheus.MustNewConstMetric(m.devDesc, prometheus.GaugeValue, float64(n), st)
		}
	}
	if ls, err := m.s.cfg.Leases.ActiveLeases(ctx, agent.Admin()); err == nil {
		ch <- prometheus.MustNewConstMetric(m.leaseDesc, prometheus.GaugeValue, float64(len(ls)))
	}
}

// countRuns counts runs by status: one grouped query when the store is an
// agent.RunCounter, else by listing them.
func (s *Service) countRuns(ctx context.Context) (map[agent.RunStatus]int, error) {
	if rc, ok := s.store.Store.(agent.RunCounter); ok {
		return rc.CountRunsByStatus(ctx)
	}
	runs, err := s.store.ListRuns(ctx, agent.Admin(), agent.RunFilter{})
	if err != nil {
		return nil, err
	}
	by := map[agent.RunStatus]int{}
	for _, r := range runs {
		by[r.Status]++
	}
	return by, nil
}
