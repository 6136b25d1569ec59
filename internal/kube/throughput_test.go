package kube_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
)

// BenchmarkAPIServer measures what the API server started here serves of
// the requests a claim is made of, from 16 clients per core at once: a GET
// of a sandbox; a GET and a conditional write of its status; and a
// conditional write alone, at the version of the client's last answer (the
// write a claim's scheduler and node make, with no read), with the API
// server's and etcd's CPU per write. Object writes per claim (bench claims
// counts them) times these bound the claims per second of the machine.
func BenchmarkAPIServer(b *testing.B) {
	env := kubetest.Start(b)
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0
	st, err := kube.Open(context.Background(), kube.Options{Config: cfg, Namespace: env.Namespace(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	const objects = 64
	for i := range objects {
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = fmt.Sprintf("tp-%d", i)
		sb.Spec.TemplateRef = "t"
		api.Default(sb)
		if _, err := st.Create(ctx, sb); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	name := func() string { return fmt.Sprintf("tp-%d", next.Add(1)%objects) }
	b.Run("get", func(b *testing.B) {
		b.SetParallelism(16) // × GOMAXPROCS clients
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := st.Get(ctx, api.KindSandbox, name()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("update-status", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				o, err := st.Get(ctx, api.KindSandbox, name())
				if err != nil {
					b.Error(err)
					return
				}
				sb := o.(*api.Sandbox)
				sb.Status.Message = fmt.Sprint(next.Load())
				// Another client may have written it since: a conflict
				// is an answer too.
				if _, err := st.UpdateStatus(ctx, sb); err != nil && !errors.Is(err, api.ErrConflict) {
					b.Error(err)
					return
				}
			}
		})
	})
	// Each client writes an object of its own, so no write conflicts.
	var owner atomic.Int64
	b.Run("write-status", func(b *testing.B) {
		cpu0, err := env.CPUTime()
		if err != nil {
			b.Skip(err)
		}
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
			sb.Metadata.Name = fmt.Sprintf("tp-w-%d", owner.Add(1))
			sb.Spec.TemplateRef = "t"
			api.Default(sb)
			o, err := st.Create(ctx, sb)
			for i := 0; err == nil && pb.Next(); i++ {
				sb := o.(*api.Sandbox)
				sb.Status.Message = fmt.Sprint(i)
				o, err = st.UpdateStatus(ctx, sb)
			}
			if err != nil {
				b.Error(err)
			}
		})
		if cpu, err := env.CPUTime(); err == nil {
			b.ReportMetric(float64((cpu-cpu0).Microseconds())/1000/float64(b.N), "server-cpu-ms/write")
		}
	})
}
