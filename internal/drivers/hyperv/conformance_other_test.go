//go:build !windows

package hyperv

import "testing"

func TestConformance(t *testing.T) {
	t.Skip("the Hyper-V conformance suite runs on a Windows host with Hyper-V: see docs/windows.md")
}
