package qemu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/backend/qemu/qga"
)

// guest talks to the guest agent of one VM, with the facts of its image.
type guest struct {
	ga  *qga.Client
	img image
}

// basePath is the PATH of programs run through the guest agent.
const basePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func (g guest) env(extra []string) []string {
	env := append([]string{basePath, "HOME=/root", "LANG=C.UTF-8"}, g.img.Env...)
	return append(env, extra...)
}

// exec runs a program in the guest and waits for it. Arguments are passed as
// a list: nothing is parsed by a shell.
func (g guest) exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
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

// helper runs one of the image's helper commands and fails unless it exits 0.
func (g guest) helper(ctx context.Context, name string, stdin []byte, args ...string) (backend.ExecResult, error) {
	path := g.img.Helpers[name]
	if path == "" {
		return backend.ExecResult{}, fmt.Errorf("the image has no %s helper: %w", name, api.ErrUnsupported)
	}
	res, err := g.exec(ctx, backend.ExecRequest{Path: path, Args: args, Stdin: stdin})
	if err != nil {
		return res, err
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(string(res.Stderr))
		if msg == "" {
			msg = strings.TrimSpace(string(res.Stdout))
		}
		return res, fmt.Errorf("%s exited %d: %s", path, res.ExitCode, msg)
	}
	return res, nil
}

// waitAgent waits until the guest agent answers, or p dies.
func (g guest) waitAgent(ctx context.Context, p *proc) error {
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
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitReady waits until the guest's ready helper says the desktop is up.
func (g guest) waitReady(ctx context.Context, p *proc) error {
	var last error
	for {
		_, err := g.helper(ctx, helperReady, nil)
		if err == nil {
			return nil
		}
		last = err
		if !p.alive() {
			return errors.New("qemu exited")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// ready checks once that the agent answers and the desktop is up.
func (g guest) ready(ctx context.Context) error {
	if err := g.ga.Ping(ctx); err != nil {
		return fmt.Errorf("guest agent: %w", err)
	}
	if _, err := g.helper(ctx, helperReady, nil); err != nil {
		return fmt.Errorf("desktop: %w", err)
	}
	return nil
}

func (g guest) setResolution(ctx context.Context, res string) error {
	if _, _, err := api.ParseResolution(res); err != nil {
		return api.Invalid("resolution", "%v", err)
	}
	if _, err := g.helper(ctx, helperResolution, nil, res); err != nil {
		return fmt.Errorf("resolution %s: %v: %w", res, err, api.ErrUnsupported)
	}
	return nil
}

// identity gives a fresh clone its own hostname (the kernel's, and in
// /etc/hosts so that it resolves; /etc/hostname only matters at boot, and a
// clone never boots), machine id and boot id (the image's init binds
// /run/hvkube/boot_id over the kernel's, which is made once per boot). It writes files through the guest
// agent rather than running a program, which under emulation costs a
// second. It runs while the clone is being made:
// keystrokes sent while it runs can be lost. The kernel reseeds its random
// number generator by itself: every clone's vmgenid device reports a new
// generation ("crng reseeded due to virtual machine fork").
func (g guest) identity(ctx context.Context, hostname string) error {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return err
	}
	boot := make([]byte, 16)
	if _, err := rand.Read(boot); err != nil {
		return err
	}
	boot[6] = boot[6]&0x0f | 0x40 // a version 4 UUID, as the kernel makes
	boot[8] = boot[8]&0x3f | 0x80
	bootID := fmt.Sprintf("%x-%x-%x-%x-%x\n", boot[0:4], boot[4:6], boot[6:8], boot[8:10], boot[10:16])
	hosts := "127.0.0.1\tlocalhost\n127.0.1.1\t" + hostname + "\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"
	for _, f := range []struct {
		path string
		data []byte
	}{
		{"/etc/machine-id", []byte(hex.EncodeToString(id) + "\n")},
		{"/etc/hosts", []byte(hosts)},
		{"/proc/sys/kernel/hostname", []byte(hostname)},
		{"/run/hvkube/boot_id", []byte(bootID)},
	} {
		if err := g.ga.FileWrite(ctx, f.path, f.data); err != nil {
			return fmt.Errorf("guest identity: %s: %w", f.path, err)
		}
	}
	return nil
}

// setClock sets the guest's system clock. date is used rather than the
// agent's guest-set-time, which also runs hwclock: that waits for the RTC's
// next second and holds the agent for about a second under emulation.
func (g guest) setClock(ctx context.Context, t time.Time) error {
	arg := fmt.Sprintf("@%d.%09d", t.Unix(), t.Nanosecond())
	res, err := g.exec(ctx, backend.ExecRequest{Path: "date", Args: []string{"-u", "-s", arg}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("date -s exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

func (g guest) clipboardGet(ctx context.Context) (string, error) {
	res, err := g.helper(ctx, helperClipboardGet, nil)
	if err != nil {
		return "", err
	}
	return string(res.Stdout), nil
}

func (g guest) clipboardSet(ctx context.Context, text string) error {
	_, err := g.helper(ctx, helperClipboardSet, []byte(text))
	return err
}
