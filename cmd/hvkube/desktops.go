package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/datadir"
)

// lockDataDir takes cfg's data directory for this process (datadir.Lock),
// and lets it go when the process exits.
func lockDataDir(cfg serveConfig) (func(), error) {
	unlock, err := datadir.Lock(cfg.dataDir)
	if err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", cfg.dataDir, err)
	}
	return unlock, nil
}

// withProcess lists be's desktops that still have a process: running
// (or stopped on a failed disk write) or paused.
func withProcess(ctx context.Context, be backend.Backend) ([]backend.Info, error) {
	infos, err := be.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []backend.Info
	for _, in := range infos {
		switch in.State {
		case backend.StateRunning, backend.StateIOError, backend.StatePaused:
			out = append(out, in)
		}
	}
	return out, nil
}

// sayDesktopsLeft tells w, on the server's way out, which desktops keep
// running without it (kept for the next start to take back), and how to
// stop them.
func sayDesktopsLeft(ctx context.Context, w io.Writer, be backend.Backend, dataDir string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	left, err := withProcess(ctx, be)
	if err != nil {
		log.Warn("could not count the desktops left running", "err", err)
		return
	}
	if len(left) == 0 {
		return
	}
	paused := 0
	for _, in := range left {
		if in.State == backend.StatePaused {
			paused++
		}
	}
	running := len(left) - paused
	n := fmt.Sprintf("%d desktops keep", running+paused)
	if running+paused == 1 {
		n = "1 desktop keeps"
	}
	fmt.Fprintf(w, "hvkube: %s running without the server (%d running, %d paused in memory); the next start on %s takes them back. To stop them all: hvkube serve --stop-desktops --data-dir %s (make stop)\n",
		n, running, paused, dataDir, dataDir)
}

// stopDesktops saves every desktop of be that has a process to disk,
// which ends its process and frees its memory, reporting each to w. Their
// objects are not touched: the next start finds them Saved, and restores
// them as they are claimed or resumed.
func stopDesktops(ctx context.Context, w io.Writer, be backend.Backend) error {
	todo, err := withProcess(ctx, be)
	if err != nil {
		return err
	}
	if len(todo) == 0 {
		fmt.Fprintln(w, "no desktops are running")
		return nil
	}
	var errs []error
	for i, in := range todo {
		fmt.Fprintf(w, "saving desktop %s to disk (%d of %d, %s)…\n", in.ID, i+1, len(todo), in.State)
		start := time.Now()
		if err := be.Save(ctx, in.ID); err != nil {
			fmt.Fprintf(w, "  could not save it (%v); stopping it instead\n", err)
			if err := be.Stop(ctx, in.ID); err != nil {
				errs = append(errs, fmt.Errorf("desktop %s: %w", in.ID, err))
			}
			continue
		}
		fmt.Fprintf(w, "  saved in %.1fs\n", time.Since(start).Seconds())
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(w, "stopped %d desktops: their memory is free; the next start finds them Saved (a pool restores them as agents claim them; hvkube resume NAME restores one)\n", len(todo))
	return nil
}
