package kube_test

import (
	"context"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
)

// TestReviewNodeTokenOnKubernetes: a node agent's pod-bound
// service-account token of audience hvkube names the node its pod runs
// on, as the API server signed it. What a node taken over could present
// instead is refused: its pod's default token (another audience), a token
// of another service account, or one bound to no pod.
func TestReviewNodeTokenOnKubernetes(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	core, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kube.Open(ctx, kube.Options{Config: env.Config, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	host := ns + "-host"
	if _, err := core.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: host}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { core.CoreV1().Nodes().Delete(context.Background(), host, metav1.DeleteOptions{}) })
	for _, sa := range []string{"hvkube-node", "other"} {
		if _, err := core.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name, sa string) *corev1.Pod {
		p, err := core.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: host,
				Containers: []corev1.Container{{Name: "node", Image: "hvkube:dev"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := func(sa string, p *corev1.Pod, aud string) string {
		req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{aud}}}
		if p != nil {
			req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}
		}
		tr, err := core.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	nodePod, otherPod := pod("hvkube-node-x", "hvkube-node"), pod("other-x", "other")
	sa := ns + ":hvkube-node"

	got, err := st.ReviewNodeToken(ctx, token("hvkube-node", nodePod, kube.NodeAudience), sa)
	if err != nil || got != host {
		t.Fatalf("the node pod's token names %q, %v; want %s", got, err, host)
	}
	for _, c := range []struct {
		name, tok, says string
	}{
		{"another audience", token("hvkube-node", nodePod, "https://kubernetes.default.svc.cluster.local"), "audience"},
		{"another service account", token("other", otherPod, kube.NodeAudience), "not the node agents'"},
		{"bound to no pod", token("hvkube-node", nil, kube.NodeAudience), "bound to no pod"},
		{"not a token", "eyJhbGciOiJub25lIn0.e30.", "audience"},
	} {
		if n, err := st.ReviewNodeToken(ctx, c.tok, sa); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %q, %v; want refused saying %q", c.name, n, err, c.says)
		}
	}
}
