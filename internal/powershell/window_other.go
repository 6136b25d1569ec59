//go:build !windows

package powershell

import "os/exec"

func hideWindow(*exec.Cmd) {}
