package node

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// Bounds on a volume copied into a guest.
const (
	maxVolumeFiles = 10000
	maxVolumeBytes = 256 << 20
)

// checkVolumes refuses what the node cannot map: a writable volume (a
// folder shared both ways would need a file system share that QEMU cannot
// migrate with, and every clone is a migration).
func checkVolumes(sb *api.Sandbox) error {
	for i, v := range sb.Spec.Volumes {
		if !v.ReadOnly {
			return fmt.Errorf("spec.volumes[%d] (%s): only readOnly volumes are supported (copied into the guest when the sandbox starts); set readOnly: true: %w", i, v.Name, api.ErrUnsupported)
		}
	}
	return nil
}

// copyVolumes copies each read-only volume's host folder into the running
// guest at its sandboxPath, then takes away write permission there. The
// server allowed the host paths when the object was stored.
func (n *Node) copyVolumes(ctx context.Context, sb *api.Sandbox) error {
	if len(sb.Spec.Volumes) == 0 {
		return nil
	}
	g, ok := n.be.(backend.Guest)
	if !ok {
		return fmt.Errorf("spec.volumes: the %s backend cannot copy files into the guest: %w", n.be.Name(), api.ErrUnsupported)
	}
	name := sb.Metadata.Name
	for i, v := range sb.Spec.Volumes {
		files, bytes := 0, int64(0)
		err := filepath.WalkDir(v.HostPath, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(v.HostPath, p)
			if err != nil {
				return err
			}
			dst := path.Join(v.SandboxPath, filepath.ToSlash(rel))
			switch {
			case d.IsDir():
				return guestRun(ctx, g, name, "mkdir", "-p", "--", dst)
			case !d.Type().IsRegular():
				return nil // links and devices stay on the host
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			files++
			bytes += info.Size()
			if files > maxVolumeFiles || bytes > maxVolumeBytes {
				return fmt.Errorf("more than %d files or %d MiB", maxVolumeFiles, maxVolumeBytes>>20)
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return g.CopyIn(ctx, name, dst, f)
		})
		if err == nil {
			err = guestRun(ctx, g, name, "chmod", "-R", "a-w", "--", v.SandboxPath)
		}
		if err != nil {
			return fmt.Errorf("spec.volumes[%d] (%s): copy %s into the guest: %w", i, v.Name, v.HostPath, err)
		}
		n.event(ctx, sb, api.EventNormal, "VolumeCopied", fmt.Sprintf("%s: %d files (%d KiB) copied to %s, read-only", v.Name, files, bytes>>10, v.SandboxPath))
	}
	return nil
}

// guestRun runs a program in the guest and fails unless it exits 0.
func guestRun(ctx context.Context, g backend.Guest, id, prog string, args ...string) error {
	res, err := g.Exec(ctx, id, backend.ExecRequest{Path: prog, Args: args})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%s exited with %d: %s", prog, res.ExitCode, oneLine(truncate(string(res.Stderr), 300)))
	}
	return nil
}
