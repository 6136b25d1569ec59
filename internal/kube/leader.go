package kube

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaderOptions configure Lead. The zero durations take Kubernetes'
// defaults for its own controllers (15 s, 10 s, 2 s).
type LeaderOptions struct {
	// Lease is the Lease's name in the store's namespace.
	Lease string
	// Identity names this replica in the Lease (unique per replica).
	Identity string
	// LeaseDuration is how long the others wait after the leader's last
	// renewal before one takes over; RenewDeadline how long the leader
	// keeps trying to renew before it gives up; RetryPeriod how often
	// each tries.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// OnNewLeader hears each new holder's identity.
	OnNewLeader func(identity string)
}

// ErrLostLease is what Lead returns when this replica stops leading.
var ErrLostLease = errors.New("kube: lost the leader Lease")

// Lead campaigns for the Lease and runs lead while this replica holds it,
// with a context that ends when it stops holding it. It returns ctx's error
// if ctx ends before this replica leads or while it does, ErrLostLease if
// it stops leading otherwise (the caller should then exit, as Kubernetes'
// own controllers do: what lead started may still be running).
func (s *Store) Lead(ctx context.Context, o LeaderOptions, lead func(ctx context.Context)) error {
	if o.Lease == "" || o.Identity == "" {
		return errors.New("kube: a leader Lease needs a name and an identity")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.LeaseDuration, 15*time.Second)
	def(&o.RenewDeadline, 10*time.Second)
	def(&o.RetryPeriod, 2*time.Second)
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, s.ns, o.Lease, s.core.CoreV1(), s.core.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: o.Identity})
	if err != nil {
		return fmt.Errorf("kube: leader Lease: %w", err)
	}
	// OnStartedLeading runs on a goroutine of its own, OnStoppedLeading
	// on Run's.
	var led atomic.Bool
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: o.LeaseDuration,
		RenewDeadline: o.RenewDeadline,
		RetryPeriod:   o.RetryPeriod,
		// The Lease is left to expire: a replica that ends while its
		// controllers may still be writing must not hand over at once.
		ReleaseOnCancel: false,
		Name:            o.Lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				led.Store(true)
				s.log.Info("leading", "lease", o.Lease, "identity", o.Identity)
				lead(ctx)
			},
			OnStoppedLeading: func() {
				if led.Load() {
					s.log.Warn("stopped leading", "lease", o.Lease, "identity", o.Identity)
				}
			},
			OnNewLeader: func(id string) {
				if id != o.Identity {
					s.log.Info("another replica leads", "lease", o.Lease, "leader", id)
				}
				if o.OnNewLeader != nil {
					o.OnNewLeader(id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("kube: leader election: %w", err)
	}
	le.Run(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return ErrLostLease
}
