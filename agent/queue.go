package agent

import (
	"context"
	"strings"
	"time"
)

// RunQueue is a store's queue of PENDING runs as the scheduler reads it:
// bounded, indexed reads per device name instead of listing every
// unfinished run (River's claim query is the model; the claim itself is the
// device lease, whose unique indexes admit one run per device and one
// device per run). Both stores implement it and pass snapshots/storetest.
//
// Device names are compared in their normal form (QueueName): trimmed of
// spaces, spaces as '_', lower case, as the scheduler matches a run's
// device name (Run.Serial) with a device's serial, AVD name, model, ….
type RunQueue interface {
	// QueuedRuns returns PENDING runs, oldest first (CreatedAt, then
	// RunID): for each of q.Names, the oldest q.PerTenant runs of each of
	// up to q.MaxTenants tenants with runs queued for that name (in tenant
	// id order), so one tenant's backlog never hides another tenant's run;
	// the q.Oldest oldest PENDING runs of any name; and the q.Started
	// oldest started, unfinished runs.
	QueuedRuns(ctx context.Context, q QueueQuery) ([]Run, error)
	// SeeDevices records, at the store's clock, that a daemon reaches
	// devices selected by names (their QueueName forms are kept).
	SeeDevices(ctx context.Context, names []string) error
	// UnseenRuns returns up to limit PENDING runs created more than
	// after ago (the store's clock) whose device name no SeeDevices
	// recorded within after: runs no daemon of the fleet can serve.
	UnseenRuns(ctx context.Context, after time.Duration, limit int) ([]Run, error)
	// CountQueued is how many PENDING runs tenant has, counting at most
	// upTo (the store stops there).
	CountQueued(ctx context.Context, tenant string, upTo int) (int, error)
}

// QueueQuery selects QueuedRuns.
type QueueQuery struct {
	Names      []string
	PerTenant  int // per name and tenant (<= 0: 1)
	MaxTenants int // per name (<= 0: 64)
	Oldest     int // PENDING runs of any name (0: none)
	// Started: the oldest Started runs that started and did not end
	// (RUNNING, PAUSED, CANCELED_REQUESTED), through an index of those
	// rows alone, however many runs are queued (0: none).
	Started int
}

// QueueNotifier is a store whose writers signal what may start a queued
// run: a new run, a device lease released, by any process of the fleet
// (Postgres: NOTIFY on the queue channel). The channel has a buffer of
// one; a signal may stand for many changes.
type QueueNotifier interface {
	QueueChanged() <-chan struct{}
}

// QueueWakeFilter is a QueueNotifier whose signals name what changed: a
// device name in its normal form (QueueName), a new run's device name or a
// released lease's device key. FilterQueueWakes(f) makes QueueChanged
// signal only the names f accepts, and every signal that names nothing (a
// LISTEN reconnect), which f is shown as "" (its answer ignored); nil:
// every signal. f runs on the store's listener
// goroutine and must not block. A daemon passes the names of the devices
// it reaches, so that a new run or a freed device wakes the daemons that
// can act on it, not the whole fleet (Postgres: migration 00013).
type QueueWakeFilter interface {
	FilterQueueWakes(f func(name string) bool)
}

// QueueName is a device name's normal form, as the stores' queues compare
// names: trimmed of spaces, spaces as '_', lower case (the SQL
// lower(replace(trim(name), ' ', '_')); Postgres's lower() of a non-ASCII
// letter follows the database's locale and may differ, and such a name
// then wakes its daemon at the scheduler's next tick instead).
func QueueName(name string) string {
	return strings.ToLower(strings.ReplaceAll(strings.Trim(name, " "), " ", "_"))
}

// StoreClock is a store that tells its own time: the clock every daemon of
// a fleet shares for what decides across daemons (queue order, retention
// cutoffs, lease expiry). Errors: the store's.
type StoreClock interface {
	StoreNow(ctx context.Context) (time.Time, error)
}
