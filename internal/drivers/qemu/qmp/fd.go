package qmp

import "context"

// CloseFD releases a descriptor passed with SendFD that was not consumed
// (closefd). It fails with a *Error if QEMU holds no descriptor by that name.
func (m *Monitor) CloseFD(ctx context.Context, name string) error {
	return m.Execute(ctx, "closefd", map[string]string{"fdname": name}, nil)
}
