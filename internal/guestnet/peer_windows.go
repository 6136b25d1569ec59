package guestnet

import "syscall"

// peerGoneErrnos are the errors of a socket whose peer went away.
var peerGoneErrnos = []error{syscall.WSAECONNRESET, syscall.WSAECONNABORTED, syscall.ECONNRESET, syscall.EPIPE}
