//go:build !windows

package guestnet

import "syscall"

// peerGoneErrnos are the errors of a socket whose peer went away.
var peerGoneErrnos = []error{syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE}
