//go:build !linux

package local

import "os/exec"

// dieWithParent does nothing here: Stop ends the servers.
func dieWithParent(*exec.Cmd) {}
