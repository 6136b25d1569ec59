//go:build unix

package qemu

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startProcess runs QEMU detached: in its own session, so that it outlives
// the server, with its output in logPath. The returned channel closes when a
// process we started exits (we reap it; after a server restart the adopted
// process is reaped by init). files become the child's fds 3, 4, ….
func startProcess(binary string, args []string, dir, logPath string, files []*os.File) (int, <-chan struct{}, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, nil, err
	}
	defer logf.Close()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, nil, fmt.Errorf("start %s: %w", binary, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	return cmd.Process.Pid, done, nil
}

// processAlive reports whether pid runs and is the QEMU named name (pids
// get reused: a live pid that is not ours does not count). A name ending in
// ':' matches as a prefix.
func processAlive(pid int, name string) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 { // gone, or a zombie
		return false
	}
	args := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
	for i := 0; i+1 < len(args); i++ {
		if string(args[i]) != "-name" {
			continue
		}
		got := string(args[i+1])
		if got == name || (strings.HasSuffix(name, ":") && strings.HasPrefix(got, name)) {
			return true
		}
	}
	return false
}

// killProcess sends SIGKILL and waits until the process is gone.
func killProcess(pid int, name string, timeout time.Duration) error {
	if !processAlive(pid, name) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	deadline := time.Now().Add(timeout)
	for processAlive(pid, name) {
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d did not exit after SIGKILL", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// privateMemory returns the private (unshared) resident memory of pid in
// bytes, from /proc/PID/smaps_rollup.
func privateMemory(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Private_Clean:") || strings.HasPrefix(line, "Private_Dirty:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				total += kb << 10
			}
		}
	}
	return total, nil
}

// diskUsage is the space a (sparse) file takes on disk.
func diskUsage(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// freeSpace is the room an unprivileged writer has on the file system of
// dir, in bytes.
func freeSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// ownProcesses lists the QEMU processes started by a backend whose
// directory is dir: their -pidfile lies under it and their -name is one of
// hvkube's.
func ownProcesses(dir string) []procRef {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	prefix := filepath.Clean(dir) + string(filepath.Separator)
	var out []procRef
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		var name, pidfile string
		for i := 0; i+1 < len(args); i++ {
			switch args[i] {
			case "-name":
				name = args[i+1]
			case "-pidfile":
				pidfile = args[i+1]
			}
		}
		if strings.HasPrefix(name, "hvkube-") && strings.HasPrefix(pidfile, prefix) {
			out = append(out, procRef{pid: pid, name: name})
		}
	}
	return out
}

// processCPU is the CPU time pid has had (user and system, from
// /proc/PID/stat; the kernel counts it in USER_HZ ticks, 100 a second).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields counted are after its closing one.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * (time.Second / 100), nil
}
