package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
)

// proc is a running QEMU and its monitor connection.
type proc struct {
	pid  int
	name string
	dir  string
	mon  *qmp.Monitor
	// exited closes when the process ends; nil for adopted processes,
	// which are polled instead.
	exited <-chan struct{}
	// link is its guest network (network.go), nil without a NIC. It
	// ends with the process.
	link *link
}

// launch starts QEMU for m in dir and connects to its monitor and, if m
// has a NIC, its guest network (with no egress until a sandbox takes it).
func (b *Backend) launch(ctx context.Context, m machine, dir string) (*proc, error) {
	run := filepath.Dir(m.QMPSocket)
	if err := os.MkdirAll(run, 0o700); err != nil {
		return nil, err
	}
	for _, s := range []string{m.QMPSocket, m.QGASocket, m.VNCSocket, m.NetSocket} {
		if s != "" {
			os.Remove(s)
		}
	}
	os.Remove(m.PIDFile)
	var files []*os.File
	if m.DiskFDs {
		for _, flag := range []int{os.O_RDWR, os.O_RDONLY} {
			f, err := os.OpenFile(m.Disk, flag, 0)
			if err != nil {
				return nil, err
			}
			defer f.Close() // the child has its own copy
			files = append(files, f)
		}
	}
	pid, exited, err := startProcess(b.cfg.Binary, m.args(), dir, filepath.Join(dir, "qemu.log"), files)
	if err != nil {
		return nil, err
	}
	p := &proc{pid: pid, name: m.Name, dir: dir, exited: exited}
	deadline := time.Now().Add(15 * time.Second)
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		mon, err := qmp.Dial(dctx, m.QMPSocket)
		cancel()
		if err == nil {
			p.mon = mon
			if m.NetSocket != "" {
				if p.link, err = b.startLink(ctx, p, m.NetSocket, m.Network); err != nil {
					p.kill()
					return nil, fmt.Errorf("guest network: %w%s", err, p.logTail())
				}
			}
			return p, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("qemu exited at start%s", p.logTail())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.kill()
			return nil, fmt.Errorf("qemu monitor did not answer: %w%s", err, p.logTail())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// adopt connects to a QEMU that runs from before a server restart.
func adopt(ctx context.Context, pid int, name, dir, qmpSocket string) (*proc, error) {
	if !processAlive(pid, name) {
		return nil, errors.New("not running")
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	mon, err := qmp.Dial(dctx, qmpSocket)
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	return &proc{pid: pid, name: name, dir: dir, mon: mon}, nil
}

func (p *proc) alive() bool {
	if p == nil {
		return false
	}
	if p.exited != nil {
		select {
		case <-p.exited:
			return false
		default:
		}
	}
	// Killed but not reaped yet counts as gone too.
	return processAlive(p.pid, p.name)
}

// quit asks QEMU to exit, then kills it if it does not.
func (p *proc) quit(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	p.mon.Quit(qctx)
	return p.kill()
}

// kill ends the process and waits until it is gone; its guest network
// ends with it.
func (p *proc) kill() error {
	defer p.link.close()
	if p.mon != nil {
		p.mon.Close()
	}
	if p.exited != nil {
		select {
		case <-p.exited:
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := killProcess(p.pid, p.name, 10*time.Second); err != nil {
		return err
	}
	if p.exited != nil {
		<-p.exited
	}
	return nil
}

// logTail returns the end of QEMU's log, for error messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(filepath.Join(p.dir, "qemu.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = "…" + s[len(s)-600:]
	}
	return ": qemu says: " + s
}

// procRef names a process: its pid and its QEMU -name.
type procRef struct {
	pid  int
	name string
}

// childEnv is the environment of the processes the backend starts: the
// server's, without its own variables (HVKUBE_TOKEN among them). QEMU and
// qemu-img need none of them, and a guest-facing process must not hold the
// API's secrets.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HVKUBE_") {
			env = append(env, kv)
		}
	}
	return env
}

// removeStrays kills the QEMU processes of this backend's directory that no
// sandbox owns: spares and template builds of a server that was killed, and
// QEMUs whose sandbox directory is gone. It runs once at start, after the
// sandboxes are adopted.
func (b *Backend) removeStrays() {
	owned := map[int]bool{}
	b.mu.Lock()
	for _, v := range b.vms {
		owned[v.meta.PID] = true
		if v.p != nil {
			owned[v.p.pid] = true
		}
	}
	b.mu.Unlock()
	for _, p := range ownProcesses(b.cfg.Dir) {
		if owned[p.pid] {
			continue
		}
		b.log.Warn("killing a QEMU that no sandbox owns (left by an earlier server)", "pid", p.pid, "name", p.name)
		if err := killProcess(p.pid, p.name, 10*time.Second); err != nil {
			b.log.Error("could not kill a stray QEMU", "pid", p.pid, "err", err)
		}
	}
}
