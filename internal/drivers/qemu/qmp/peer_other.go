//go:build !linux

package qmp

import (
	"errors"
	"fmt"
)

// PeerPID is not supported on this platform (it needs SO_PEERCRED).
func (m *Monitor) PeerPID() (int, error) {
	return 0, fmt.Errorf("qmp peer pid: %w", errors.ErrUnsupported)
}
