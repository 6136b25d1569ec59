//go:build unix

package main

import (
	"fmt"
	"log/slog"
	"os"
)

// privateDataDir creates the data directory with mode 0700, or makes an
// existing one 0700: it holds the store, the signing key, the token file
// and the agents' files, which no other user (the host commands' user
// among them) may reach. A directory the server cannot make private is
// refused.
func privateDataDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("--data-dir: %s is not a directory", dir)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("--data-dir: %s is accessible by group or others (mode %04o) and could not be made private: %w", dir, m, err)
		}
		log.Warn("the data directory was accessible by group or others: made it private", "dataDir", dir, "was", fmt.Sprintf("%04o", m), "now", "0700")
	}
	return nil
}
