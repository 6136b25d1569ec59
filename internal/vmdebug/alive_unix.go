//go:build unix

package vmdebug

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// alive reports whether process pid runs: it exists (signal 0 checks
// without sending anything; EPERM means it is another user's) and, where
// /proc says, is no zombie (a QEMU that exited stays one until the script
// that started it waits for it).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) STATE …: comm may hold spaces and parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}
