//go:build !unix

package qmp

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// SendFD is not supported on this platform: passing descriptors needs unix
// domain socket ancillary data.
func (m *Monitor) SendFD(ctx context.Context, name string, f *os.File) error {
	return fmt.Errorf("qmp getfd %s: %w", name, errors.ErrUnsupported)
}
