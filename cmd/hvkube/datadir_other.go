//go:build !unix

package main

import (
	"fmt"
	"log/slog"
	"os"
)

// privateDataDir creates the data directory. Where file modes do not say
// who may read a file (Windows: ACLs), it keeps what the parent's ACL
// gives, as the user's profile directories are private already.
func privateDataDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	return nil
}
