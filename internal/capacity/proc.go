package capacity

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcReader reads /proc (Linux): MemTotal and MemAvailable from
// /proc/meminfo, memory pressure from /proc/pressure/memory, and a
// process's footprint from the Pss line of /proc/PID/smaps_rollup.
type ProcReader struct {
	// Root is /proc when empty.
	Root string
}

func (r ProcReader) path(parts ...string) string {
	root := r.Root
	if root == "" {
		root = "/proc"
	}
	return root + "/" + strings.Join(parts, "/")
}

// Host implements Reader.
func (r ProcReader) Host() (Host, error) {
	b, err := os.ReadFile(r.path("meminfo"))
	if err != nil {
		return Host{}, err
	}
	h, err := ParseMeminfo(b)
	if err != nil {
		return Host{}, err
	}
	h.PressureAvg10 = -1
	if p, err := os.ReadFile(r.path("pressure", "memory")); err == nil {
		if v, ok := ParsePressure(p); ok {
			h.PressureAvg10 = v
		}
	}
	return h, nil
}

// FootprintMB implements Reader.
func (r ProcReader) FootprintMB(pid int) (int, error) {
	b, err := os.ReadFile(r.path(strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return 0, err
	}
	kb, ok := FieldKB(b, "Pss:")
	if !ok {
		return 0, fmt.Errorf("process %d: no Pss in smaps_rollup", pid)
	}
	return int((kb + 1023) / 1024), nil
}

// ParseMeminfo reads MemTotal and MemAvailable (MiB) from /proc/meminfo.
func ParseMeminfo(b []byte) (Host, error) {
	total, ok1 := FieldKB(b, "MemTotal:")
	avail, ok2 := FieldKB(b, "MemAvailable:")
	if !ok1 || !ok2 {
		return Host{}, fmt.Errorf("meminfo: no MemTotal or MemAvailable")
	}
	return Host{TotalMB: int(total / 1024), AvailableMB: int(avail / 1024)}, nil
}

// ParsePressure reads the "some avg10" figure of /proc/pressure/memory.
func ParsePressure(b []byte) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "some" {
			continue
		}
		v, ok := strings.CutPrefix(f[1], "avg10=")
		if !ok {
			return 0, false
		}
		x, err := strconv.ParseFloat(v, 64)
		return x, err == nil
	}
	return 0, false
}

// fieldKB finds "Name: N kB" in a /proc file.
func FieldKB(b []byte, name string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == name {
			v, err := strconv.ParseInt(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}
