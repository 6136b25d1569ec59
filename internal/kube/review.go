package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"

	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
func (s *Store) ReviewNodeToken(ctx context.Context, tok, serviceAccount string) (string, error) {
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
