package main

import (
	"fmt"
	"os"
	"syscall"

	"github.com/hvkube/hvkube/internal/node"
)

// checkNotOwnedBy refuses secrets that the host commands' user owns: a
// file's mode does not keep its owner out. Paths that do not exist are
// skipped.
func checkNotOwnedBy(u *node.HostUser, paths ...string) error {
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == u.UID {
			return fmt.Errorf("--host-command-user %s owns %s: host commands could read it; give it to the server's user (chown) or name another --host-command-user", u.Name, p)
		}
	}
	return nil
}
