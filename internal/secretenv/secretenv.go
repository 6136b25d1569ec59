// Package secretenv takes a secret out of the process's environment for
// good. os.Unsetenv changes only Go's copy of the environment: on Linux,
// /proc/PID/environ goes on showing the block the process was started
// with, to the process's own user, to root, and to its children while
// they run as that user. Take also overwrites that block.
package secretenv

import (
	"fmt"
	"os"
)

// Take returns the value of the environment variable name, and removes it
// from Go's environment and, where the OS keeps it readable to other
// processes (Linux: /proc/PID/environ), from the block the process
// started with. It is safe to call when name is not set. It fails when
// name was set and could not be cleared from that block; the variable is
// gone from Go's environment all the same.
//
// Take is for the start of a program: other goroutines must not read the
// environment meanwhile.
func Take(name string) (string, error) {
	v, set := os.LookupEnv(name)
	os.Unsetenv(name)
	if err := scrub(name); err != nil && set {
		return v, fmt.Errorf("clear %s from the process's initial environment: %w", name, err)
	}
	return v, nil
}
