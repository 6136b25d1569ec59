package node

import "testing"

// TestNodeLostOnKubernetes runs the lost-node tests of this package
// unchanged on the Kubernetes store (a real kube-apiserver, a namespace
// per test): a node cut off from the API server fences, is marked lost,
// its work runs elsewhere, and it rejoins.
func TestNodeLostOnKubernetes(t *testing.T) {
	onKubernetes(t, map[string]func(*testing.T){
		"NodeLostAndBack":      TestNodeLostAndBack,
		"NodeFencesAndRejoins": TestNodeFencesAndRejoins,
	})
}
