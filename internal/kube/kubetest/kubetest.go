// Package kubetest starts a real kube-apiserver, on a real etcd, on
// loopback for a test binary: once, the first time a test asks, with
// hvkube's CRDs installed; each test gets a namespace of its own. The
// binaries come from hack/kube/build.sh (HVKUBE_KUBE_ASSETS names their
// directory). Without them a test skips, unless HVKUBE_REQUIRE_KUBE=1 (as
// make test sets it): then it fails.
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/crd"
)

// Env is a running API server.
type Env struct {
	// Config reaches it as an administrator.
	Config *rest.Config
	// Dir holds its files: etcd's data, certificates, logs.
	Dir string

	procs []*exec.Cmd
}

var (
	once    sync.Once
	env     *Env
	envErr  error
	started bool
)

// Main runs the tests of a package, then stops the API server if one
// started: call it from TestMain.
func Main(m *testing.M) int {
	code := m.Run()
	if started && env != nil {
		env.stop()
	}
	return code
}

// Start returns the test binary's API server, starting it the first time.
func Start(t testing.TB) *Env {
	t.Helper()
	dir := os.Getenv("HVKUBE_KUBE_ASSETS")
	if dir == "" {
		if os.Getenv("HVKUBE_REQUIRE_KUBE") == "1" {
			t.Fatal("HVKUBE_KUBE_ASSETS is not set: build kube-apiserver and etcd with hack/kube/build.sh and set it to the directory it prints")
		}
		t.Skip("no kube-apiserver: set HVKUBE_KUBE_ASSETS=$(hack/kube/build.sh) to run the Kubernetes tests")
	}
	once.Do(func() {
		started = true
		env, envErr = start(dir)
	})
	if envErr != nil {
		t.Fatalf("start kube-apiserver: %v", envErr)
	}
	return env
}

// Namespace creates a namespace for one test and returns its name.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	name := "t-" + hex.EncodeToString(b)
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func start(assets string) (_ *Env, err error) {
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("%s: %w (build it with hack/kube/build.sh)", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "hvkube-kube-")
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: dir}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	if err := e.run(filepath.Join(assets, "etcd"), "etcd.log",
		"--name", "test", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "test="+peerURL, "--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return nil, err
	}

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return nil, err
	}
	tb := make([]byte, 16)
	rand.Read(tb)
	token := hex.EncodeToString(tb)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return nil, err
	}
	certs := filepath.Join(dir, "certs")
	if err := e.run(filepath.Join(assets, "kube-apiserver"), "apiserver.log",
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(ports[2]),
		// On loopback: no endpoints to reconcile for a Service.
		"--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none",
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--cert-dir", certs,
		"--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--disable-admission-plugins", "ServiceAccount"); err != nil {
		return nil, err
	}
	e.Config = &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", ports[2]), BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(certs, "apiserver.crt")}, QPS: 1000, Burst: 2000}
	if err := e.waitReady(90 * time.Second); err != nil {
		return nil, err
	}
	if err := e.installCRDs(); err != nil {
		return nil, err
	}
	return e, nil
}

// run starts a server with an environment of its own (no tokens of the
// test's) and its output in a log file.
func (e *Env) run(bin, logName string, args ...string) error {
	f, err := os.Create(filepath.Join(e.Dir, logName))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + e.Dir}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	f.Close()
	e.procs = append(e.procs, cmd)
	return nil
}

func (e *Env) stop() {
	for i := len(e.procs) - 1; i >= 0; i-- {
		p := e.procs[i]
		p.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
	e.procs = nil
	if os.Getenv("HVKUBE_KEEP_KUBE") == "" {
		os.RemoveAll(e.Dir)
	}
}

// tail is the end of a server's log, for an error.
func (e *Env) tail(name string) string {
	b, _ := os.ReadFile(filepath.Join(e.Dir, name))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

func (e *Env) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		for _, p := range e.procs {
			if p.ProcessState != nil {
				return fmt.Errorf("%s exited: %s", filepath.Base(p.Path), e.tail("apiserver.log")+e.tail("etcd.log"))
			}
		}
		if _, err := os.Stat(e.Config.TLSClientConfig.CAFile); err == nil {
			cs, err := kubernetes.NewForConfig(e.Config)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, last = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			cancel()
			if last == nil {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("not ready within %s (%v); log:\n%s", limit, last, e.tail("apiserver.log"))
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs installs hvkube's CRDs, waits until they are established,
// and lists each kind once: the first list of a fresh CRD can answer 429.
func (e *Env) installCRDs() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	all, err := crd.All()
	if err != nil {
		return err
	}
	for _, c := range all {
		if _, err := dyn.Resource(crdResource).Create(ctx, &unstructured.Unstructured{Object: c}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("install CRD %s: %w", c["metadata"].(map[string]any)["name"], err)
		}
	}
	for _, k := range api.Kinds {
		name := k.Plural + "." + crd.Group
		for {
			u, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if established(u) {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("CRD %s not established: %w", name, ctx.Err())
			}
			time.Sleep(50 * time.Millisecond)
		}
		gvr := schema.GroupVersionResource{Group: crd.Group, Version: crd.Version, Resource: k.Plural}
		for {
			_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			if err == nil {
				break
			}
			if !apierrors.IsTooManyRequests(err) && !apierrors.IsNotFound(err) || ctx.Err() != nil {
				return fmt.Errorf("list %s: %w", k.Plural, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func established(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// Kubeconfig writes a kubeconfig that reaches the API server as an
// administrator, in namespace ns, and returns its path.
func (e *Env) Kubeconfig(t testing.TB, ns string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthority: e.Config.TLSClientConfig.CAFile}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: e.Config.BearerToken}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin", Namespace: ns}
	cfg.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
