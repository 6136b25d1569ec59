package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
)

// BenchmarkConcurrentUpdateStatus has writers goroutines write the status
// of objects of their own at once, as the controllers and the node do:
// the rate the store's one writer sustains.
func BenchmarkConcurrentUpdateStatus(b *testing.B) {
	for _, writers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			objs := make([]*api.SandboxPool, writers)
			for i := range objs {
				o, err := s.Create(ctx, pool(fmt.Sprintf("p%d", i), 1))
				if err != nil {
					b.Fatal(err)
				}
				objs[i] = o.(*api.SandboxPool)
				objs[i].Metadata.ResourceVersion = ""
			}
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			b.ResetTimer()
			for _, p := range objs {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						p.Status.Ready++
						if _, err := s.UpdateStatus(ctx, p); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}
