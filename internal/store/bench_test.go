package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
)

// BenchmarkConcurrentUpdateStatus has many goroutines write the status
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
			objs := make([]api.Object, writers)
			for i := range objs {
				if objs[i], err = s.Create(ctx, pool(fmt.Sprintf("p%d", i), 1)); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			b.SetParallelism((writers + 1) / 2)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				p := api.DeepCopy(objs[int(next.Add(1)-1)%writers]).(*api.SandboxPool)
				p.Metadata.ResourceVersion = ""
				for pb.Next() {
					p.Status.Ready++
					if _, err := s.UpdateStatus(ctx, p); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}
