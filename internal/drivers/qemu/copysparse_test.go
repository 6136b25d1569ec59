package qemu

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestCopySparse copies files of data and zeros: the copy reads the same,
// and the zero chunks are holes in it.
func TestCopySparse(t *testing.T) {
	const chunk = 64 << 10
	for _, tt := range []struct {
		name string
		size int
		data []int // offsets of a non-zero byte
		// most is the most the copy may occupy on disk.
		most int64
	}{
		{"all zero", 4 << 20, nil, 0},
		{"first byte", 4 << 20, []int{0}, 2 * chunk},
		{"either side of a chunk's end", 4 << 20, []int{chunk - 1, chunk}, 3 * chunk},
		{"past a read buffer", 3<<20 + 100, []int{1<<20 + 5, 3<<20 + 99}, 3 * chunk},
		{"every chunk", 1 << 20, []int{0, chunk, 2 * chunk, 15 * chunk}, 1<<20 + chunk},
		{"empty", 0, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
			want := make([]byte, tt.size)
			for i, off := range tt.data {
				want[off] = byte(i + 1)
			}
			if err := os.WriteFile(src, want, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := copySparse(src, dst); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("the copy differs (%d bytes, want %d)", len(got), len(want))
			}
			if runtime.GOOS == "linux" {
				if used := diskUsage(dst); used > tt.most {
					t.Errorf("the copy occupies %d bytes on disk, want at most %d (its zeros as holes)", used, tt.most)
				}
			}
		})
	}
}
