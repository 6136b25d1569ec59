// Package local runs a kube-apiserver on a real etcd on loopback, from
// the binaries hack/kube/build.sh builds: for the tests (kubetest) and for
// benchmarks that need an API server of their own. It is not a way to run
// a cluster.
package local

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
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hvkube/hvkube/internal/crd"
)

// Server is a running API server.
type Server struct {
	// Config reaches it as an administrator.
	Config *rest.Config
	// Dir holds its files: etcd's data, certificates, logs.
	Dir string

	procs []*exec.Cmd
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Launch starts etcd and kube-apiserver from the directory assets, waits
// until the API server is ready, and installs hvkube's CRDs.
func Launch(assets string) (_ *Server, err error) {
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("%s: %w (build it with hack/kube/build.sh)", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "hvkube-kube-")
	if err != nil {
		return nil, err
	}
	e := &Server{Dir: dir}
	defer func() {
		if err != nil {
			e.Stop()
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
		// As clusters that run privileged pods do (kubeadm's default):
		// the node DaemonSet of deploy/ is one.
		"--allow-privileged",
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := crd.Install(ctx, e.Config); err != nil {
		return nil, err
	}
	return e, nil
}

// run starts a server with an environment of its own (no tokens of the
// test's) and its output in a log file.
func (e *Server) run(bin, logName string, args ...string) error {
	f, err := os.Create(filepath.Join(e.Dir, logName))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + e.Dir}
	cmd.Stdout, cmd.Stderr = f, f
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	f.Close()
	e.procs = append(e.procs, cmd)
	return nil
}

// CPUTime is the CPU time etcd and kube-apiserver have used so far (on
// Linux; elsewhere an error).
func (e *Server) CPUTime() (time.Duration, error) {
	var sum time.Duration
	for _, p := range e.procs {
		if p.Process == nil {
			continue
		}
		d, err := cpuTime(p.Process.Pid)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// Stop ends the servers and removes their files (unless HVKUBE_KEEP_KUBE
// is set).
func (e *Server) Stop() {
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
func (e *Server) tail(name string) string {
	b, _ := os.ReadFile(filepath.Join(e.Dir, name))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

func (e *Server) waitReady(limit time.Duration) error {
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

// WriteKubeconfig writes a kubeconfig that reaches the API server as an
// administrator, in namespace ns.
func (e *Server) WriteKubeconfig(path, ns string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthority: e.Config.TLSClientConfig.CAFile}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: e.Config.BearerToken}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "admin", Namespace: ns}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}

// CreateNamespace creates namespace name.
func (e *Server) CreateNamespace(ctx context.Context, name string) error {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}
