package kube

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// TestTokenReviewsAreKeptAndBounded: an accepted token is answered from
// memory for ReviewTTL, then asked again; a refused one is asked each
// time; and the reviews asked are held to the rate, beyond which the
// answer is ErrUnavailable without asking.
func TestTokenReviewsAreKeptAndBounded(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	review := func(_ context.Context, tok, sa string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		asked[tok]++
		if strings.HasPrefix(tok, "good-") {
			return strings.TrimPrefix(tok, "good-"), nil
		}
		return "", errors.New("not a token of this cluster")
	}
	now := time.Unix(1000, 0)
	r := newTokenReviews(review, func() time.Time { return now })
	ctx := context.Background()

	for range 5 {
		if n, err := r.node(ctx, "good-node-a", "ns:hvkube-node"); err != nil || n != "node-a" {
			t.Fatalf("good token: %q %v", n, err)
		}
	}
	if asked["good-node-a"] != 1 {
		t.Errorf("an accepted token asked %d times within its TTL, want 1", asked["good-node-a"])
	}
	// Of another service account: asked apart.
	if _, err := r.node(ctx, "good-node-a", "ns:other"); err != nil || asked["good-node-a"] != 2 {
		t.Errorf("another service account: %v, asked %d, want 2", err, asked["good-node-a"])
	}
	now = now.Add(ReviewTTL)
	if _, err := r.node(ctx, "good-node-a", "ns:hvkube-node"); err != nil || asked["good-node-a"] != 3 {
		t.Errorf("after the TTL: %v, asked %d times, want 3", err, asked["good-node-a"])
	}
	for range 3 {
		if _, err := r.node(ctx, "made-up", "ns:hvkube-node"); err == nil {
			t.Fatal("a refused token was accepted")
		}
	}
	if asked["made-up"] != 3 {
		t.Errorf("a refused token asked %d times, want each time (3)", asked["made-up"])
	}

	// A flood of made-up tokens: about the burst is asked (the loop is
	// quicker than the bucket refills), the rest answered unavailable.
	unavailable := 0
	for i := range 10 * ReviewBurst {
		_, err := r.node(ctx, "flood-"+string(rune('a'+i%26))+strings.Repeat("x", i), "ns:hvkube-node")
		if errors.Is(err, api.ErrUnavailable) {
			unavailable++
		}
	}
	total := 0
	for tok, n := range asked {
		if strings.HasPrefix(tok, "flood-") {
			total += n
		}
	}
	if total > 2*ReviewBurst || unavailable == 0 {
		t.Errorf("a flood of %d made-up tokens asked %d reviews (%d answered unavailable), want at most about the burst (%d)", 10*ReviewBurst, total, unavailable, ReviewBurst)
	}
	// A token accepted before the flood is still answered from memory.
	now = now.Add(time.Second)
	if _, err := r.node(ctx, "good-node-a", "ns:hvkube-node"); err != nil {
		t.Errorf("a kept token during the flood: %v", err)
	}
}
