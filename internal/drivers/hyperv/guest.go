package hyperv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/guest"
	"github.com/hvkube/hvkube/internal/powershell"
)

var _ backend.Guest = (*Backend)(nil)

// Guest calls go through PowerShell Direct (Invoke-Command -VMId,
// New-PSSession -VMId), which needs no network in the guest, only a
// running Windows 10 / Windows Server 2016 or later guest and the guest
// account of Config.CredentialFile. They hold no lock: a call to a guest
// that is paused meanwhile waits until it runs again (or its context
// ends), and must not hold up the pause, resume or delete.
//
// Programs run in the PowerShell Direct session, which is not the
// desktop's session: a program that must show on the desktop needs the
// guest OS's own means (a scheduled task for the logged-on user).

var tempSeq atomic.Int64

// guestReply is the part of every guest script's output that says whether
// the VM was there to run it.
type guestReply struct {
	State string
}

// check turns a guest script's State into an error: an empty State is a missing VM,
// anything but Running a VM that cannot run programs now.
func (g guestReply) check(id string) error {
	switch g.State {
	case "Running":
		return nil
	case "":
		return fmt.Errorf("sandbox %q %w", id, api.ErrNotFound)
	}
	return conflict(id, g.State, "guest")
}

// Exec implements backend.Guest. The program and its arguments become one
// Windows command line (see quoteArg); Env entries are added to the
// program's environment. With Detach the program is started through WMI
// and outlives the call; it takes no standard input.
func (b *Backend) Exec(ctx context.Context, id string, req backend.ExecRequest) (backend.ExecResult, error) {
	if err := checkID(id); err != nil {
		return backend.ExecResult{}, err
	}
	if err := checkExec(req.Path, req.Args, req.Env); err != nil {
		return backend.ExecResult{}, err
	}
	env := req.Env
	if env == nil {
		env = []string{}
	}
	if req.Detach {
		if len(req.Stdin) > 0 {
			return backend.ExecResult{}, fmt.Errorf("exec %s: a detached program takes no standard input on Hyper-V: %w", req.Path, api.ErrUnsupported)
		}
		var out struct {
			guestReply
			StartError string
			ProcessId  int
		}
		err := b.run(ctx, scriptGuestStart, powershell.Args{
			"Name": vmName(id), "CredentialFile": b.cfg.CredentialFile,
			"CommandLine": commandLine(req.Path, req.Args), "Environment": env,
		}, &out)
		if err != nil {
			return backend.ExecResult{}, fmt.Errorf("exec %s: %w", req.Path, err)
		}
		if err := out.check(id); err != nil {
			return backend.ExecResult{}, err
		}
		if out.StartError != "" {
			return backend.ExecResult{}, fmt.Errorf("exec %s: %s: %w", req.Path, out.StartError, api.ErrInvalid)
		}
		return backend.ExecResult{}, nil
	}
	stdin := req.Stdin
	if stdin == nil {
		stdin = []byte{}
	}
	var out struct {
		guestReply
		StartError string
		ExitCode   int
		Stdout     []byte
		Stderr     []byte
	}
	err := b.run(ctx, scriptGuestExec, powershell.Args{
		"Name": vmName(id), "CredentialFile": b.cfg.CredentialFile,
		"FilePath": req.Path, "Arguments": joinArgs(req.Args), "Environment": env, "Stdin": stdin,
	}, &out)
	if err != nil {
		return backend.ExecResult{}, fmt.Errorf("exec %s: %w", req.Path, err)
	}
	if err := out.check(id); err != nil {
		return backend.ExecResult{}, err
	}
	if out.StartError != "" {
		return backend.ExecResult{}, fmt.Errorf("exec %s: %s: %w", req.Path, out.StartError, api.ErrInvalid)
	}
	return backend.ExecResult{ExitCode: out.ExitCode, Stdout: out.Stdout, Stderr: out.Stderr}, nil
}

// checkGuestPath refuses guest paths that are not absolute Windows paths.
func checkGuestPath(p string) error {
	if !(guest.WindowsOS{}).IsAbs(p) {
		return api.Invalid("path", "%q is not an absolute Windows path (C:\\dir\\file)", p)
	}
	return nil
}

// CopyIn implements backend.Guest: the data goes to a scratch file on the
// host, then into the guest with Copy-Item -ToSession. The guest file's
// directory must exist.
func (b *Backend) CopyIn(ctx context.Context, id, guestPath string, r io.Reader) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := checkGuestPath(guestPath); err != nil {
		return err
	}
	tmp := b.tempPath("in")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	var out guestReply
	err = b.run(ctx, scriptGuestCopyIn, powershell.Args{
		"Name": vmName(id), "CredentialFile": b.cfg.CredentialFile, "Source": tmp, "Destination": guestPath,
	}, &out)
	if err != nil {
		return fmt.Errorf("write %s: %w", guestPath, err)
	}
	return out.check(id)
}

// CopyOut implements backend.Guest: Copy-Item -FromSession into a scratch
// file on the host, which is then streamed to w.
func (b *Backend) CopyOut(ctx context.Context, id, guestPath string, w io.Writer) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := checkGuestPath(guestPath); err != nil {
		return err
	}
	tmp := b.tempPath("out")
	defer os.Remove(tmp)
	var out guestReply
	err := b.run(ctx, scriptGuestCopyOut, powershell.Args{
		"Name": vmName(id), "CredentialFile": b.cfg.CredentialFile, "Source": guestPath, "Destination": tmp,
	}, &out)
	if err != nil {
		return fmt.Errorf("read %s: %w", guestPath, err)
	}
	if err := out.check(id); err != nil {
		return err
	}
	f, err := os.Open(tmp)
	if err != nil {
		return fmt.Errorf("read %s: %w", guestPath, err)
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// ClipboardGet implements backend.Guest, through the guest OS.
func (b *Backend) ClipboardGet(ctx context.Context, id string) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	osys, err := b.guestOS(ctx, id)
	if err != nil {
		return "", err
	}
	return osys.ClipboardGet(ctx, b.runner(id))
}

// ClipboardSet implements backend.Guest, through the guest OS.
func (b *Backend) ClipboardSet(ctx context.Context, id, text string) error {
	if err := checkID(id); err != nil {
		return err
	}
	osys, err := b.guestOS(ctx, id)
	if err != nil {
		return err
	}
	return osys.ClipboardSet(ctx, b.runner(id), text)
}

// vmRunner is a guest.Runner bound to one sandbox: the guest OS's
// programs run through Exec, its files are written through CopyIn.
type vmRunner struct {
	b  *Backend
	id string
}

var (
	_ guest.Runner     = vmRunner{}
	_ guest.FileWriter = vmRunner{}
)

func (b *Backend) runner(id string) vmRunner { return vmRunner{b: b, id: id} }

func (r vmRunner) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	return r.b.Exec(ctx, r.id, req)
}

func (r vmRunner) WriteFile(ctx context.Context, path string, data []byte) error {
	return r.b.CopyIn(ctx, r.id, path, bytes.NewReader(data))
}
