// Package testlog holds what tests share to read logs and output written
// by other goroutines.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that goroutines may write (a logger, a command's
// output) while a test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
