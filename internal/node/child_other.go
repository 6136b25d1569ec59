//go:build !linux

package node

import (
	"fmt"
	"os/exec"
	"runtime"
)

// setChildAttrs has nothing to set where processes cannot be tied to their
// parent's life.
func setChildAttrs(cmd *exec.Cmd) {}

// setHostCommandAttrs refuses to run a host command as another user: only
// Linux builds do that.
func setHostCommandAttrs(cmd *exec.Cmd, u *HostUser) error {
	if u != nil {
		return fmt.Errorf("running host commands as %s is not supported on %s", u, runtime.GOOS)
	}
	return nil
}

// waitHostCommand waits for a started host command.
func waitHostCommand(cmd *exec.Cmd) error { return cmd.Wait() }
