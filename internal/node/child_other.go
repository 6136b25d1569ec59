//go:build !linux

package node

import "os/exec"

// setChildAttrs has nothing to set where processes cannot be tied to their
// parent's life.
func setChildAttrs(cmd *exec.Cmd) {}
