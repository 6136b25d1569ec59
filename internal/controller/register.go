// Package controller holds hvkube's controllers that only read and write
// objects: the scheduler, the agents' bookkeeping, the pools and the
// display services. It imports no backend; they run on the Manager of
// package reconcile, beside the node's controllers, which own VMs.
package controller

import (
	"log/slog"
	"time"

	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// RegisterAll registers the controllers that only read and write objects:
// the scheduler, agents, pools and display services. now is the clock
// (time.Now when nil); display, at most one, describes the server for the
// display services' endpoints.
func RegisterAll(m *reconcile.Manager, st store.Interface, log *slog.Logger, now func() time.Time, display ...DisplayConfig) {
	if log == nil {
		log = slog.Default()
	}
	NewScheduler(m, st, log, now)
	NewAgents(m, st, log, now)
	NewPools(m, st, log, now)
	NewPlacement(m, st, log, now)
	var dc DisplayConfig
	if len(display) > 0 {
		dc = display[0]
	}
	NewDisplayServices(m, st, log, now, dc)
}
