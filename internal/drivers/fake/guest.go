package fake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// FS is the file system of one fake sandbox: a map from absolute,
// cleaned paths to contents. Directories are not kept; a directory exists
// while a file lies under it. Its methods take the backend's lock, so an
// Options.Exec hook may use them freely. The zero FS has no files and
// ignores writes.
type FS struct {
	b *Backend
	s *sandbox
}

// ReadFile returns a copy of the file at p, and whether it exists.
func (f FS) ReadFile(p string) ([]byte, bool) {
	if f.b == nil {
		return nil, false
	}
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	data, ok := f.s.files[cleanPath(p)]
	return bytes.Clone(data), ok
}

// WriteFile sets the file at p to a copy of data.
func (f FS) WriteFile(p string, data []byte) {
	if f.b == nil {
		return
	}
	data = bytes.Clone(data)
	if data == nil {
		data = []byte{}
	}
	f.b.mu.Lock()
	f.s.files[cleanPath(p)] = data
	f.b.mu.Unlock()
}

// Remove removes the file at p; a missing file is no error.
func (f FS) Remove(p string) {
	if f.b == nil {
		return
	}
	f.b.mu.Lock()
	delete(f.s.files, cleanPath(p))
	f.b.mu.Unlock()
}

// Exists reports whether p is a file, or a directory with a file under it.
func (f FS) Exists(p string) bool {
	if f.b == nil {
		return false
	}
	p = cleanPath(p)
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	if _, ok := f.s.files[p]; ok {
		return true
	}
	return f.isDirLocked(p)
}

// Paths returns the paths of all files, sorted.
func (f FS) Paths() []string {
	if f.b == nil {
		return nil
	}
	f.b.mu.Lock()
	list := make([]string, 0, len(f.s.files))
	for p := range f.s.files {
		list = append(list, p)
	}
	f.b.mu.Unlock()
	slices.Sort(list)
	return list
}

func (f FS) isDirLocked(p string) bool {
	if p == "/" {
		return true
	}
	prefix := p + "/"
	for q := range f.s.files {
		if strings.HasPrefix(q, prefix) {
			return true
		}
	}
	return false
}

// cleanPath cleans p, taking a relative path from the root.
func cleanPath(p string) string { return path.Join("/", p) }

// WriteFile puts a file into sandbox id's file system, in any run state, as
// a test's setup would. It does nothing if the sandbox does not exist.
func (b *Backend) WriteFile(id, p string, data []byte) {
	b.fsOf(id).WriteFile(p, data)
}

// ReadFile returns a copy of a file in sandbox id's file system, in any run
// state, and whether it (and the sandbox) exists.
func (b *Backend) ReadFile(id, p string) ([]byte, bool) {
	return b.fsOf(id).ReadFile(p)
}

// Execs returns the exec requests sandbox id was sent since it was
// created, detached ones included, in order; nil for a missing sandbox.
func (b *Backend) Execs(id string) []backend.ExecRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sandboxes[id]
	if !ok {
		return nil
	}
	return slices.Clone(s.execs)
}

func (b *Backend) fsOf(id string) FS {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sandboxes[id]
	if !ok {
		return FS{}
	}
	return FS{b: b, s: s}
}

// runningLocked returns sandbox id if it is Running: ErrNotFound or
// ErrConflict otherwise.
func (b *Backend) runningLocked(op, id string) (*sandbox, error) {
	s, err := b.getLocked(id)
	if err != nil {
		return nil, err
	}
	if err := s.needRunning(op); err != nil {
		return nil, err
	}
	return s, nil
}

// Exec implements backend.Guest. The sandbox must be Running (else
// ErrConflict). The request is recorded (see Execs); a detached one returns
// at once with a zero result and runs nothing. Otherwise Options.Exec runs
// it, or, without that hook, a tiny interpreter that knows true, false,
// echo ARGS, hostname, cat [PATH...], tee [-a] [PATH...], touch PATH...,
// rm [-f] PATH... and test -e|-f|-d PATH, and answers anything else with
// exit code 127 and "command not found" on stderr. Programs are matched by
// the base name of req.Path.
func (b *Backend) Exec(ctx context.Context, id string, req backend.ExecRequest) (backend.ExecResult, error) {
	if err := b.begin(ctx, OpExec, id); err != nil {
		return backend.ExecResult{}, err
	}
	if strings.TrimSpace(req.Path) == "" {
		return backend.ExecResult{}, api.Invalid("command", "required")
	}
	b.mu.Lock()
	s, err := b.runningLocked(OpExec, id)
	var hostname string
	if err == nil {
		hostname = s.hostname
		rec := req
		rec.Args, rec.Env, rec.Stdin = slices.Clone(req.Args), slices.Clone(req.Env), bytes.Clone(req.Stdin)
		s.execs = append(s.execs, rec)
	}
	b.mu.Unlock()
	if err != nil {
		return backend.ExecResult{}, err
	}
	if req.Detach {
		return backend.ExecResult{}, nil
	}
	fs := FS{b: b, s: s}
	if b.opts.Exec != nil {
		return b.opts.Exec(id, fs, req)
	}
	return interpret(fs, hostname, req), nil
}

// interpret runs req with the built-in interpreter (see Exec).
func interpret(fs FS, hostname string, req backend.ExecRequest) backend.ExecResult {
	var stdout, stderr bytes.Buffer
	name, args := path.Base(req.Path), req.Args
	code := 0
	switch name {
	case "true":
	case "false":
		code = 1
	case "echo":
		stdout.WriteString(strings.Join(args, " ") + "\n")
	case "hostname":
		stdout.WriteString(hostname + "\n")
	case "cat":
		if len(args) == 0 {
			stdout.Write(req.Stdin)
		}
		for _, p := range args {
			if p == "-" {
				stdout.Write(req.Stdin)
				continue
			}
			if data, ok := fs.ReadFile(p); ok {
				stdout.Write(data)
				continue
			}
			fmt.Fprintf(&stderr, "cat: %s: No such file or directory\n", p)
			code = 1
		}
	case "tee":
		appendTo := false
		if len(args) > 0 && args[0] == "-a" {
			appendTo, args = true, args[1:]
		}
		for _, p := range args {
			data := req.Stdin
			if old, ok := fs.ReadFile(p); ok && appendTo {
				data = append(old, req.Stdin...)
			}
			fs.WriteFile(p, data)
		}
		stdout.Write(req.Stdin)
	case "touch":
		for _, p := range args {
			if _, ok := fs.ReadFile(p); !ok {
				fs.WriteFile(p, nil)
			}
		}
	case "rm":
		force := false
		if len(args) > 0 && args[0] == "-f" {
			force, args = true, args[1:]
		}
		for _, p := range args {
			if _, ok := fs.ReadFile(p); !ok && !force {
				fmt.Fprintf(&stderr, "rm: cannot remove '%s': No such file or directory\n", p)
				code = 1
				continue
			}
			fs.Remove(p)
		}
	case "test":
		code = test(fs, args, &stderr)
	default:
		fmt.Fprintf(&stderr, "%s: command not found\n", req.Path)
		code = 127
	}
	return backend.ExecResult{ExitCode: code, Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
}

// test answers test -e|-f|-d PATH: 0 true, 1 false, 2 for anything else.
func test(fs FS, args []string, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintf(stderr, "test: %q: the fake supports only -e, -f or -d PATH\n", args)
		return 2
	}
	_, isFile := fs.ReadFile(args[1])
	var ok bool
	switch args[0] {
	case "-e":
		ok = isFile || fs.Exists(args[1])
	case "-f":
		ok = isFile
	case "-d":
		ok = !isFile && fs.Exists(args[1])
	default:
		fmt.Fprintf(stderr, "test: %s: the fake supports only -e, -f or -d\n", args[0])
		return 2
	}
	if ok {
		return 0
	}
	return 1
}

// CopyIn implements backend.Guest: it writes guestPath, which must be
// absolute (else ErrInvalid), in a Running sandbox (else ErrConflict).
func (b *Backend) CopyIn(ctx context.Context, id, guestPath string, r io.Reader) error {
	if err := b.begin(ctx, OpCopyIn, id); err != nil {
		return err
	}
	if !strings.HasPrefix(guestPath, "/") {
		return api.Invalid("path", "%q is not an absolute guest path", guestPath)
	}
	b.mu.Lock()
	s, err := b.runningLocked(OpCopyIn, id)
	b.mu.Unlock()
	if err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("copy in %s: %w", guestPath, err)
	}
	FS{b: b, s: s}.WriteFile(guestPath, data)
	return nil
}

// CopyOut implements backend.Guest: it reads guestPath, which must be
// absolute (else ErrInvalid), from a Running sandbox (else ErrConflict); a
// missing file is ErrNotFound.
func (b *Backend) CopyOut(ctx context.Context, id, guestPath string, w io.Writer) error {
	if err := b.begin(ctx, OpCopyOut, id); err != nil {
		return err
	}
	if !strings.HasPrefix(guestPath, "/") {
		return api.Invalid("path", "%q is not an absolute guest path", guestPath)
	}
	b.mu.Lock()
	s, err := b.runningLocked(OpCopyOut, id)
	var data []byte
	var ok bool
	if err == nil {
		data, ok = s.files[cleanPath(guestPath)]
	}
	b.mu.Unlock()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("copy out %s from %s: file %w", guestPath, id, api.ErrNotFound)
	}
	// The map's slices are never written in place, only replaced, so data
	// can be read without the lock.
	_, err = w.Write(data)
	return err
}

// ClipboardGet implements backend.Guest; the sandbox must be Running.
func (b *Backend) ClipboardGet(ctx context.Context, id string) (string, error) {
	if err := b.begin(ctx, OpClipboardGet, id); err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.runningLocked(OpClipboardGet, id)
	if err != nil {
		return "", err
	}
	return s.clipboard, nil
}

// ClipboardSet implements backend.Guest; the sandbox must be Running.
func (b *Backend) ClipboardSet(ctx context.Context, id, text string) error {
	if err := b.begin(ctx, OpClipboardSet, id); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.runningLocked(OpClipboardSet, id)
	if err != nil {
		return err
	}
	s.clipboard = text
	return nil
}
