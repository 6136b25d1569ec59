package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hvkube/hvkube/internal/bench"
	"github.com/hvkube/hvkube/internal/capacity"
	"github.com/hvkube/hvkube/internal/cli"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/local"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/store"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure hvkube and print p50/p95 latencies",
		Long: `Measure hvkube end to end and print p50/p95 latencies. With --write FILE the
results replace their section of FILE (docs/benchmarks.md in the repository).
With --cpuprofile FILE a CPU profile of the benchmark's own process is
written there (go tool pprof reads it).`,
	}
	var cpuProfile string
	var profile *os.File
	cmd.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the benchmark's process to this file")
	cmd.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if cpuProfile == "" {
			return nil
		}
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		profile = f
		return nil
	}
	cmd.PersistentPostRunE = func(cmd *cobra.Command, args []string) error {
		if profile == nil {
			return nil
		}
		pprof.StopCPUProfile()
		return profile.Close()
	}
	cmd.AddCommand(newBenchAPICmd(), newBenchQEMUCmd(), newBenchControlCmd(), newBenchClaimsCmd(), newBenchAgentsCmd(), newBenchDisplayCmd(), newBenchMCPCmd(), newBenchBrowserCmd(), newBenchDensityCmd())
	return cmd
}

func newBenchAPICmd() *cobra.Command {
	var objects, runs int
	var write string
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Control plane: create, get, list with many objects stored; apply of a 100-document file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if objects < 100 {
				return fmt.Errorf("--objects: at least 100")
			}
			if runs < 20 {
				return fmt.Errorf("--runs: at least 20")
			}
			rep, err := bench.API(cmd.Context(), bench.APIOptions{
				Objects: objects,
				Runs:    runs,
				Log:     cmd.ErrOrStderr(),
				Apply: func(ctx context.Context, server, file string) error {
					var errOut strings.Builder
					if code := cli.Main(ctx, cli.Options{Stdout: io.Discard, Stderr: &errOut}, []string{"--server", server, "apply", "-f", file}); code != 0 {
						return fmt.Errorf("apply exited %d: %s", code, errOut.String())
					}
					return nil
				},
			})
			if err != nil {
				return err
			}
			return report(cmd, rep, "api", write)
		},
	}
	cmd.Flags().IntVar(&objects, "objects", 10000, "objects stored before measuring")
	cmd.Flags().IntVar(&runs, "runs", 200, "runs per operation")
	cmd.Flags().StringVar(&write, "write", "", "also write the results into this markdown file (e.g. docs/benchmarks.md)")
	return cmd
}

func report(cmd *cobra.Command, rep *bench.Report, key, write string) error {
	rep.Print(cmd.OutOrStdout())
	if write == "" {
		return nil
	}
	if err := bench.WriteSection(write, key, rep.Markdown()); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", write)
	return nil
}

// runQEMUBench runs bench qemu; tests replace it to check what the flags
// ask for without the minutes a run takes.
var runQEMUBench = bench.QEMU

func newBenchQEMUCmd() *cobra.Command {
	var runs, coldBoots, batches int
	var clonesOnly, compareLoadvm bool
	var imageDir, image, write string
	cmd := &cobra.Command{
		Use:   "qemu",
		Short: "Desktops: cold boot, clone, resume, restore, memory, 10-clone fill, screenshot and input via the API",
		Long: `Measure the QEMU fast path on the image built by make image: cold boots,
clones from the template snapshot, resume, save/restore, reset, the private
memory of paused clones, 10 clones at once, and screenshots and input through
a real server's API. Under TCG this takes several minutes. Clone, resume and
reset are followed by one row per step the backend took (↳), so that each
change shows where it saved.

--image browser-desktop (built by make image-browser) or osworld (make
image-osworld) measures that image; --clones-only stops after the cold
boots, the clones and their memory. An image other than linux-desktop
writes its own section (qemu-IMAGE).

--compare-loadvm also boots the same image in a plain QEMU (the same devices,
no template snapshot), takes an internal snapshot once with savevm, and then
--runs times uses the desktop a little and reverts it in place with loadvm,
as a desktop hypervisor's "revert to snapshot" does. Its revert, and its
revert until the guest agent answers, are printed beside hvkube's reset with
the ratio. It costs one more cold boot and a few seconds per run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs < 1 || coldBoots < 1 || batches < 1 {
				return fmt.Errorf("--runs, --cold-boots and --batches must be at least 1")
			}
			o := bench.QEMUOptions{ImageDir: imageDir, Image: image, Runs: runs, ColdBoots: coldBoots, Batches: batches, ClonesOnly: clonesOnly, CompareLoadvm: compareLoadvm, Log: cmd.ErrOrStderr()}
			rep, err := runQEMUBench(cmd.Context(), o)
			if err != nil {
				return err
			}
			return report(cmd, rep, o.Key(), write)
		},
	}
	cmd.Flags().IntVar(&runs, "runs", 20, "runs per operation (screenshots and input run 5x this)")
	cmd.Flags().IntVar(&coldBoots, "cold-boots", 20, "cold boots to time")
	cmd.Flags().IntVar(&batches, "batches", 20, "times to clone 10 sandboxes at once")
	cmd.Flags().StringVar(&imageDir, "image-dir", qemu.DefaultImageDir(), "where make image left the image")
	cmd.Flags().StringVar(&image, "image", "linux-desktop", "the image to use")
	cmd.Flags().BoolVar(&clonesOnly, "clones-only", false, "measure only cold boots, clones to paused and their memory")
	cmd.Flags().BoolVar(&compareLoadvm, "compare-loadvm", false, "also time QEMU's own revert (savevm once, loadvm in place) of the image in a plain QEMU, beside the reset, with the ratio (one more cold boot)")
	cmd.Flags().StringVar(&write, "write", "", "also write the results into this markdown file")
	return cmd
}

func newBenchMCPCmd() *cobra.Command {
	var runs int
	var imageDir, image, write string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "MCP tool calls (screenshot, mouse_move) through /mcp of a real server, on one QEMU desktop",
		Long: `Measure MCP tool calls with the MCP SDK's client against /mcp of a real server
on loopback, in both protocol revisions (2026-07-28 stateless, 2025-11-25
with a session), on one desktop cloned from the image built by make image.
Building the template takes a cold boot first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs < 1 {
				return fmt.Errorf("--runs must be at least 1")
			}
			rep, err := bench.MCP(cmd.Context(), bench.MCPOptions{ImageDir: imageDir, Image: image, Runs: runs, Log: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			return report(cmd, rep, "mcp", write)
		},
	}
	cmd.Flags().IntVar(&runs, "runs", 100, "runs per operation")
	cmd.Flags().StringVar(&imageDir, "image-dir", qemu.DefaultImageDir(), "where make image left the image")
	cmd.Flags().StringVar(&image, "image", "linux-desktop", "the image to use")
	cmd.Flags().StringVar(&write, "write", "", "also write the results into this markdown file")
	return cmd
}

func newBenchControlCmd() *cobra.Command {
	var sandboxes, agents, clients int
	var write string
	cmd := &cobra.Command{
		Use:   "control",
		Short: "Control plane on the fake backend: agents scheduled and completed per second, double binds, API latency under load",
		Long: `Run the server, store, controllers and node as hvkube serve does, over the
FAKE backend (in-memory sandboxes that run nothing): fill a pool of
--sandboxes sandboxes, submit --agents one-step workflow agents through the
HTTP API from --clients clients at once, and measure how fast they are
scheduled and completed, check that no sandbox is bound to two agents and no
agent completes twice, and time GET and LIST requests made meanwhile.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if sandboxes < 1 || agents < 1 || clients < 1 {
				return fmt.Errorf("--sandboxes, --agents and --clients must be at least 1")
			}
			rep, err := bench.Control(cmd.Context(), bench.ControlOptions{Sandboxes: sandboxes, Agents: agents, Clients: clients, Log: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			return report(cmd, rep, "control", write)
		},
	}
	cmd.Flags().IntVar(&sandboxes, "sandboxes", 1000, "sandboxes in the pool")
	cmd.Flags().IntVar(&agents, "agents", 10000, "agents to submit")
	cmd.Flags().IntVar(&clients, "clients", 4, "clients submitting agents at once")
	cmd.Flags().StringVar(&write, "write", "", "also write the results into this markdown file")
	return cmd
}

// runClaimsBench runs bench claims; tests replace it to check what the
// flags ask for.
var runClaimsBench = bench.Claims

func newBenchClaimsCmd() *cobra.Command {
	var o bench.ClaimsOptions
	var write, kubeAssets, profile string
	var sc storeConfig
	cmd := &cobra.Command{
		Use:   "claims",
		Short: "Claims per second on a simulated cluster: many nodes over the FAKE backend, each holding warm sandboxes, on one store",
		Long: `Measure how many agents per second the cluster binds to warm sandboxes and
starts. The store (a Kubernetes API server by default), the cluster's
controllers once, and --nodes nodes run here, each node over a FAKE backend
(in-memory sandboxes that run nothing) with --per-node warm sandboxes of one
pool (maxPerHost --per-node). The nodes share one watch per kind, each seeing
only its own sandboxes and agents (as a field selector on status.node
would); reads of one object and all writes go to the store. Once the pool is
warm, --claims one-step workflow agents are created in the store by
--parallel submitters, each waiting for its agent to run before the next.
Prints claims per second, agent created → Running p50/p95/p99, how long the
fill took, whether any sandbox was bound to two agents at once, what each
claim cost the store (reads, object writes by kind, events) and the API
server (requests; with one started here, its CPU time and etcd's).

With --store kubernetes (the default) the store is the API server
--kubeconfig reaches (the objects are deleted at the end), or one started
here on loopback from --kube-assets (env HVKUBE_KUBE_ASSETS), sharing this
machine's cores. The benchmark's client is not rate limited.
--apiserver-profile FILE profiles that API server's CPU while the claims
run, in slices of 5 s written to FILE.1, FILE.2, …: read them together with
go tool pprof -top FILE.*`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Nodes < 1 || o.PerNode < 1 || o.Claims < 1 || o.Parallel < 1 {
				return fmt.Errorf("--nodes, --per-node, --claims and --parallel must be at least 1")
			}
			o.Log = cmd.ErrOrStderr()
			section := "claims"
			switch sc.kind {
			case storeKubernetes:
				counter := &requestCounter{}
				var cpu func() (time.Duration, error)
				var prof func(context.Context, string) error
				o.Store, o.StoreName = benchUnlimitedKubeStore(sc, kubeAssets, counter, &cpu, &prof), storeKubernetes
				o.Requests = counter.counts
				o.ServerCPU = func() (time.Duration, error) {
					if cpu == nil {
						return 0, errors.New("the API server is not this benchmark's own (--kubeconfig)")
					}
					return cpu()
				}
				o.Cleanup = sc.kubeconfig != ""
				section = "claims-kubernetes"
				if profile != "" {
					o.ServerProfile = func(ctx context.Context) error {
						if prof == nil {
							return errors.New("the API server is not this benchmark's own (--kubeconfig)")
						}
						return prof(ctx, profile)
					}
				}
			case storeSQLite:
				if profile != "" {
					return fmt.Errorf("--apiserver-profile: only with --store %s", storeKubernetes)
				}
				o.StoreName = storeSQLite
			default:
				return fmt.Errorf("--store %q: want %s or %s", sc.kind, storeSQLite, storeKubernetes)
			}
			o.Command = fmt.Sprintf("hvkube bench claims --store %s --nodes %d --per-node %d --claims %d --parallel %d", sc.kind, o.Nodes, o.PerNode, o.Claims, o.Parallel)
			if o.HealthInterval != time.Hour {
				o.Command += fmt.Sprintf(" --health-interval %s", o.HealthInterval)
			}
			if o.NodeResync != 10*time.Minute {
				o.Command += fmt.Sprintf(" --node-resync %s", o.NodeResync)
			}
			rep, err := runClaimsBench(cmd.Context(), o)
			if err != nil {
				return err
			}
			return report(cmd, rep, section, write)
		},
	}
	cmd.Flags().IntVar(&o.Nodes, "nodes", 100, "simulated nodes, each with a fake backend")
	cmd.Flags().IntVar(&o.PerNode, "per-node", 100, "warm sandboxes per node")
	cmd.Flags().IntVar(&o.Claims, "claims", 1000, "agents to submit")
	cmd.Flags().IntVar(&o.Parallel, "parallel", 50, "claims in flight at once")
	cmd.Flags().DurationVar(&o.HealthInterval, "health-interval", time.Hour, "the sandboxes' health check interval (a check reads the sandbox from its node's watch and writes only what changed; the API's default is 10s)")
	cmd.Flags().DurationVar(&o.NodeResync, "node-resync", 10*time.Minute, "how often each node reconciles all its objects again (hvkube's default is 1m)")
	cmd.Flags().StringVar(&write, "write", "", "also write the results into this markdown file")
	cmd.Flags().StringVar(&sc.kind, "store", storeKubernetes, "the store: kubernetes or sqlite")
	cmd.Flags().StringVar(&sc.kubeconfig, "kubeconfig", "", "with --store kubernetes: an API server to use (default: start one here)")
	cmd.Flags().StringVar(&sc.namespace, "namespace", "", "with --store kubernetes: the namespace (default: a new one)")
	cmd.Flags().StringVar(&kubeAssets, "kube-assets", os.Getenv("HVKUBE_KUBE_ASSETS"), "with --store kubernetes and no --kubeconfig: the directory of kube-apiserver and etcd (hack/kube/build.sh prints it)")
	cmd.Flags().StringVar(&profile, "apiserver-profile", "", "with the API server started here: profile its CPU while the claims run, into FILE.1, FILE.2, … (5 s each)")
	return cmd
}

// profileSlice is how long each CPU profile of the API server runs: a
// profile is written only when it ends, so the claims' end loses at most
// this much of the last.
const profileSlice = 5 * time.Second

// profileAPIServer writes CPU profiles of the API server cfg reaches as
// an administrator, one per profileSlice, to path.1, path.2, … until ctx
// ends.
func profileAPIServer(ctx context.Context, cfg *rest.Config, path string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for i := 1; ; i++ {
		b, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", fmt.Sprint(int(profileSlice/time.Second))).DoRaw(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("profile the API server: %w", err)
		}
		if err := os.WriteFile(fmt.Sprintf("%s.%d", path, i), b, 0o644); err != nil {
			return err
		}
	}
}

// benchUnlimitedKubeStore is benchKubeStore with no client-side rate
// limit: one client stands in for the controllers and every node, which
// would each have a limit of their own. counter, if not nil, counts its
// requests; cpu, if not nil, is set to the CPU time of the API server it
// starts (none with --kubeconfig), and prof, if not nil, to a function that
// profiles it (profileAPIServer).
func benchUnlimitedKubeStore(sc storeConfig, assets string, counter *requestCounter, cpu *func() (time.Duration, error), prof *func(context.Context, string) error) bench.StoreFunc {
	return func(ctx context.Context, dataDir string, log *slog.Logger) (store.API, func() error, error) {
		ns := sc.namespace
		if ns == "" {
			ns = fmt.Sprintf("hvkube-bench-%d", time.Now().Unix())
		}
		var cfg *rest.Config
		stop := func() {}
		if sc.kubeconfig != "" {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = sc.kubeconfig
			c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
			if err != nil {
				return nil, nil, fmt.Errorf("--kubeconfig: %w", err)
			}
			cfg = c
		} else {
			if assets == "" {
				return nil, nil, fmt.Errorf("--store kubernetes: give --kubeconfig, or --kube-assets (the directory hack/kube/build.sh prints) to start an API server here")
			}
			srv, err := local.Launch(assets)
			if err != nil {
				return nil, nil, err
			}
			log.Warn("started a kube-apiserver for the benchmark", "server", srv.Config.Host, "namespace", ns)
			cfg, stop = srv.Config, srv.Stop
			if cpu != nil {
				*cpu = srv.CPUTime
			}
			if prof != nil {
				admin := srv.Config
				*prof = func(ctx context.Context, path string) error { return profileAPIServer(ctx, admin, path) }
			}
		}
		if sc.namespace == "" {
			cs, err := kubernetes.NewForConfig(cfg)
			if err == nil {
				_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			}
			if err != nil {
				stop()
				return nil, nil, fmt.Errorf("create namespace %s: %w", ns, err)
			}
		}
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = -1, 0 // client-go: no rate limiter
		if counter != nil {
			cfg.WrapTransport = counter.wrap
		}
		st, err := kube.Open(ctx, kube.Options{Config: cfg, Namespace: ns, Component: "hvkube-bench", Logger: log})
		if err != nil {
			stop()
			return nil, nil, err
		}
		return st, func() error { st.Close(); stop(); return nil }, nil
	}
}

func newBenchAgentsCmd() *cobra.Command {
	var runs, parallel int
	var imageDir, image, write, kubeAssets string
	var sc storeConfig
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "Agents on QEMU desktops: submitted to running on a warm sandbox, one and ten at a time; to completed; a 10-sandbox pool filled",
		Long: `Measure agents end to end on the QEMU backend, through a real server's API,
on the image built by make image: an agent submitted until it runs on a
warm (paused) sandbox of a pool, one at a time and --parallel at once; a
one-step workflow agent submitted until it completed; and a pool of
--parallel filled from zero. Everything it creates is deleted on the way out.

With --store kubernetes the server keeps its objects in a Kubernetes API
server: the one --kubeconfig reaches, or without it one started here on
loopback from the kube-apiserver and etcd that hack/kube/build.sh builds
(--kube-assets, env HVKUBE_KUBE_ASSETS).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs < 1 {
				return fmt.Errorf("--runs must be at least 1")
			}
			if parallel < 1 {
				return fmt.Errorf("--parallel must be at least 1")
			}
			o := bench.AgentsOptions{ImageDir: imageDir, Image: image, Runs: runs, Parallel: parallel, Log: cmd.ErrOrStderr()}
			if sc.kind == storeKubernetes {
				o.Store, o.StoreName = benchKubeStore(sc, kubeAssets), storeKubernetes
			} else if sc.kind != storeSQLite {
				return fmt.Errorf("--store %q: want %s or %s", sc.kind, storeSQLite, storeKubernetes)
			}
			rep, err := bench.Agents(cmd.Context(), o)
			if err != nil {
				return err
			}
			section := "agents"
			if sc.kind == storeKubernetes {
				section = "agents-kubernetes"
			}
			return report(cmd, rep, section, write)
		},
	}
	cmd.Flags().IntVar(&runs, "runs", 20, "runs per measurement (bursts and pool fills included)")
	cmd.Flags().IntVar(&parallel, "parallel", 10, "agents at once in a burst, on a pool of as many")
	cmd.Flags().StringVar(&imageDir, "image-dir", qemu.DefaultImageDir(), "where make image left the image")
	cmd.Flags().StringVar(&image, "image", "linux-desktop", "the image to use")
	cmd.Flags().StringVar(&write, "write", "", "also write the results into this markdown file")
	cmd.Flags().StringVar(&sc.kind, "store", storeSQLite, "the server's store: sqlite or kubernetes")
	cmd.Flags().StringVar(&sc.kubeconfig, "kubeconfig", "", "with --store kubernetes: an API server to use (default: start one here)")
	cmd.Flags().StringVar(&sc.namespace, "namespace", "", "with --store kubernetes: the namespace (default: a new one)")
	cmd.Flags().StringVar(&kubeAssets, "kube-assets", os.Getenv("HVKUBE_KUBE_ASSETS"), "with --store kubernetes and no --kubeconfig: the directory of kube-apiserver and etcd (hack/kube/build.sh prints it)")
	return cmd
}

func newBenchDisplayCmd() *cobra.Command {
	var updates int
	var imageDir, image, write string
	cmd := &cobra.Command{
		Use:   "display",
		Short: "Live display: full VNC framebuffer updates through the WebSocket gateway against a direct VNC connection",
		Long: `Start a sandbox from the image built by make image and time full,
non-incremental framebuffer updates (raw encoding, 32 bits per pixel) read
straight from its VNC socket and through the gateway (a WebSocket to a real
server's display endpoint), the same number each, taking turns;
print p50/p95 per update and the throughput of both.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := bench.Display(cmd.Context(), bench.DisplayOptions{ImageDir: imageDir, Image: image, Updates: updates, Log: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			return report(cmd, rep, "display", write)
		},
	}
	cmd.Flags().IntVar(&updates, "updates", 200, "full updates to time on each path")
	cmd.Flags().StringVar(&imageDir, "image-dir", qemu.DefaultImageDir(), "where make image left the image")
	cmd.Flags().StringVar(&image, "image", "linux-desktop", "the image to use")
	cmd.Flags().StringVar(&write, "write", "", "also write the results into this markdown file")
	return cmd
}

// runBrowserBench runs bench browser; tests replace it to check what the
// flags ask for.
var runBrowserBench = bench.Browser

func newBenchBrowserCmd() *cobra.Command {
	var clones, calls int
	var imageDir, image, nodeModules, write string
	cmd := &cobra.Command{
		Use:   "browser",
		Short: "Browser desktop: CDP and Playwright through the port forward of a real server, on fresh clones",
		Long: `Measure automation clients on the browser-desktop image (built by make
image-browser) through a real server and node that require a token, as a
client outside the host reaches them. Building the template takes a cold
boot first (minutes under TCG). Then each of --clones fresh clones is
created through the API until Running; DevTools' /json/list is read
through the port forward (/api/v1/sandboxes/NAME/ports/9222); Playwright
(playwright-core from --node-modules, run by node) connects over CDP with
the token and opens a page served on the host, which the clone's egress
rules allow and the guest reaches through its NAT at the gateway; and
--calls CDP Runtime.evaluate("1+1") calls are timed over the forwarded
WebSocket. Without node or playwright-core the Playwright rows are left
out and the output says why. Writes the section "browser".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if clones < 1 || calls < 1 {
				return fmt.Errorf("--clones and --calls must be at least 1")
			}
			rep, err := runBrowserBench(cmd.Context(), bench.BrowserOptions{ImageDir: imageDir, Image: image, Clones: clones, Calls: calls, NodeModules: nodeModules, Log: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			return report(cmd, rep, "browser", write)
		},
	}
	cmd.Flags().IntVar(&clones, "clones", 10, "fresh clones to measure (each once: Running, first DevTools answer, Playwright)")
	cmd.Flags().IntVar(&calls, "calls", 50, "CDP Runtime.evaluate calls per clone")
	cmd.Flags().StringVar(&imageDir, "image-dir", qemu.DefaultImageDir(), "where make image-browser left the image")
	cmd.Flags().StringVar(&image, "image", "browser-desktop", "the image to use (it must declare a network and a CDP port)")
	cmd.Flags().StringVar(&nodeModules, "node-modules", "examples/playwright/node_modules", "node_modules directory with playwright-core; the Playwright rows need it and node")
	cmd.Flags().StringVar(&write, "write", "", "also write the results into this markdown file")
	return cmd
}

// runDensityBench runs bench density; tests replace it to check what the
// flags ask for.
var runDensityBench = bench.Density

func newBenchDensityCmd() *cobra.Command {
	var o bench.DensityOptions
	var write string
	cmd := &cobra.Command{
		Use:   "density",
		Short: "Density: how many warm (paused) desktops one host holds, and how they behave when it is full",
		Long: `Measure how many warm desktops one host holds, through a real server's API
on the QEMU backend. After building the template from --image (a cold boot),
one pool of --max desktops (warm tier paused) is filled until all are paused
or the node refuses more (none paused for a minute while one waits for
memory, InsufficientMemory). It prints the desktops held, the fill's time and
rate (overall and over the middle 80 %), CPU seconds per desktop, host memory
before and after, and each desktop's footprint (Pss of its QEMU) p50/p95.
Then, on the full host: --resumes held desktops are resumed one at a time;
--burst agents are submitted at once; with --pressure N a second pool of N
desktops is created and the desktops the node moves to disk for it are
counted, along with anything lost, and agents claim moved desktops; with
--ksm-running N, N desktops run and their memory is measured with KSM off and
then on (this needs a writable /sys/kernel/mm/ksm/run; the settings are
restored). Everything it creates is deleted on the way out. An image other
than linux-desktop writes its own section (density-IMAGE), and a run with
--pressure its own (density-pressure[-IMAGE]).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case o.Max < 1:
				return fmt.Errorf("--max must be at least 1")
			case o.Resumes < 0 || o.Burst < 0 || o.Pressure < 0 || o.KSMRunning < 0:
				return fmt.Errorf("--resumes, --burst, --pressure and --ksm-running cannot be negative")
			case o.MemoryLimitPercent < 1 || o.MemoryLimitPercent > 100:
				return fmt.Errorf("--memory-limit-percent must be between 1 and 100")
			case o.ReadyAhead < -1:
				return fmt.Errorf("--ready-ahead must be 0 or more, or -1 (every clone)")
			}
			o.Log = cmd.ErrOrStderr()
			rep, err := runDensityBench(cmd.Context(), o)
			if err != nil {
				if rep != nil {
					rep.Print(cmd.OutOrStdout()) // what was measured before the failure
				}
				return err
			}
			return report(cmd, rep, o.Key(), write)
		},
	}
	cmd.Flags().StringVar(&o.Image, "image", "linux-desktop", "the image to use (linux-desktop, browser-desktop or osworld)")
	cmd.Flags().StringVar(&o.ImageDir, "image-dir", qemu.DefaultImageDir(), "where make image left the image")
	cmd.Flags().IntVar(&o.Max, "max", 400, "most desktops to try")
	cmd.Flags().IntVar(&o.Resumes, "resumes", 20, "held desktops to resume one at a time")
	cmd.Flags().IntVar(&o.Burst, "burst", 10, "agents to submit at once on the full host")
	cmd.Flags().IntVar(&o.Pressure, "pressure", 0, "desktops of a second pool for the pressure step (0 skips it)")
	cmd.Flags().IntVar(&o.KSMRunning, "ksm-running", 0, "running desktops for the KSM off/on step (0 skips it)")
	cmd.Flags().IntVar(&o.MemoryLimitPercent, "memory-limit-percent", capacity.DefaultLimitPercent, "the most of host memory the VMs may use, in percent")
	cmd.Flags().IntVar(&o.ReadyAhead, "ready-ahead", node.DefaultReadyAhead, "as hvkube serve's: the fewest idle desktops of the pool readied ahead of a claim (the others stay as cloned); 0 readies none, -1 every clone")
	cmd.Flags().StringVar(&write, "write", "", "also write the results into this markdown file")
	return cmd
}

// requestCounter counts the requests of a Kubernetes client by kind:
// GET, LIST and WATCH (reads of one object, of many, and watches), PUT,
// POST, PATCH and DELETE.
type requestCounter struct {
	mu sync.Mutex
	n  bench.RequestCounts
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		kind := r.Method
		if kind == http.MethodGet {
			switch q := r.URL.Query(); {
			case q.Get("watch") == "true" || q.Get("watch") == "1":
				kind = "WATCH"
			case isCollection(r.URL.Path):
				kind = "LIST"
			}
		}
		if isEvents(r.URL.Path) {
			kind = "event " + kind
		}
		c.mu.Lock()
		if c.n == nil {
			c.n = bench.RequestCounts{}
		}
		c.n[kind]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// isEvents reports whether an API path is of core/v1 Events.
func isEvents(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			return parts[i+2] == "events"
		}
	}
	return false
}

// isCollection reports whether an API path names a collection (…/sandboxes)
// rather than one object (…/sandboxes/name, …/name/status).
func isCollection(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			return len(parts) == i+3
		}
	}
	return false
}

func (c *requestCounter) counts() bench.RequestCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := bench.RequestCounts{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
