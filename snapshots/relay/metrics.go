package relay

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/screengraph/screengraph-agent/snapshots"
)

// Metrics are the relay's counters since it started (Prometheus counters
// read from Stats at scrape time): screengraph_relay_published_total,
// _failures_total, _parked_total, _pass_by_pass_total, _already_stored_total,
// _requeued_total.
func Metrics(r *Relay) []prometheus.Collector {
	counter := func(name, help string, v func(RelayStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(r.Stats())) })
	}
	return []prometheus.Collector{
		counter("screengraph_relay_published_total", "Outbox rows the relay published (acknowledged by JetStream) and marked published.",
			func(s RelayStats) int64 { return s.Published }),
		counter("screengraph_relay_failures_total", "Relay publishing attempts that stopped on an error (each followed by a back-off).",
			func(s RelayStats) int64 { return s.Failures }),
		counter("screengraph_relay_parked_total", "Outbox rows the relay parked instead of publishing: their message can never be published (over the NATS server's max_payload); listed by GET /v1/outbox/parked.",
			func(s RelayStats) int64 { return s.Parked }),
		counter("screengraph_relay_pass_by_pass_total", "Times the streaming relay found other publishers on the stream and published pass by pass for 30 s.",
			func(s RelayStats) int64 { return s.PassByPass }),
		counter("screengraph_relay_already_stored_total", "Outbox rows a check after a failure found in the stream though their acks were lost; marked without publishing them again.",
			func(s RelayStats) int64 { return s.AlreadyStored }),
		counter("screengraph_relay_requeued_total", "Outbox rows marked published that a check after a failure found missing from the stream (the NATS cluster lost acknowledged events); published again in order.",
			func(s RelayStats) int64 { return s.Requeued }),
	}
}

// OutboxMetrics is the gauge screengraph_outbox_parked_events: the
// store's parked outbox rows, counted at scrape time with one query (5 s at
// most; -1 when the count fails). Every daemon of a fleet reports the shared
// count.
func OutboxMetrics(s snapshots.OutboxCounter) []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "screengraph_outbox_parked_events",
		Help: "Outbox rows parked because they can never be published (GET /v1/outbox/parked lists them)."},
		func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, n, err := s.OutboxCounts(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		})}
}
