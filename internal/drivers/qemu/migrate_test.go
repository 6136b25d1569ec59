package qemu

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp/qmptest"
)

// TestLeftFinishMigrate: after a completed migration the wait ends once
// QEMU's run state has left finish-migrate (QEMU refuses a cont before
// that), and fails, naming the state, if it never does.
func TestLeftFinishMigrate(t *testing.T) {
	tests := []struct {
		name      string
		finishing int32 // query-status answers finish-migrate this often first
		timeout   time.Duration
		wantErr   bool
	}{
		{"already postmigrate", 0, time.Minute, false},
		{"finalized a moment later", 3, time.Minute, false},
		{"never finalized", 1 << 30, 100 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			peer := qmptest.NewPeer(t)
			var calls atomic.Int32
			peer.Handle("query-status", func(context.Context, qmptest.Request) (any, error) {
				if calls.Add(1) <= tt.finishing {
					return map[string]any{"running": false, "status": "finish-migrate"}, nil
				}
				return map[string]any{"running": false, "status": "postmigrate"}, nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			mon, err := qmp.Dial(ctx, peer.SocketPath())
			if err != nil {
				t.Fatal(err)
			}
			defer mon.Close()
			err = leftFinishMigrate(ctx, mon)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want an error: %v", err, tt.wantErr)
			}
			if tt.wantErr && !strings.Contains(err.Error(), "finish-migrate") && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the error %q says nothing of the state", err)
			}
			if !tt.wantErr && calls.Load() != tt.finishing+1 {
				t.Errorf("%d status queries, want %d", calls.Load(), tt.finishing+1)
			}
		})
	}
}
