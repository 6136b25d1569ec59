package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeMemoryFlagBounds: a memory flag past its bound is refused,
// naming the flag, before anything is created.
func TestServeMemoryFlagBounds(t *testing.T) {
	for _, tt := range []struct {
		flag   string
		change func(*serveConfig)
	}{
		{"--memory-pressure-percent", func(c *serveConfig) { c.pressurePercent = 101 }},
		{"--memory-pressure-percent", func(c *serveConfig) { c.pressurePercent = -2 }},
		{"--memory-limit-percent", func(c *serveConfig) { c.memoryLimitPercent = 0 }},
		{"--memory-limit-percent", func(c *serveConfig) { c.memoryLimitPercent = 150 }},
		{"--memory-running-reserve-mb", func(c *serveConfig) { c.runningReserveMB = -1 }},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		cfg := serveConfig{dataDir: dir, memoryLimitPercent: 80, pressurePercent: 10}
		tt.change(&cfg)
		err := serve(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), tt.flag) {
			t.Errorf("%s out of bounds: %v, want an error naming it", tt.flag, err)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s out of bounds created the data directory", tt.flag)
		}
	}
}
