package fake

import (
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// fakeGuestAddress is the address a fake sandbox with a network reports.
const fakeGuestAddress = "10.0.2.15"

// networkInfoOf is what a fake sandbox created with spec n reports of its
// network: nat at fakeGuestAddress unless its mode is none.
func networkInfoOf(n api.Network) backend.NetworkInfo {
	if n.Mode == api.NetworkNone {
		return backend.NetworkInfo{Mode: api.NetworkNone}
	}
	return backend.NetworkInfo{Mode: api.NetworkNAT, Address: fakeGuestAddress}
}

// Network returns the network spec sandbox id was created with, and
// whether it exists.
func (b *Backend) Network(id string) (api.Network, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sandboxes[id]
	if !ok {
		return api.Network{}, false
	}
	return s.network, true
}

// SetDenied makes sandbox id report that its egress policy refused count
// connections in all, the latest last, as a guest that keeps connecting
// where it may not would. It does nothing for a missing sandbox.
func (b *Backend) SetDenied(id string, count int64, last api.NetworkDenial) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.sandboxes[id]; ok {
		s.networkInfo.Denied, s.networkInfo.LastDenied = count, &last
	}
}

// SetNetworkUnavailable makes sandbox id report that it has no network,
// for why (as a clone of a snapshot without a network device does).
func (b *Backend) SetNetworkUnavailable(id, why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.sandboxes[id]; ok {
		s.networkInfo = backend.NetworkInfo{Mode: api.NetworkNone, Unavailable: why}
	}
}
