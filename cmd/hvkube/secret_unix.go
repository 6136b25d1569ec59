//go:build unix

package main

import (
	"fmt"
	"io/fs"
)

// checkSecretMode refuses a secret file that group or others may read or
// write, as ssh does for keys.
func checkSecretMode(flag, path string, fi fs.FileInfo) error {
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return fmt.Errorf("%s: %s is accessible by group or others (mode %04o): run chmod 600 %s", flag, path, m, path)
	}
	return nil
}
