//go:build !unix

package qemu

import (
	"errors"
	"os"
	"time"
)

var errNoQEMU = errors.New("the qemu backend runs on Linux")

func startProcess(binary string, args []string, dir, logPath string, files []*os.File) (int, <-chan struct{}, error) {
	return 0, nil, errNoQEMU
}
func processAlive(pid int, name string) bool                        { return false }
func killProcess(pid int, name string, timeout time.Duration) error { return nil }
func privateMemory(pid int) (int64, error)                          { return 0, errNoQEMU }
func diskUsage(path string) int64                                   { return 0 }

func freeSpace(dir string) (int64, error)       { return 0, errNoQEMU }
func processCPU(pid int) (time.Duration, error) { return 0, errNoQEMU }

func ownProcesses(dir string) []procRef { return nil }
