// Package controller holds hvkube's controllers that only read and write
// objects: the scheduler, the agents' bookkeeping, the pools, the display
// services and the lost-node controller. It imports no backend; they run
// on the Manager of package reconcile, beside the node's controllers,
// which own VMs.
package controller

import (
	"log/slog"
	"time"

	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// Options configure the controllers Register adds.
type Options struct {
	// Now is the clock of deadlines and timestamps (time.Now when nil).
	Now func() time.Time
	// Display describes the server for the display services' endpoints.
	Display DisplayConfig
	// NodeGrace is how long a node may go without a new heartbeat before
	// it is marked lost (DefaultNodeGrace when 0). It must exceed the
	// nodes' fence (node Options.FenceAfter) plus their status interval;
	// it is measured on this process's own clock, not on Now. Negative
	// runs no lost-node controller (one host, whose node is in this
	// process).
	NodeGrace time.Duration
}

// Register registers the controllers that only read and write objects:
// the scheduler, agents, pools, placement, display services and lost
// nodes. They run where the scheduler runs, once per cluster.
func Register(m *reconcile.Manager, st store.Interface, log *slog.Logger, opts Options) {
	if log == nil {
		log = slog.Default()
	}
	now := opts.Now
	NewScheduler(m, st, log, now)
	NewAgents(m, st, log, now)
	pools := NewPools(m, st, log, now)
	pools.place = NewPlacement(m, st, log, now).placeNew
	NewDisplayServices(m, st, log, now, opts.Display)
	NewForkTemplates(m, st, log, now)
	if opts.NodeGrace >= 0 {
		NewLostNodes(m, st, log, now, opts.NodeGrace)
	}
}

// RegisterAll is Register with the default options but now (time.Now when
// nil) and display, at most one.
func RegisterAll(m *reconcile.Manager, st store.Interface, log *slog.Logger, now func() time.Time, display ...DisplayConfig) {
	opts := Options{Now: now}
	if len(display) > 0 {
		opts.Display = display[0]
	}
	Register(m, st, log, opts)
}
