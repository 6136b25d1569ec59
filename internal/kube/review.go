package kube

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/hvkube/hvkube/internal/api"
)

// NodeAudience is the audience of the service-account token a node agent
// proves who it is with (a projected token in its pod, deploy/node.yaml):
// a token of any other audience (the pod's default one, say) is refused.
const NodeAudience = "hvkube"

// nodeNameExtra is the extra a pod-bound service-account token carries:
// the name of the node the pod runs on.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// ReviewNodeToken asks the API server who tok is (a TokenReview) and
// returns the node it speaks for: it must be a service-account token of
// audience NodeAudience, of the service account serviceAccount
// ("namespace:name"), bound to a pod that runs on a node. The node's name
// comes from the token, signed by the API server, not from the caller.
//
// An answer that names a node is kept for ReviewTTL, so that a node's
// requests cost the API server one review a while; the reviews not
// answered so (a new token, or anyone's guess) are held to
// ReviewsPerSecond, beyond which ReviewNodeToken answers ErrUnavailable
// without asking.
func (s *Store) ReviewNodeToken(ctx context.Context, tok, serviceAccount string) (string, error) {
	return s.reviews.node(ctx, tok, serviceAccount)
}

// Bounds of the nodes' token reviews.
const (
	// ReviewTTL is how long an accepted token is taken without asking
	// again: a token revoked meanwhile (its pod deleted) is taken that
	// much longer.
	ReviewTTL = 30 * time.Second
	// ReviewsPerSecond (with bursts of ReviewBurst) bounds the reviews
	// asked of the API server: a flood of made-up tokens at the join
	// route costs it no more.
	ReviewsPerSecond = 20
	ReviewBurst      = 50
	// maxReviewed bounds the tokens kept.
	maxReviewed = 10000
)

// tokenReviews keeps accepted tokens for ReviewTTL and rate-limits the
// reviews asked.
type tokenReviews struct {
	review func(ctx context.Context, tok, serviceAccount string) (string, error)
	now    func() time.Time
	limit  flowcontrol.RateLimiter

	mu   sync.Mutex
	seen map[[sha256.Size]byte]reviewed
}

type reviewed struct {
	node  string
	until time.Time
}

func newTokenReviews(review func(ctx context.Context, tok, serviceAccount string) (string, error), now func() time.Time) *tokenReviews {
	if now == nil {
		now = time.Now
	}
	return &tokenReviews{review: review, now: now, limit: flowcontrol.NewTokenBucketRateLimiter(ReviewsPerSecond, ReviewBurst),
		seen: map[[sha256.Size]byte]reviewed{}}
}

func (r *tokenReviews) node(ctx context.Context, tok, serviceAccount string) (string, error) {
	k := sha256.Sum256([]byte(serviceAccount + "\x00" + tok))
	now := r.now()
	r.mu.Lock()
	if e, ok := r.seen[k]; ok && now.Before(e.until) {
		r.mu.Unlock()
		return e.node, nil
	}
	r.mu.Unlock()
	if !r.limit.TryAccept() {
		return "", fmt.Errorf("%w: more than %d token reviews a second; try again", api.ErrUnavailable, ReviewsPerSecond)
	}
	node, err := r.review(ctx, tok, serviceAccount)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) >= maxReviewed {
		for k, e := range r.seen {
			if !now.Before(e.until) {
				delete(r.seen, k)
			}
		}
		if len(r.seen) >= maxReviewed {
			clear(r.seen)
		}
	}
	r.seen[k] = reviewed{node: node, until: now.Add(ReviewTTL)}
	return node, nil
}

// reviewNodeToken asks the API server, with no cache.
func (s *Store) reviewNodeToken(ctx context.Context, tok, serviceAccount string) (string, error) {
	tr, err := s.core.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: tok, Audiences: []string{NodeAudience}},
	}, metav1.CreateOptions{})
	if err != nil {
		// The question could not be asked: not the token's fault (the
		// node tries again).
		return "", fmt.Errorf("%w: token review: %v", api.ErrUnavailable, err)
	}
	st := tr.Status
	if !st.Authenticated {
		if st.Error != "" {
			return "", fmt.Errorf("not a token of this cluster for audience %s: %s", NodeAudience, st.Error)
		}
		return "", fmt.Errorf("not a token of this cluster for audience %s", NodeAudience)
	}
	// An authenticator that ignores audiences answers without them: the
	// answer must say the token is for hvkube.
	if !slices.Contains(st.Audiences, NodeAudience) {
		return "", fmt.Errorf("the token is not for audience %s (the review says %v)", NodeAudience, st.Audiences)
	}
	if want := "system:serviceaccount:" + serviceAccount; st.User.Username != want {
		return "", fmt.Errorf("the token is %s's, not the node agents' service account (%s)", st.User.Username, want)
	}
	nodes := st.User.Extra[nodeNameExtra]
	if len(nodes) != 1 || nodes[0] == "" {
		return "", errors.New("the token is bound to no pod on a node: a node agent's token is its pod's, projected with audience " + NodeAudience)
	}
	return nodes[0], nil
}

// ErrPolicyNotEnforced says the API server let a node do what
// deploy/admission-policy.yaml refuses it.
var ErrPolicyNotEnforced = errors.New("the API server accepted a Node object of another name from this node: the admission policies of deploy/admission-policy.yaml are not in force (not applied, or the API server runs without the ValidatingAdmissionPolicy plugin), and a node taken over could write other hosts' objects")

// CheckNodePolicy asks the API server, in a dry run that stores nothing,
// to create a Node object of a name no host has, as this store's user:
// with the admission policies in force a node is refused (403). It
// returns nil when refused, ErrPolicyNotEnforced when accepted, and
// other errors as they are.
func (s *Store) CheckNodePolicy(ctx context.Context) error {
	r, err := s.res(api.KindNode)
	if err != nil {
		return err
	}
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.KubeVersion, "kind": api.KindNode,
		"metadata": map[string]any{"name": "hvkube-policy-probe", "namespace": s.ns},
	}}
	_, err = r.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case apierrors.IsForbidden(err):
		return nil
	case err == nil, apierrors.IsAlreadyExists(err):
		return ErrPolicyNotEnforced
	}
	return fmt.Errorf("checking the admission policies: %w", err)
}
