package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/hvkube/hvkube/internal/bench"
	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/local"
	"github.com/hvkube/hvkube/internal/store"
)

// Stores hvkube keeps its objects in.
const (
	storeSQLite     = "sqlite"
	storeKubernetes = "kubernetes"
)

// storeConfig chooses and reaches the store.
type storeConfig struct {
	kind       string // storeSQLite or storeKubernetes
	kubeconfig string // "": KUBECONFIG, ~/.kube/config, or in-cluster
	namespace  string // "": the kubeconfig context's, else "default"
	host       string // a node agent's name: the source of its events, and the scope of its lists and watches
}

// openStore opens the store cfg names; close releases it.
func openStore(ctx context.Context, cfg storeConfig, dataDir, component string, log *slog.Logger) (st store.API, close func() error, err error) {
	switch cfg.kind {
	case "", storeSQLite:
		s, err := store.Open(ctx, dataDir, store.Options{Logger: log})
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	case storeKubernetes:
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = cfg.kubeconfig
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
		rc, err := cc.ClientConfig()
		if err != nil {
			return nil, nil, fmt.Errorf("--store kubernetes: no API server to reach (--kubeconfig, KUBECONFIG, ~/.kube/config, or run in a pod): %w", err)
		}
		ns := cfg.namespace
		if ns == "" {
			if ns, _, err = cc.Namespace(); err != nil || ns == "" {
				ns = "default"
			}
		}
		s, err := kube.Open(ctx, kube.Options{Config: rc, Namespace: ns, Component: component, Host: cfg.host, NodeScope: cfg.host, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		log.Info("store: Kubernetes", "server", rc.Host, "namespace", ns)
		return s, s.Close, nil
	}
	return nil, nil, fmt.Errorf("--store %q: want %s or %s", cfg.kind, storeSQLite, storeKubernetes)
}

// benchKubeStore opens the Kubernetes store of a benchmark: on the API
// server sc reaches, or on one started here from assets, in a namespace of
// the benchmark's own unless sc names one.
func benchKubeStore(sc storeConfig, assets string) bench.StoreFunc {
	return func(ctx context.Context, dataDir string, log *slog.Logger) (store.API, func() error, error) {
		ns := sc.namespace
		if ns == "" {
			ns = fmt.Sprintf("hvkube-bench-%d", time.Now().Unix())
		}
		if sc.kubeconfig != "" {
			sc.namespace = ns
			return openStore(ctx, sc, dataDir, "hvkube-bench", log)
		}
		if assets == "" {
			return nil, nil, fmt.Errorf("--store kubernetes: give --kubeconfig, or --kube-assets (the directory hack/kube/build.sh prints) to start an API server here")
		}
		srv, err := local.Launch(assets)
		if err != nil {
			return nil, nil, err
		}
		if err := srv.CreateNamespace(ctx, ns); err != nil {
			srv.Stop()
			return nil, nil, err
		}
		log.Warn("started a kube-apiserver for the benchmark", "server", srv.Config.Host, "namespace", ns)
		st, err := kube.Open(ctx, kube.Options{Config: srv.Config, Namespace: ns, Component: "hvkube-bench", Logger: log})
		if err != nil {
			srv.Stop()
			return nil, nil, err
		}
		return st, func() error { st.Close(); srv.Stop(); return nil }, nil
	}
}
