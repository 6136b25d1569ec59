//go:build !unix

package vmdebug

// alive cannot tell here: the wait runs until its timeout.
func alive(int) bool { return true }
