//go:build !linux

package local

import (
	"errors"
	"os/exec"
	"time"
)

// dieWithParent does nothing here: Stop ends the servers.
func dieWithParent(*exec.Cmd) {}

// cpuTime is not known here.
func cpuTime(int) (time.Duration, error) {
	return 0, errors.New("the CPU time of a process is read from /proc, on Linux only")
}
