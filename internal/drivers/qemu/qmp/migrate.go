package qmp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrMigrationFailed is wrapped by WaitMigration's error when a migration
// ends in the failed or cancelled state.
var ErrMigrationFailed = errors.New("migration failed")

// MigrationStatus is the state of a migration (QAPI MigrationStatus).
type MigrationStatus string

// Migration states. A migration that never started reports none (or no
// status at all, which QueryMigrate also reports as none).
const (
	MigrationNone       MigrationStatus = "none"
	MigrationSetup      MigrationStatus = "setup"
	MigrationActive     MigrationStatus = "active"
	MigrationDevice     MigrationStatus = "device"
	MigrationCancelling MigrationStatus = "cancelling"
	MigrationCancelled  MigrationStatus = "cancelled"
	MigrationCompleted  MigrationStatus = "completed"
	MigrationFailed     MigrationStatus = "failed"
)

// MigrationInfo is the reply to query-migrate (the members a backend uses).
type MigrationInfo struct {
	Status MigrationStatus `json:"status"`
	// ErrorDesc explains a failed migration, when QEMU says why.
	ErrorDesc string `json:"error-desc,omitempty"`
	// TotalTime is the migration's duration so far (or in total, once
	// completed) in milliseconds.
	TotalTime int64 `json:"total-time,omitempty"`
	// Downtime is how long the VM was stopped, in milliseconds, once
	// completed.
	Downtime int64 `json:"downtime,omitempty"`
	// SetupTime is the setup phase's duration in milliseconds.
	SetupTime int64 `json:"setup-time,omitempty"`
	// RAM has the RAM transfer statistics while active and once completed.
	RAM *MigrationRAM `json:"ram,omitempty"`
}

// MigrationRAM is the RAM part of MigrationInfo. Sizes are in bytes.
type MigrationRAM struct {
	Transferred int64   `json:"transferred"`
	Remaining   int64   `json:"remaining"`
	Total       int64   `json:"total"`
	Duplicate   int64   `json:"duplicate"`
	Normal      int64   `json:"normal"`
	NormalBytes int64   `json:"normal-bytes"`
	Mbps        float64 `json:"mbps"`
}

// MigrateSetCapabilities turns migration capabilities on or off
// (migrate-set-capabilities), e.g. {"x-ignore-shared": true} to skip RAM
// that lives in a shared memory backend, or {"events": true} to have QEMU
// emit MIGRATION events on state changes. It must be called before Migrate
// or MigrateIncoming, on both sides where a capability affects the stream.
func (m *Monitor) MigrateSetCapabilities(ctx context.Context, caps map[string]bool) error {
	type capability struct {
		Capability string `json:"capability"`
		State      bool   `json:"state"`
	}
	names := make([]string, 0, len(caps))
	for n := range caps {
		names = append(names, n)
	}
	slices.Sort(names) // a stable command line, for logs and tests
	list := make([]capability, 0, len(names))
	for _, n := range names {
		list = append(list, capability{n, caps[n]})
	}
	return m.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": list}, nil)
}

// MigrateSetParameters sets migration parameters (migrate-set-parameters),
// e.g. {"max-bandwidth": int64(8 << 30)}. QEMU throttles migration to
// max-bandwidth bytes per second, 128 MiB/s by default, which makes saving
// a large guest to a local file needlessly slow; raise it for local saves.
func (m *Monitor) MigrateSetParameters(ctx context.Context, params map[string]any) error {
	return m.Execute(ctx, "migrate-set-parameters", params, nil)
}

// Migrate starts an outgoing migration to uri (migrate) and returns once it
// has started; use WaitMigration to wait for the end. uri is e.g.
// "fd:NAME" (a descriptor passed with SendFD), "exec:CMD", "unix:PATH" or
// "file:PATH" (QEMU 8.2+). The VM stops when the migration completes and is
// left in the postmigrate state.
func (m *Monitor) Migrate(ctx context.Context, uri string) error {
	return m.Execute(ctx, "migrate", map[string]string{"uri": uri}, nil)
}

// MigrateIncoming starts receiving an incoming migration from uri
// (migrate-incoming) in a QEMU started with -incoming defer, and returns
// once it has started; use WaitMigration to wait for the end. Afterwards
// the VM is in the run state the source was in when its state was saved if
// that was not running (paused, or prelaunch for a VM that never ran),
// whether or not QEMU was started with -S; a VM saved while running runs at
// once, or is paused if QEMU was started with -S.
func (m *Monitor) MigrateIncoming(ctx context.Context, uri string) error {
	return m.Execute(ctx, "migrate-incoming", map[string]string{"uri": uri}, nil)
}

// MigrateCancel cancels the outgoing migration in progress (migrate_cancel);
// it succeeds when there is none.
func (m *Monitor) MigrateCancel(ctx context.Context) error {
	return m.Execute(ctx, "migrate_cancel", nil, nil)
}

// QueryMigrate returns the state of the current or last migration
// (query-migrate), outgoing or incoming.
func (m *Monitor) QueryMigrate(ctx context.Context) (MigrationInfo, error) {
	var info MigrationInfo
	err := m.Execute(ctx, "query-migrate", nil, &info)
	if info.Status == "" {
		info.Status = MigrationNone
	}
	return info, err
}

// WaitMigration waits until the current migration (outgoing or incoming)
// completes, and returns its final MigrationInfo. A migration that ends
// failed or cancelled yields an error wrapping ErrMigrationFailed with
// QEMU's reason. A migration that has not started yet (status none) is
// waited for too, so bound the wait with ctx.
//
// It polls query-migrate with a short backoff (1 ms doubling to 50 ms) and
// also polls at once on every MIGRATION event, which QEMU sends only with
// the "events" capability on.
func (m *Monitor) WaitMigration(ctx context.Context) (MigrationInfo, error) {
	sub := m.Subscribe("MIGRATION")
	defer sub.Cancel()

	const maxDelay = 50 * time.Millisecond
	delay := time.Millisecond
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		info, err := m.QueryMigrate(ctx)
		if err != nil {
			return info, err
		}
		switch info.Status {
		case MigrationCompleted:
			return info, nil
		case MigrationFailed, MigrationCancelled:
			reason := info.ErrorDesc
			if reason == "" {
				reason = "no reason given"
			}
			return info, fmt.Errorf("qmp migration %s: %s: %w", info.Status, reason, ErrMigrationFailed)
		}

		timer.Reset(delay) // since Go 1.23, Reset never leaves a stale tick in C
		select {
		case <-ctx.Done():
			return info, fmt.Errorf("qmp wait migration (status %s): %w", info.Status, context.Cause(ctx))
		case <-m.done:
			return info, fmt.Errorf("qmp wait migration: %w", m.Err())
		case <-sub.C:
		case <-timer.C:
			delay = min(2*delay, maxDelay)
		}
	}
}
