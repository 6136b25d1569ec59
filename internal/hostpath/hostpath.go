// Package hostpath decides which host files an object may name. A Template
// names image files and a volume names a host folder; without a bound, any
// API client could have the server read /etc/shadow into a guest. Paths are
// allowed only under roots the server was started with, after symlinks are
// resolved, so a link inside a root cannot lead out of it.
package hostpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
)

// Roots are the directories host paths must lie under, absolute and with
// symlinks resolved. The zero Roots allows nothing.
type Roots []string

// NewRoots resolves dirs into Roots. A directory that does not exist yet
// (an image directory before the first image is built) is resolved as far
// as it exists.
func NewRoots(dirs ...string) (Roots, error) {
	var out Roots
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if !filepath.IsAbs(d) {
			abs, err := filepath.Abs(d)
			if err != nil {
				return nil, fmt.Errorf("host path root %q: %w", d, err)
			}
			d = abs
		}
		r, err := resolve(d)
		if err != nil {
			return nil, fmt.Errorf("host path root %q: %w", d, err)
		}
		dup := false
		for _, have := range out {
			dup = dup || have == r
		}
		if !dup {
			out = append(out, r)
		}
	}
	return out, nil
}

// String lists the roots for messages.
func (rs Roots) String() string {
	if len(rs) == 0 {
		return "none"
	}
	return strings.Join(rs, ", ")
}

// Native reports whether p, a host path in some host's syntax (see
// api.ValidateHostPath), is absolute in this host's own: /srv/x on Linux,
// C:\x or \\server\share\x on Windows. Only a native path can be checked
// against this host's roots; another is for a host of the other kind, which
// checks it against its own.
func Native(p string) bool {
	return filepath.IsAbs(p)
}

// Check returns nil if p, an absolute path, lies under one of the roots once
// its symlinks are resolved, and otherwise an api.ErrInvalid error naming
// field and the roots. A path that does not exist yet is resolved as far as
// it exists.
func (rs Roots) Check(field, p string) error {
	if !filepath.IsAbs(p) {
		return api.Invalid(field, "%q is not an absolute path on this host", p)
	}
	real, err := resolve(filepath.Clean(p))
	if err != nil {
		return api.Invalid(field, "%q: %v", p, err)
	}
	if rs.Contains(real) {
		return nil
	}
	via := ""
	if real != filepath.Clean(p) {
		via = fmt.Sprintf(" (it leads to %q)", real)
	}
	return api.Invalid(field, "%q%s is outside the host paths this server allows (%s): start the server with --allow-host-path DIR to allow a directory", p, via, rs)
}

// Contains reports whether real, a resolved absolute path, is a root or
// lies under one.
func (rs Roots) Contains(real string) bool {
	for _, r := range rs {
		rel, err := filepath.Rel(r, real)
		if err != nil {
			continue
		}
		if rel == "." || (rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)) {
			return true
		}
	}
	return false
}

// resolve follows the symlinks of p, an absolute clean path; the part of p
// that does not exist is appended to what its deepest existing ancestor
// resolves to.
func resolve(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err == nil {
		return real, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	parent := filepath.Dir(p)
	if parent == p {
		return p, nil
	}
	if _, lerr := os.Lstat(p); lerr == nil {
		// p exists but is a dangling link: where it points is what counts,
		// and that cannot be known until it exists.
		return "", fmt.Errorf("a symbolic link to a missing file")
	}
	base, err := resolve(parent)
	if err != nil {
		return "", err
	}
	return filepath.Join(base, filepath.Base(p)), nil
}
