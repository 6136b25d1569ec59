package kube_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// deployDir holds the manifests, deployNS the namespace they install into.
const (
	deployDir = "../../deploy"
	deployNS  = "hvkube-system"
)

// manifest is one document of deploy/.
type manifest struct {
	file string
	obj  *unstructured.Unstructured
}

func (m manifest) String() string {
	return m.file + ": " + m.obj.GetKind() + " " + m.obj.GetName()
}

// readDeploy returns the documents of the files deploy/kustomization.yaml
// lists, in its order, after checking that it lists every manifest in
// deploy/ (what kubectl apply -k installs is what is there).
func readDeploy(t *testing.T) []manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	var files []string
	err = filepath.WalkDir(deployDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".yaml" || d.Name() == "kustomization.yaml" {
			return err
		}
		rel, err := filepath.Rel(deployDir, p)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	listed := slices.Clone(k.Resources)
	sort.Strings(listed)
	sort.Strings(files)
	if !slices.Equal(listed, files) {
		t.Fatalf("kustomization.yaml lists %v; deploy/ holds %v", listed, files)
	}
	var out []manifest
	for _, f := range k.Resources {
		b, err := os.ReadFile(filepath.Join(deployDir, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(b), "\n---") {
			var m map[string]any
			if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			if m == nil {
				continue
			}
			u := &unstructured.Unstructured{Object: m}
			if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
				t.Fatalf("%s #%d: no apiVersion, kind or name", f, i)
			}
			out = append(out, manifest{file: f, obj: u})
		}
	}
	return out
}

// deployClients reaches the test's API server as its administrator.
type deployClients struct {
	cfg    *rest.Config
	core   kubernetes.Interface
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newDeployClients(t *testing.T) deployClients {
	t.Helper()
	env := kubetest.Start(t)
	c := deployClients{cfg: env.Config}
	var err error
	if c.core, err = kubernetes.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	if c.dyn, err = dynamic.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(c.core.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	c.mapper = restmapper.NewDiscoveryRESTMapper(groups)
	return c
}

// apply applies m server-side, as kubectl apply --server-side does, with
// strict field validation (a field the schema does not have is an error),
// only as a dry run when dryRun is set.
func (c deployClients) apply(ctx context.Context, m manifest, dryRun bool) error {
	gvk := m.obj.GroupVersionKind()
	mp, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	var r dynamic.ResourceInterface = c.dyn.Resource(mp.Resource)
	if mp.Scope.Name() == meta.RESTScopeNameNamespace {
		if m.obj.GetNamespace() == "" {
			return errors.New("namespaced, but names no namespace")
		}
		r = c.dyn.Resource(mp.Resource).Namespace(m.obj.GetNamespace())
	}
	b, err := json.Marshal(m.obj.Object)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: "hvkube-deploy-test", Force: new(true), FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = r.Patch(ctx, m.obj.GetName(), types.ApplyPatchType, b, opts)
	return err
}

// applyFor applies the manifests of kinds for real: the namespace first.
func (c deployClients) applyFor(t *testing.T, ms []manifest, kinds ...string) {
	t.Helper()
	ctx := context.Background()
	for _, k := range kinds {
		for _, m := range ms {
			if m.obj.GetKind() == k {
				if err := c.apply(ctx, m, false); err != nil {
					t.Fatalf("%s: %v", m, err)
				}
			}
		}
	}
}

// TestDeployManifestsOnKubernetes: every manifest of deploy/ is one
// kubectl apply -k deploy/ sends, and the API server accepts each as it
// is (server-side apply, dry run, strict field validation); the pods'
// service accounts, Secrets and namespace are the ones the manifests and
// the docs name.
func TestDeployManifestsOnKubernetes(t *testing.T) {
	ms := readDeploy(t)
	c := newDeployClients(t)
	ctx := context.Background()
	// Dry runs of namespaced objects need their namespace to exist.
	c.applyFor(t, ms, "Namespace")
	kinds := map[string]int{}
	accounts := map[string]bool{}
	for _, m := range ms {
		kinds[m.obj.GetKind()]++
		if ns := m.obj.GetNamespace(); ns != "" && ns != deployNS {
			t.Errorf("%s: namespace %s, want %s", m, ns, deployNS)
		}
		if m.obj.GetKind() == "ServiceAccount" {
			accounts[m.obj.GetName()] = true
		}
		if err := c.apply(ctx, m, true); err != nil {
			t.Errorf("%s: the API server refused it: %v", m, err)
		}
	}
	for kind, n := range map[string]int{"CustomResourceDefinition": len(api.Kinds), "Namespace": 1, "ServiceAccount": 2,
		"Role": 2, "RoleBinding": 2, "ClusterRole": 1, "ClusterRoleBinding": 1, "Deployment": 1, "DaemonSet": 1, "Service": 1, "NetworkPolicy": 1, "ValidatingAdmissionPolicy": 6, "ValidatingAdmissionPolicyBinding": 6} {
		if kinds[kind] != n {
			t.Errorf("%d %s, want %d", kinds[kind], kind, n)
		}
	}
	// The pods run as the accounts the Roles are bound to; the API
	// servers mount the Secrets docs/kubernetes.md says to create, and
	// the nodes none: a node's identity is its pod's token of audience
	// hvkube.
	secrets := map[string]map[string]bool{}
	for _, m := range ms {
		if k := m.obj.GetKind(); k != "Deployment" && k != "DaemonSet" {
			continue
		}
		sa, _, _ := unstructured.NestedString(m.obj.Object, "spec", "template", "spec", "serviceAccountName")
		if !accounts[sa] {
			t.Errorf("%s: serviceAccountName %q is none of the manifests' accounts", m, sa)
		}
		vols, _, _ := unstructured.NestedSlice(m.obj.Object, "spec", "template", "spec", "volumes")
		secrets[m.obj.GetKind()] = map[string]bool{}
		for _, v := range vols {
			if name, ok, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); ok {
				secrets[m.obj.GetKind()][name] = true
			}
			srcs, _, _ := unstructured.NestedSlice(v.(map[string]any), "projected", "sources")
			for _, src := range srcs {
				if aud, ok, _ := unstructured.NestedString(src.(map[string]any), "serviceAccountToken", "audience"); ok && aud != "hvkube" {
					t.Errorf("%s: a projected token of audience %q, want hvkube", m, aud)
				}
				if _, ok, _ := unstructured.NestedMap(src.(map[string]any), "secret"); ok {
					secrets[m.obj.GetKind()]["projected"] = true
				}
			}
		}
	}
	if api := secrets["Deployment"]; !api["hvkube-key"] || !api["hvkube-token"] || len(api) != 2 {
		t.Errorf("the API servers mount the Secrets %v, want hvkube-key and hvkube-token", api)
	}
	if nd := secrets["DaemonSet"]; len(nd) != 0 {
		t.Errorf("the nodes mount the Secrets %v, want none (the key never reaches a node)", nd)
	}
	// Nor a host of theirs: the API servers never run where desktops do.
	for _, m := range ms {
		if m.obj.GetKind() != "Deployment" {
			continue
		}
		terms, _, _ := unstructured.NestedSlice(m.obj.Object, "spec", "template", "spec", "affinity", "nodeAffinity",
			"requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
		b, _ := json.Marshal(terms)
		if len(terms) != 1 || !strings.Contains(string(b), `"key":"hvkube.io/desktops","operator":"NotIn","values":["true"]`) {
			t.Errorf("%s: the API servers may be scheduled on a desktop host: nodeSelectorTerms %s", m, b)
		}
	}
	// The NetworkPolicy selects the nodes' pods and lets in only the API
	// servers' pods.
	podLabels := map[string]map[string]string{}
	var policy *unstructured.Unstructured
	for _, m := range ms {
		switch m.obj.GetKind() {
		case "Deployment", "DaemonSet":
			l, _, _ := unstructured.NestedStringMap(m.obj.Object, "spec", "template", "metadata", "labels")
			podLabels[m.obj.GetKind()] = l
		case "NetworkPolicy":
			policy = m.obj
		}
	}
	selects := func(sel map[string]string, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if policy == nil {
		t.Fatal("no NetworkPolicy")
	}
	target, _, _ := unstructured.NestedStringMap(policy.Object, "spec", "podSelector", "matchLabels")
	ingress, _, _ := unstructured.NestedSlice(policy.Object, "spec", "ingress")
	var from map[string]string
	if len(ingress) == 1 {
		peers, _, _ := unstructured.NestedSlice(ingress[0].(map[string]any), "from")
		if len(peers) == 1 {
			from, _, _ = unstructured.NestedStringMap(peers[0].(map[string]any), "podSelector", "matchLabels")
		}
	}
	if !selects(target, podLabels["DaemonSet"]) || selects(target, podLabels["Deployment"]) {
		t.Errorf("the NetworkPolicy selects %v: want the nodes' pods alone", target)
	}
	if !selects(from, podLabels["Deployment"]) || selects(from, podLabels["DaemonSet"]) {
		t.Errorf("the NetworkPolicy lets in %v: want the API servers' pods alone", from)
	}
}

// identity is one of the manifests' service accounts, as the API server
// sees a pod that runs as it.
func identity(cfg *rest.Config, account string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + deployNS + ":" + account,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNS, "system:authenticated"}}
	return c
}

// nodeNameClaim is what the API server adds to the user of a pod's
// service-account token: the Kubernetes node the pod runs on.
const nodeNameClaim = "authentication.kubernetes.io/node-name"

// identityOn is identity as a pod on Kubernetes node host sees it.
func identityOn(cfg *rest.Config, account, host string) *rest.Config {
	c := identity(cfg, account)
	c.Impersonate.Extra = map[string][]string{nodeNameClaim: {host}}
	return c
}

// refused retries fn until the API server refuses it (Forbidden), for
// up to 30 s: an admission policy takes effect a moment after it is
// applied. It fails the test if fn is never refused.
func refused(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := fn()
		if apierrors.IsForbidden(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %v, want Forbidden by the admission policy", what, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// onNode is a status change that puts a sandbox or an agent on node.
func onNode(node string) func(api.Object) bool {
	return func(o api.Object) bool {
		switch o := o.(type) {
		case *api.Sandbox:
			o.Status.Node = node
		case *api.Agent:
			o.Status.Node = node
		}
		return true
	}
}

// can asks the API server whether account may do verb on resource (in
// group, named name when not empty) in namespace ns.
func (c deployClients) can(t *testing.T, account, ns, verb, group, resource, name string) bool {
	t.Helper()
	sub := ""
	if i := strings.IndexByte(resource, '/'); i >= 0 {
		resource, sub = resource[:i], resource[i+1:]
	}
	r, err := c.core.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + deployNS + ":" + account,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNS, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource, Subresource: sub, Name: name},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.Allowed
}

// example reads an object of examples/, renamed with suffix.
func example(t *testing.T, file, suffix string) api.Object {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../examples", file))
	if err != nil {
		t.Fatal(err)
	}
	o, err := api.DecodeOne(b, api.DecodeOptions{})
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	o.GetMeta().Name += "-" + suffix
	return o
}

// listAndWatch lists and starts a watch of kind, as a controller's
// informer does, and ends the watch; it returns how many objects it listed.
func listAndWatch(ctx context.Context, st *kube.Store, kind string) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items, _, err := st.ListAndWatch(ctx, kind, api.Selector{})
	return len(items), err
}

// TestDeployRBACOnKubernetes applies deploy/'s identities, Roles and
// admission policy, then works as each account does, through the store
// with the account's identity: what the code calls is allowed, and what
// the account must not do is refused.
func TestDeployRBACOnKubernetes(t *testing.T) {
	ms := readDeploy(t)
	c := newDeployClients(t)
	c.applyFor(t, ms, "Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sfx := make([]byte, 3)
	rand.Read(sfx)
	suffix := hex.EncodeToString(sfx)

	ctl, err := kube.Open(ctx, kube.Options{Config: identity(c.cfg, "hvkube-controller"), Namespace: deployNS, Component: "hvkube-server"})
	if err != nil {
		t.Fatalf("open the store as the controller: %v", err)
	}
	defer ctl.Close()

	// The controller: everything the API and the controllers do to
	// every kind.
	objs := map[string]api.Object{}
	for _, f := range []string{"template.yaml", "sandboxpool.yaml", "sandbox.yaml", "agent.yaml", "displayservice.yaml"} {
		o := example(t, f, suffix)
		out, err := ctl.Create(ctx, o)
		if err != nil {
			t.Fatalf("controller: create %s: %v", f, err)
		}
		objs[o.GetTypeMeta().Kind] = out
	}
	nodeObj := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindNode}, Metadata: api.ObjectMeta{Name: "lost-" + suffix}}
	if _, err := ctl.Create(ctx, nodeObj); err != nil {
		t.Fatalf("controller: create a node: %v", err)
	}
	for kind, o := range objs {
		if _, err := ctl.Get(ctx, kind, o.GetMeta().Name); err != nil {
			t.Errorf("controller: get %s: %v", kind, err)
		}
		if n, err := listAndWatch(ctx, ctl, kind); err != nil || n == 0 {
			t.Errorf("controller: list and watch %s: %d items, %v", kind, n, err)
		}
		edited := api.DeepCopy(o)
		edited.GetMeta().Labels = map[string]string{"edited": "yes"}
		if _, _, err := ctl.Update(ctx, edited); err != nil {
			t.Errorf("controller: update %s: %v", kind, err)
		}
		if _, err := reconcile.UpdateStatus(ctx, ctl, kind, o.GetMeta().Name, func(api.Object) bool { return true }); err != nil {
			t.Errorf("controller: update the status of %s: %v", kind, err)
		}
	}
	if _, _, err := ctl.Delete(ctx, api.KindNode, nodeObj.Metadata.Name, store.DeleteOptions{}); err != nil {
		t.Errorf("controller: delete a lost node: %v", err)
	}
	ctl.RecordEvent(ctx, objs[api.KindAgent], api.EventNormal, "Checked", "by the RBAC test")
	ctl.RecordEvent(ctx, objs[api.KindAgent], api.EventNormal, "Checked", "by the RBAC test")
	evs, err := ctl.ListEvents(ctx, store.EventFilter{Kind: api.KindAgent, Name: objs[api.KindAgent].GetMeta().Name})
	if err != nil {
		t.Errorf("controller: list events: %v", err)
	} else if i := slices.IndexFunc(evs, func(e *api.Event) bool { return e.Reason == "Checked" }); i < 0 || evs[i].Count != 2 {
		t.Errorf("controller: the event Checked, recorded twice, is not there once with count 2: %+v", evs)
	}
	if _, err := listAndWatch(ctx, ctl, api.KindEvent); err != nil {
		t.Errorf("controller: watch events: %v", err)
	}
	// Leader election: the one Lease.
	ctlCore, err := kubernetes.NewForConfig(identity(c.cfg, "hvkube-controller"))
	if err != nil {
		t.Fatal(err)
	}
	leases := ctlCore.CoordinationV1().Leases(deployNS)
	lease, err := leases.Get(ctx, "hvkube-controllers", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		holder := "replica-" + suffix
		lease, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "hvkube-controllers"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("controller: get or create the Lease: %v", err)
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Errorf("controller: renew the Lease: %v", err)
	}

	// The node: what internal/node calls, through the store, as the pod
	// of the node's DaemonSet on host does; the sandbox and the agent are
	// placed on it.
	host := "host-" + suffix
	for _, kind := range []string{api.KindSandbox, api.KindAgent} {
		if _, err := reconcile.UpdateStatus(ctx, ctl, kind, objs[kind].GetMeta().Name, onNode(host)); err != nil {
			t.Fatalf("controller: place the %s on %s: %v", kind, host, err)
		}
	}
	nd, err := kube.Open(ctx, kube.Options{Config: identityOn(c.cfg, "hvkube-node", host), Namespace: deployNS, Component: "hvkube-node", Host: host})
	if err != nil {
		t.Fatalf("open the store as the node: %v", err)
	}
	defer nd.Close()
	for _, kind := range []string{api.KindTemplate, api.KindSandbox, api.KindAgent} {
		if n, err := listAndWatch(ctx, nd, kind); err != nil || n == 0 {
			t.Errorf("node: list and watch %s: %d items, %v", kind, n, err)
		}
	}
	if _, _, err := nd.List(ctx, api.KindSandboxPool, api.Selector{}); err != nil {
		t.Errorf("node: list pools: %v", err)
	}
	finalizers := map[string]string{api.KindTemplate: api.FinalizerSnapshot, api.KindSandbox: api.FinalizerVM, api.KindAgent: api.FinalizerRun}
	for kind, f := range finalizers {
		o, err := nd.Get(ctx, kind, objs[kind].GetMeta().Name)
		if err != nil {
			t.Fatalf("node: get %s: %v", kind, err)
		}
		if o, err = reconcile.EnsureFinalizer(ctx, nd, o, f); err != nil {
			t.Errorf("node: add its finalizer to %s: %v", kind, err)
			continue
		}
		if err := reconcile.RemoveFinalizer(ctx, nd, o, f); err != nil {
			t.Errorf("node: remove its finalizer from %s: %v", kind, err)
		}
	}
	for _, kind := range []string{api.KindTemplate, api.KindSandbox, api.KindAgent, api.KindSandboxPool} {
		if _, err := reconcile.UpdateStatus(ctx, nd, kind, objs[kind].GetMeta().Name, func(api.Object) bool { return true }); err != nil {
			t.Errorf("node: update the status of %s: %v", kind, err)
		}
	}
	self := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindNode}, Metadata: api.ObjectMeta{Name: host}}
	if _, err := nd.Create(ctx, self); err != nil {
		t.Fatalf("node: create its Node: %v", err)
	}
	if _, err := reconcile.UpdateStatus(ctx, nd, api.KindNode, self.Metadata.Name, func(o *api.Node) bool {
		hb := time.Now().UTC()
		o.Status.LastHeartbeat, o.Status.Address = &hb, "10.1.2.3:8090"
		return true
	}); err != nil {
		t.Errorf("node: heartbeat: %v", err)
	}
	nd.RecordEvent(ctx, objs[api.KindSandbox], api.EventNormal, "Checked", "by the RBAC test")
	nd.RecordEvent(ctx, objs[api.KindSandbox], api.EventNormal, "Checked", "by the RBAC test")
	nd.Close() // writes the events queued
	nd, err = kube.Open(ctx, kube.Options{Config: identityOn(c.cfg, "hvkube-node", host), Namespace: deployNS, Component: "hvkube-node", Host: host})
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	if evs, err := ctl.ListEvents(ctx, store.EventFilter{Kind: api.KindSandbox, Name: objs[api.KindSandbox].GetMeta().Name}); err != nil {
		t.Errorf("list events: %v", err)
	} else if i := slices.IndexFunc(evs, func(e *api.Event) bool { return e.Reason == "Checked" }); i < 0 || evs[i].Count != 2 {
		t.Errorf("node: the event Checked, recorded twice, is not there once with count 2: %+v", evs)
	}

	// The sixth policy: a node's Events name it, and it patches only its
	// own.
	ndCore, err := kubernetes.NewForConfig(identityOn(c.cfg, "hvkube-node", host))
	if err != nil {
		t.Fatal(err)
	}
	forged := func(name, component, evHost string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + suffix},
			InvolvedObject: corev1.ObjectReference{APIVersion: api.KubeVersion, Kind: api.KindSandbox, Name: objs[api.KindSandbox].GetMeta().Name, Namespace: deployNS},
			Type:           "Normal", Reason: "Forged", Message: "by the RBAC test", Source: corev1.EventSource{Component: component, Host: evHost}, Count: 1}
	}
	refused(t, "node: write an Event as another node", func() error {
		_, err := ndCore.CoreV1().Events(deployNS).Create(ctx, forged("as-peer", "hvkube-node", "peer-"+suffix), metav1.CreateOptions{})
		return err
	})
	refused(t, "node: write an Event as the controller", func() error {
		_, err := ndCore.CoreV1().Events(deployNS).Create(ctx, forged("as-ctl", "hvkube-server", host), metav1.CreateOptions{})
		return err
	})
	ctlEv, err := ctlCore.CoreV1().Events(deployNS).Create(ctx, forged("by-ctl", "hvkube-server", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refused(t, "node: patch the controller's Event", func() error {
		_, err := ndCore.CoreV1().Events(deployNS).Patch(ctx, ctlEv.Name, types.MergePatchType, []byte(`{"message":"rewritten","source":{"component":"hvkube-node","host":"`+host+`"}}`), metav1.PatchOptions{})
		return err
	})

	// What the node must not do, for real.
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("node: %s: %v, want Forbidden", what, err)
		}
	}
	for _, kind := range []string{api.KindTemplate, api.KindSandboxPool, api.KindAgent, api.KindDisplayService} {
		_, _, err := nd.Delete(ctx, kind, objs[kind].GetMeta().Name, store.DeleteOptions{})
		forbidden("delete "+kind, err)
	}
	_, _, err = nd.Delete(ctx, api.KindNode, self.Metadata.Name, store.DeleteOptions{})
	forbidden("delete its Node", err)
	for _, f := range []string{"template.yaml", "sandboxpool.yaml", "agent.yaml"} {
		_, err := nd.Create(ctx, example(t, f, suffix+"-by-node"))
		forbidden("create from "+f, err)
	}
	pool := api.DeepCopy(objs[api.KindSandboxPool]).(*api.SandboxPool)
	pool.Metadata.ResourceVersion = ""
	pool.Spec.Replicas++
	_, _, err = nd.Update(ctx, pool)
	forbidden("scale a pool", err)
	// The admission policy: an update by the node that changes more than
	// finalizers. It takes effect a moment after it is applied.
	for kind := range finalizers {
		deadline := time.Now().Add(30 * time.Second)
		for try := 0; ; try++ {
			o, err := nd.Get(ctx, kind, objs[kind].GetMeta().Name)
			if err != nil {
				t.Fatal(err)
			}
			o.GetMeta().Labels = map[string]string{"by-node": strconv.Itoa(try)}
			_, _, err = nd.Update(ctx, o)
			if apierrors.IsForbidden(err) {
				break
			}
			if err != nil || time.Now().After(deadline) {
				t.Errorf("node: change the labels of %s: %v, want Forbidden by the admission policy", kind, err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	tpl, err := nd.Get(ctx, api.KindTemplate, objs[api.KindTemplate].GetMeta().Name)
	if err != nil {
		t.Fatal(err)
	}
	tpl.(*api.Template).Spec.InstalledSoftware = append(tpl.(*api.Template).Spec.InstalledSoftware, "something-else")
	_, _, err = nd.Update(ctx, tpl)
	forbidden("change a template's spec", err)
	// The fourth: of a pool's status, the node writes its MemoryPressure
	// condition and nothing else.
	poolName := objs[api.KindSandboxPool].GetMeta().Name
	if _, err := reconcile.UpdateStatus(ctx, nd, api.KindSandboxPool, poolName, func(p *api.SandboxPool) bool {
		return api.SetCondition(&p.Status.Conditions, api.Condition{Type: "MemoryPressure", Status: api.ConditionTrue, Reason: "MovedToDisk"}, time.Now())
	}); err != nil {
		t.Errorf("node: set a pool's MemoryPressure condition: %v", err)
	}
	refused(t, "node: write a pool's ready count", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindSandboxPool, poolName, func(p *api.SandboxPool) bool {
			p.Status.Ready += 7
			return true
		})
		return err
	})
	refused(t, "node: write another condition of a pool", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindSandboxPool, poolName, func(p *api.SandboxPool) bool {
			return api.SetCondition(&p.Status.Conditions, api.Condition{Type: "Ready", Status: api.ConditionFalse, Reason: "ByNode"}, time.Now())
		})
		return err
	})
	// The fifth: of a template's status, its own shapes, and retired
	// snapshots the template named.
	tplName := objs[api.KindTemplate].GetMeta().Name
	if _, err := reconcile.UpdateStatus(ctx, nd, api.KindTemplate, tplName, func(tp *api.Template) bool {
		tp.Status.Shapes = append(tp.Status.Shapes, api.TemplateShape{Node: host, MemoryMB: 1024, Resolution: "1280x800", ID: "own-shape-" + suffix, Phase: "Pending"})
		return true
	}); err != nil {
		t.Errorf("node: add its own shape to a template: %v", err)
	}
	refused(t, "node: add a shape of another node to a template", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindTemplate, tplName, func(tp *api.Template) bool {
			tp.Status.Shapes = append(tp.Status.Shapes, api.TemplateShape{Node: "peer-" + suffix, MemoryMB: 2048, Resolution: "1280x800", ID: "peer-shape", Phase: "Ready"})
			return true
		})
		return err
	})
	refused(t, "node: retire a snapshot the template never named", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindTemplate, tplName, func(tp *api.Template) bool {
			tp.Status.Retired = append(tp.Status.Retired, "another-template-snapshot")
			return true
		})
		return err
	})
	if _, err := reconcile.UpdateStatus(ctx, nd, api.KindTemplate, tplName, func(tp *api.Template) bool {
		tp.Status.Shapes = nil
		tp.Status.Retired = append(tp.Status.Retired, "own-shape-"+suffix)
		return true
	}); err != nil {
		t.Errorf("node: retire its shape: %v", err)
	}
	// The second policy: each node to its own host.
	peer := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindNode}, Metadata: api.ObjectMeta{Name: "peer-" + suffix}}
	if _, err := ctl.Create(ctx, peer); err != nil {
		t.Fatalf("controller: create a node: %v", err)
	}
	refused(t, "node: write another node's Node object", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindNode, peer.Metadata.Name, func(o *api.Node) bool {
			hb := time.Now().UTC()
			o.Status.LastHeartbeat, o.Status.Address = &hb, "10.6.6.6:8090"
			return true
		})
		return err
	})
	refused(t, "node: create a Node object of another name", func() error {
		o := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindNode}, Metadata: api.ObjectMeta{Name: "fake-" + suffix}}
		_, err := nd.Create(ctx, o)
		return err
	})
	refused(t, "node: hand its agent to another node", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindAgent, objs[api.KindAgent].GetMeta().Name, onNode(peer.Metadata.Name))
		return err
	})
	// A Pending agent bound to no node (claimed for one of this node's
	// sandboxes): the node may only start it, Running on itself and a
	// sandbox, as one write.
	unbound, err := ctl.Create(ctx, example(t, "agent.yaml", suffix+"-unbound"))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Delete(ctx, api.KindAgent, unbound.GetMeta().Name, store.DeleteOptions{})
	startOn := func(node, sandbox, phase string) func(*api.Agent) bool {
		return func(a *api.Agent) bool {
			a.Status.Phase, a.Status.Node, a.Status.Sandbox, a.Status.Attempts = phase, node, sandbox, 1
			return true
		}
	}
	refused(t, "node: write an agent bound to no node without starting it", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindAgent, unbound.GetMeta().Name, func(a *api.Agent) bool {
			a.Status.Message = "written by " + host
			return true
		})
		return err
	})
	refused(t, "node: start an agent bound to no node on another node", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindAgent, unbound.GetMeta().Name, startOn(peer.Metadata.Name, "box", api.AgentRunning))
		return err
	})
	refused(t, "node: start an agent bound to no node on no sandbox", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindAgent, unbound.GetMeta().Name, startOn(host, "", api.AgentRunning))
		return err
	})
	refused(t, "node: finish an agent bound to no node", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindAgent, unbound.GetMeta().Name, startOn(host, "box", api.AgentCompleted))
		return err
	})
	if _, err := reconcile.UpdateStatus(ctx, nd, api.KindAgent, unbound.GetMeta().Name, startOn(host, "box", api.AgentRunning)); err != nil {
		t.Errorf("node: start a Pending agent on itself: %v", err)
	}
	// The claim is the scheduler's: the node may not claim its own
	// sandbox for an agent (the API servers give a token only to an
	// attempt on a claim), nor change a claim; it may clear one (its
	// release).
	sbName := objs[api.KindSandbox].GetMeta().Name
	claimFor := func(agent, uid string) func(*api.Sandbox) bool {
		return func(sb *api.Sandbox) bool {
			sb.Status.CurrentAgent = agent
			sb.Status.Claim = &api.AgentClaim{UID: uid, Attempt: 1}
			return true
		}
	}
	refused(t, "node: claim its sandbox for an agent", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindSandbox, sbName, claimFor(unbound.GetMeta().Name, unbound.GetMeta().UID))
		return err
	})
	refused(t, "node: name an agent on its sandbox", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindSandbox, sbName, func(sb *api.Sandbox) bool {
			sb.Status.CurrentAgent = unbound.GetMeta().Name
			return true
		})
		return err
	})
	if _, err := reconcile.UpdateStatus(ctx, ctl, api.KindSandbox, sbName, claimFor("claimed-"+suffix, "uid-claimed")); err != nil {
		t.Fatalf("controller: claim the node's sandbox: %v", err)
	}
	refused(t, "node: turn a claim to another agent", func() error {
		_, err := reconcile.UpdateStatus(ctx, nd, api.KindSandbox, sbName, claimFor(unbound.GetMeta().Name, unbound.GetMeta().UID))
		return err
	})
	if _, err := reconcile.UpdateStatus(ctx, nd, api.KindSandbox, sbName, func(sb *api.Sandbox) bool {
		sb.Status.Message = "kept the claim"
		return true
	}); err != nil {
		t.Errorf("node: write its claimed sandbox's status, the claim kept: %v", err)
	}
	if _, err := reconcile.UpdateStatus(ctx, nd, api.KindSandbox, sbName, func(sb *api.Sandbox) bool {
		sb.Status.CurrentAgent, sb.Status.Claim = "", nil
		return true
	}); err != nil {
		t.Errorf("node: release its sandbox's claim: %v", err)
	}
	// The sandbox and the agent move to the peer: the node may no longer
	// write them, nor take them back.
	// (The node deletes its sandbox below: the peer gets one of its own.)
	peerSandbox, err := ctl.Create(ctx, example(t, "sandbox.yaml", suffix+"-peer"))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Delete(ctx, api.KindSandbox, peerSandbox.GetMeta().Name, store.DeleteOptions{})
	for _, kind := range []string{api.KindSandbox, api.KindAgent} {
		name := objs[kind].GetMeta().Name
		if kind == api.KindSandbox {
			name = peerSandbox.GetMeta().Name
		}
		if _, err := reconcile.UpdateStatus(ctx, ctl, kind, name, onNode(peer.Metadata.Name)); err != nil {
			t.Fatal(err)
		}
		refused(t, "node: write the status of a "+kind+" on another node", func() error {
			_, err := reconcile.UpdateStatus(ctx, nd, kind, name, func(o api.Object) bool {
				switch o := o.(type) {
				case *api.Sandbox:
					o.Status.Message = "written by " + host
				case *api.Agent:
					o.Status.Message = "written by " + host
				}
				return true
			})
			return err
		})
		refused(t, "node: take a "+kind+" of another node", func() error {
			_, err := reconcile.UpdateStatus(ctx, nd, kind, name, onNode(host))
			return err
		})
		// The finding of the probe: a node removed the finalizers of
		// another's sandbox, and deleted it.
		own := map[string]string{api.KindSandbox: api.FinalizerVM, api.KindAgent: api.FinalizerRun}[kind]
		refused(t, "node: add its finalizer to a "+kind+" of another node", func() error {
			o, err := nd.Get(ctx, kind, name)
			if err != nil {
				return err
			}
			_, err = reconcile.EnsureFinalizer(ctx, nd, o, own)
			return err
		})
		if kind == api.KindSandbox {
			o, err := ctl.Get(ctx, kind, name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := reconcile.EnsureFinalizer(ctx, ctl, o, own); err != nil {
				t.Fatal(err)
			}
			refused(t, "node: remove the finalizer of a sandbox of another node", func() error {
				o, err := nd.Get(ctx, kind, name)
				if err != nil {
					return err
				}
				return reconcile.RemoveFinalizer(ctx, nd, o, own)
			})
			refused(t, "node: delete a sandbox of another node", func() error {
				_, _, err := nd.Delete(ctx, kind, name, store.DeleteOptions{})
				return err
			})
			if o, err := ctl.Get(ctx, kind, name); err != nil || o.GetMeta().DeletionTimestamp != nil {
				t.Errorf("the peer's sandbox after the node's refused delete: %v, %v", o, err)
			}
			if o, err := ctl.Get(ctx, kind, name); err == nil {
				reconcile.RemoveFinalizer(ctx, ctl, o, own)
			}
		}
	}
	// The node's start-up check finds the policies in force; as a user
	// they do not hold (the administrator), it says they are not.
	if err := nd.CheckNodePolicy(ctx); err != nil {
		t.Errorf("node: the policy check with the policies in force: %v", err)
	}
	if err := ctl.CheckNodePolicy(ctx); !errors.Is(err, kube.ErrPolicyNotEnforced) {
		t.Errorf("the policy check as the controller: %v, want ErrPolicyNotEnforced", err)
	}
	// Nor a finalizer of another kind's, even on its own template.
	refused(t, "node: add another finalizer to a template", func() error {
		o, err := nd.Get(ctx, api.KindTemplate, objs[api.KindTemplate].GetMeta().Name)
		if err != nil {
			return err
		}
		_, err = reconcile.EnsureFinalizer(ctx, nd, o, "example.com/hold")
		return err
	})
	// With the policy in force, what is the node's own still goes through.
	if _, err := reconcile.UpdateStatus(ctx, nd, api.KindNode, host, func(o *api.Node) bool {
		hb := time.Now().UTC()
		o.Status.LastHeartbeat = &hb
		return true
	}); err != nil {
		t.Errorf("node: heartbeat under the policy: %v", err)
	}
	if _, err := reconcile.UpdateStatus(ctx, nd, api.KindSandbox, objs[api.KindSandbox].GetMeta().Name, func(o *api.Sandbox) bool {
		o.Status.Message = "written by " + host
		return true
	}); err != nil {
		t.Errorf("node: write the status of its own sandbox under the policy: %v", err)
	}
	// A token that names no Kubernetes node writes no Node object.
	anon, err := kube.Open(ctx, kube.Options{Config: identity(c.cfg, "hvkube-node"), Namespace: deployNS, Component: "hvkube-node"})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	refused(t, "node without the node-name claim: heartbeat", func() error {
		_, err := reconcile.UpdateStatus(ctx, anon, api.KindNode, host, func(o *api.Node) bool {
			hb := time.Now().UTC()
			o.Status.LastHeartbeat = &hb
			return true
		})
		return err
	})
	ctl.Delete(ctx, api.KindNode, peer.Metadata.Name, store.DeleteOptions{})

	_, err = ndCore.CoreV1().Secrets(deployNS).Get(ctx, "hvkube-key", metav1.GetOptions{})
	forbidden("read the key Secret", err)
	_, err = ndCore.CoordinationV1().Leases(deployNS).Get(ctx, "hvkube-controllers", metav1.GetOptions{})
	forbidden("read the controllers' Lease", err)
	// The node deletes sandboxes (released under the destroy policy, past
	// their lifetime).
	if _, _, err := nd.Delete(ctx, api.KindSandbox, objs[api.KindSandbox].GetMeta().Name, store.DeleteOptions{}); err != nil {
		t.Errorf("node: delete a sandbox: %v", err)
	}

	// The rest by access review: neither account reads Secrets or runs
	// pods, nor acts outside its namespace; the node cannot take the
	// controllers' Lease.
	type check struct {
		account, ns, verb, group, resource, name string
		want                                     bool
	}
	var checks []check
	for _, acct := range []string{"hvkube-controller", "hvkube-node"} {
		for _, verb := range []string{"get", "list", "watch"} {
			checks = append(checks, check{acct, deployNS, verb, "", "secrets", "", false}, check{acct, "", verb, "", "secrets", "", false})
		}
		checks = append(checks,
			check{acct, deployNS, "create", "", "pods", "", false},
			check{acct, deployNS, "create", "", "pods/exec", "", false},
			check{acct, deployNS, "create", "", "serviceaccounts/token", "", false},
			check{acct, "default", "get", "hvkube.io", "sandboxes", "", false},
			check{acct, deployNS, "update", "hvkube.io", "sandboxes", "", false}, // writes are merge patches
			check{acct, deployNS, "update", "hvkube.io", "sandboxes/status", "", false},
			check{acct, deployNS, "deletecollection", "hvkube.io", "sandboxes", "", false},
			check{acct, deployNS, "update", "rbac.authorization.k8s.io", "roles", "hvkube-node", false},
			check{acct, deployNS, "delete", "", "events", "", false},
		)
	}
	checks = append(checks,
		check{"hvkube-controller", deployNS, "update", "coordination.k8s.io", "leases", "hvkube-controllers", true},
		check{"hvkube-controller", deployNS, "update", "coordination.k8s.io", "leases", "someone-else", false},
		check{"hvkube-controller", deployNS, "update", "hvkube.io", "sandboxpools/scale", "", false},
		check{"hvkube-node", deployNS, "create", "coordination.k8s.io", "leases", "", false},
		check{"hvkube-node", deployNS, "update", "coordination.k8s.io", "leases", "hvkube-controllers", false},
		check{"hvkube-node", deployNS, "patch", "hvkube.io", "sandboxpools", "", false},
		check{"hvkube-node", deployNS, "patch", "hvkube.io", "sandboxpools/scale", "", false},
		check{"hvkube-node", deployNS, "patch", "hvkube.io", "nodes", "", false},
		check{"hvkube-node", deployNS, "patch", "hvkube.io", "displayservices/status", "", false},
		check{"hvkube-node", deployNS, "get", "hvkube.io", "displayservices", "", false},
		check{"hvkube-node", deployNS, "list", "", "events", "", false},
		check{"hvkube-node", deployNS, "create", "hvkube.io", "sandboxes", "", false},
		// The API servers tell a node from its pod's token; a node asks
		// nobody who a token is.
		check{"hvkube-controller", "", "create", "authentication.k8s.io", "tokenreviews", "", true},
		check{"hvkube-node", "", "create", "authentication.k8s.io", "tokenreviews", "", false},
	)
	for _, ck := range checks {
		if got := c.can(t, ck.account, ck.ns, ck.verb, ck.group, ck.resource, ck.name); got != ck.want {
			t.Errorf("%s may %s %s.%s %q in namespace %q: %v, want %v", ck.account, ck.verb, ck.resource, ck.group, ck.name, ck.ns, got, ck.want)
		}
	}

	// Clean up: the namespace is the manifests', not the test's own.
	for kind, o := range objs {
		ctl.Delete(ctx, kind, o.GetMeta().Name, store.DeleteOptions{})
	}
	ctl.Delete(ctx, api.KindNode, self.Metadata.Name, store.DeleteOptions{})
	c.core.CoreV1().Events(deployNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}
