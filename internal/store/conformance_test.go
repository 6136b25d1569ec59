package store_test

import (
	"context"
	"testing"

	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/store/storetest"
)

// TestConformance runs the store conformance suite on SQLite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Interface {
		s, err := store.Open(context.Background(), t.TempDir(), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
