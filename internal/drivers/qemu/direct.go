package qemu

import (
	"context"
	"encoding/json"
	"time"

	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/backend/direct"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qga"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
)

// Direct reaches one QEMU VM by its QMP and guest-agent sockets
// (direct.Dialer), with no Backend: for the tools that develop guest
// images on a VM hvkube does not manage. Input goes out as the Backend
// sends it (one input-send-event per change, the same pointer mapping and
// button names); programs run through the same agent client, but with
// the environment asked for, not the Backend's.
type Direct struct{}

var _ direct.Dialer = Direct{}

// DialMonitor implements direct.Dialer.
func (Direct) DialMonitor(ctx context.Context, socket string) (direct.Monitor, error) {
	mon, err := qmp.Dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	return directMonitor{mon}, nil
}

// Agent implements direct.Dialer.
func (Direct) Agent(socket string) direct.Agent { return directAgent{qga.New(socket)} }

// directMonitor is a direct.Monitor over QMP.
type directMonitor struct{ mon *qmp.Monitor }

func (m directMonitor) Command(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	// No arguments is no "arguments" member, not a null one.
	var argv any
	if args != nil {
		argv = args
	}
	var ret json.RawMessage
	if err := m.mon.Execute(ctx, name, argv, &ret); err != nil {
		return nil, err
	}
	return ret, nil
}

func (m directMonitor) Screendump(ctx context.Context, path string) error {
	return m.mon.ScreendumpPPM(ctx, path)
}

func (m directMonitor) SendEvent(ctx context.Context, e backend.InputEvent, width, height int) error {
	if err := checkEvents([]backend.InputEvent{e}, width, height); err != nil {
		return err
	}
	return m.mon.InputSendEvent(ctx, qmpEvents(e, width, height))
}

func (m directMonitor) Close() error { return m.mon.Close() }

// directAgent is a direct.Agent over the QEMU guest agent.
type directAgent struct{ ga *qga.Client }

func (a directAgent) Sync(ctx context.Context) error { return a.ga.Sync(ctx) }

func (a directAgent) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	qr := qga.ExecRequest{Path: req.Path, Args: req.Args, Env: req.Env, Input: req.Stdin}
	if req.Detach {
		_, err := a.ga.ExecStart(ctx, qr)
		return backend.ExecResult{}, err
	}
	qr.CaptureOutput = true
	res, err := a.ga.Exec(ctx, qr)
	if err != nil {
		return backend.ExecResult{}, err
	}
	code := res.ExitCode
	if res.Signal != 0 {
		code = 128 + res.Signal
	}
	return backend.ExecResult{ExitCode: code, Stdout: res.Stdout, Stderr: res.Stderr}, nil
}

func (a directAgent) SetTime(ctx context.Context, t time.Time) error { return a.ga.SetTime(ctx, t) }

func (a directAgent) Time(ctx context.Context) (time.Time, error) { return a.ga.Time(ctx) }

func (a directAgent) Close() error { return a.ga.Close() }
