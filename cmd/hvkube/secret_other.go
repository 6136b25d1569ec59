//go:build !unix

package main

import "io/fs"

// checkSecretMode is a no-op where file modes do not describe who may read
// a file (Windows uses ACLs; the data directory's defaults apply).
func checkSecretMode(flag, path string, fi fs.FileInfo) error { return nil }
