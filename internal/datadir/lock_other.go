//go:build !unix

package datadir

import "errors"

// LockFile is the file a server holds locked in its data directory.
const LockFile = "serve.lock"

// ErrInUse: another process holds the data directory.
var ErrInUse = errors.New("the data directory is in use")

// Lock does nothing here: a second server on the same data directory is
// not detected on this platform.
func Lock(string) (func(), error) { return func() {}, nil }
