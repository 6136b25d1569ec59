package secretenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// maxEnviron bounds the initial environment block read (the kernel's
// limit on arguments and environment together is far below it).
const maxEnviron = 64 << 20

// scrub overwrites with NUL bytes every entry name=… of the environment
// block the kernel set up at exec, which /proc/self/environ shows. Go's
// runtime copied the strings at start, so Go's environment is unchanged.
// The block's bounds are fields 50 and 51 (env_start, env_end) of
// /proc/self/stat; it is written through /proc/self/mem.
func scrub(name string) error {
	start, end, err := environBounds()
	if err != nil {
		return err
	}
	if end <= start || end-start > maxEnviron {
		return fmt.Errorf("implausible environment block %#x-%#x", start, end)
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer mem.Close()
	block := make([]byte, end-start)
	if _, err := mem.ReadAt(block, int64(start)); err != nil {
		return fmt.Errorf("read the environment block: %w", err)
	}
	prefix := []byte(name + "=")
	for off := 0; off < len(block); {
		n := bytes.IndexByte(block[off:], 0)
		if n < 0 {
			n = len(block) - off
		}
		if bytes.HasPrefix(block[off:off+n], prefix) {
			if _, err := mem.WriteAt(make([]byte, n), int64(start)+int64(off)); err != nil {
				return fmt.Errorf("overwrite the environment block: %w", err)
			}
		}
		off += n + 1
	}
	return nil
}

// environBounds returns env_start and env_end from /proc/self/stat.
func environBounds() (start, end uint64, err error) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces and
	// parentheses itself: count fields after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, errors.New("/proc/self/stat: no command name")
	}
	fields := bytes.Fields(stat[i+1:]) // fields[0] is field 3
	const envStart, envEnd = 50, 51
	if len(fields) < envEnd-2 {
		return 0, 0, fmt.Errorf("/proc/self/stat has %d fields, want %d (Linux 3.5 or newer)", len(fields)+2, envEnd)
	}
	if start, err = strconv.ParseUint(string(fields[envStart-3]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("/proc/self/stat env_start: %w", err)
	}
	if end, err = strconv.ParseUint(string(fields[envEnd-3]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("/proc/self/stat env_end: %w", err)
	}
	return start, end, nil
}
