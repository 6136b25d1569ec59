package vmdebug

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/backend/direct"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/guest"
)

// WaitOptions configure WaitReady.
type WaitOptions struct {
	// QGA is the guest agent's socket.
	QGA string
	// Since is when the clock of the printed times starts (QEMU's start);
	// zero is now.
	Since time.Time
	// Timeout bounds the whole wait.
	Timeout time.Duration
	// PID, when not 0, is QEMU's process: the wait ends when it exits.
	PID int
	// Ready is the guest's ready helper (default: images/linux-desktop's),
	// run with Env (default XEnv).
	Ready string
	Env   []string
	// Out gets a line when the agent answers and when the desktop is
	// ready; Verbose (if not nil) a line per failed attempt.
	Out, Verbose io.Writer
}

// Bounds of one attempt of WaitReady.
const (
	// readyPoll is the pause between attempts: the ready helper costs the
	// guest about half a second of an emulated vCPU, and polling faster
	// slows the boot it waits for.
	readyPoll = 500 * time.Millisecond
	// syncTry bounds one sync with the agent; before the agent runs none
	// is answered, and the next sync goes on the same connection.
	syncTry = 2 * time.Second
	// readyTry bounds one run of the ready helper.
	readyTry = 15 * time.Second
)

// WaitReady waits until the guest agent at o.QGA, reached with dial,
// answers, then until the ready helper exits 0, printing the times since
// Since. It keeps one Agent, and so one connection, for the whole wait, so
// that a sync sent before the agent ran is answered as soon as it starts.
func WaitReady(ctx context.Context, dial direct.Dialer, o WaitOptions) error {
	if o.Since.IsZero() {
		o.Since = time.Now()
	}
	if o.Ready == "" {
		o.Ready = guest.DefaultHelpers[guest.HelperReady]
	}
	if o.Env == nil {
		o.Env = XEnv
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	gaveUp := func(last error) error {
		if err := parent.Err(); err != nil {
			return err
		}
		return fmt.Errorf("not ready after %s: %v", o.Timeout, last)
	}
	c := dial.Agent(o.QGA)
	defer c.Close()
	elapsed := func() string { return fmt.Sprintf("%.1f s", time.Since(o.Since).Seconds()) }
	last := errors.New("the guest agent did not answer")
	agentUp := false
	for {
		if o.PID != 0 && !alive(o.PID) {
			return fmt.Errorf("%w (pid %d) before the desktop was ready: %v", errExited, o.PID, last)
		}
		err := func() error {
			if !agentUp {
				sctx, cancel := context.WithTimeout(ctx, syncTry)
				defer cancel()
				if err := c.Sync(sctx); err != nil {
					return err
				}
				agentUp = true
				fmt.Fprintf(o.Out, "guest agent answered after %s\n", elapsed())
			}
			rctx, cancel := context.WithTimeout(ctx, readyTry)
			defer cancel()
			res, err := c.Exec(rctx, backend.ExecRequest{Path: o.Ready, Env: o.Env})
			if err != nil {
				return err
			}
			out := strings.TrimSpace(string(res.Stdout) + string(res.Stderr))
			if res.ExitCode != 0 {
				return fmt.Errorf("%s exited %d: %s", o.Ready, res.ExitCode, out)
			}
			fmt.Fprintf(o.Out, "desktop ready after %s (%s)\n", elapsed(), out)
			return nil
		}()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return gaveUp(last)
		}
		last = err
		if o.Verbose != nil {
			fmt.Fprintf(o.Verbose, "  %s: %v\n", elapsed(), err)
		}
		if clock.Sleep(ctx, readyPoll) != nil {
			return gaveUp(last)
		}
	}
}
