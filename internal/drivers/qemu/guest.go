package qemu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qga"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
	guestos "github.com/hvkube/hvkube/internal/guest"
)

// guest talks to the guest agent of one VM. It is the guest OS's Runner
// (and FileWriter): what the backend does in the guest, the OS knows how
// to do (internal/guest), and the guest agent carries it.
type guest struct {
	ga   *qga.Client
	img  image
	os   guestos.OS
	gate gate // closed while a clone's identity is written
}

func newGuest(ga *qga.Client, img image) *guest {
	return &guest{ga: ga, img: img, os: guestos.NewLinux(img.Helpers)}
}

// basePath is the PATH of programs run through the guest agent.
const basePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func (g *guest) env(extra []string) []string {
	env := append([]string{basePath, "HOME=/root", "LANG=C.UTF-8"}, g.img.Env...)
	return append(env, extra...)
}

// Exec implements guest.Runner: it runs a program in the guest and waits
// for it. Arguments are passed as a list: nothing is parsed by a shell.
func (g *guest) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	if req.Detach {
		_, err := g.ga.ExecStart(ctx, qga.ExecRequest{Path: req.Path, Args: req.Args, Env: g.env(req.Env), Input: req.Stdin})
		if err != nil {
			return backend.ExecResult{}, fmt.Errorf("start %s: %w", req.Path, err)
		}
		return backend.ExecResult{}, nil
	}
	res, err := g.ga.Exec(ctx, qga.ExecRequest{Path: req.Path, Args: req.Args, Env: g.env(req.Env), Input: req.Stdin, CaptureOutput: true})
	if err != nil {
		var qe *qga.Error
		if errors.As(err, &qe) {
			return backend.ExecResult{}, fmt.Errorf("exec %s: %s: %w", req.Path, qe.Desc, api.ErrInvalid)
		}
		return backend.ExecResult{}, fmt.Errorf("exec %s: %w", req.Path, err)
	}
	code := res.ExitCode
	if res.Signal != 0 {
		code = 128 + res.Signal
	}
	return backend.ExecResult{ExitCode: code, Stdout: res.Stdout, Stderr: res.Stderr}, nil
}

// WriteFile implements guest.FileWriter with the agent's file calls.
func (g *guest) WriteFile(ctx context.Context, path string, data []byte) error {
	return g.ga.FileWrite(ctx, path, data)
}

// waitAgent waits until the guest agent answers, or p dies, or its guest
// stops for good (a KVM that cannot run the guest stops it with an
// internal error at once; waiting out the boot timeout would say nothing
// more).
func (g *guest) waitAgent(ctx context.Context, p *proc) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := g.ga.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if !p.alive() {
			return errors.New("qemu exited")
		}
		if err := stoppedForGood(ctx, p); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last: %v)", context.Cause(ctx), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stoppedForGood returns an error if p's guest is in a run state it does
// not leave by itself: an internal error (a failed KVM entry or an
// instruction KVM cannot emulate), a disk error, a panic or a shutdown.
func stoppedForGood(ctx context.Context, p *proc) error {
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := p.mon.Status(sctx)
	if err != nil {
		return nil // the ping's error says more
	}
	switch st.Status {
	case qmp.StateInternalError, qmp.StateIOError, qmp.StateGuestPanicked, qmp.StateShutdown:
		return stoppedError{st.Status}
	}
	return nil
}

// stoppedError is a guest in a run state it does not leave by itself.
type stoppedError struct{ state qmp.RunState }

func (e stoppedError) Error() string { return "the guest stopped: qemu reports " + string(e.state) }

// internalError reports whether err says the guest stopped with an
// internal error: under KVM, an instruction KVM could not emulate or a
// failed VM entry.
func internalError(err error) bool {
	var s stoppedError
	return errors.As(err, &s) && s.state == qmp.StateInternalError
}

// answer waits until the guest agent of a guest that was just resumed
// answers a ping. A request caught by the pause and aborted by the resume
// can leave the next one failing once: the ping is tried again on a new
// connection until ctx ends, while p runs.
func (g *guest) answer(ctx context.Context, p *proc) error {
	// Each ping has a time of its own, growing: a request can stay stuck
	// in the channel until more bytes come (after a stop, for one), and a
	// new connection sends them.
	try := 2 * time.Second
	for {
		pctx, cancel := context.WithTimeout(ctx, try)
		err := g.ga.Ping(pctx)
		cancel()
		if err == nil || ctx.Err() != nil || !p.alive() {
			return err
		}
		try = min(2*try, 16*time.Second)
		// Abort, not Disconnect: Disconnect waits for the requests in
		// flight, and one stuck in the channel never ends.
		g.ga.Abort()
		select {
		case <-ctx.Done():
			return err
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitReady waits until the guest OS says the desktop is up.
func (g *guest) waitReady(ctx context.Context, p *proc) error {
	var last error
	for {
		err := g.os.Ready(ctx, g)
		if err == nil {
			return nil
		}
		last = err
		if !p.alive() {
			return errors.New("qemu exited")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", context.Cause(ctx), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// ready checks once that the agent answers and the desktop is up.
func (g *guest) ready(ctx context.Context) error {
	if err := g.ga.Ping(ctx); err != nil {
		return fmt.Errorf("guest agent: %w", err)
	}
	if err := g.os.Ready(ctx, g); err != nil {
		return fmt.Errorf("desktop: %w", err)
	}
	return nil
}
