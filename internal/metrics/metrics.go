// Package metrics is hvkube's Prometheus instrumentation: counts of
// objects by phase read from the store at scrape time, latency histograms
// of acquires, screenshots and input, and reconcile outcomes per
// controller. It keeps its own registry (never the global one), so that
// two servers in one process (tests) do not share counters.
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hvkube/hvkube/internal/api"
)

// Lister is what the collector reads objects from (store.Interface has it).
type Lister interface {
	List(ctx context.Context, kind string, sel api.Selector) ([]api.Object, string, error)
}

// ScrapeTimeout bounds how long one scrape reads the store.
const ScrapeTimeout = 5 * time.Second

// Metrics holds hvkube's collectors. A nil *Metrics records nothing, so
// callers need not check.
type Metrics struct {
	reg        *prometheus.Registry
	acquire    *prometheus.HistogramVec
	screenshot *prometheus.HistogramVec
	input      prometheus.Histogram
	reconciles *prometheus.CounterVec
	errors     *prometheus.CounterVec
}

// New returns Metrics whose object gauges are read from st at each scrape.
func New(st Lister) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hvkube_acquire_duration_seconds",
			Help:    "Time to make a sandbox bound to an agent run, by how: resumed, restored (the clean snapshot) or cloned (a new VM).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"how"}),
		screenshot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hvkube_screenshot_duration_seconds",
			Help:    "Time to answer GET /api/v1/sandboxes/NAME/screen, by image format.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"format"}),
		input: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hvkube_input_duration_seconds",
			Help:    "Time to answer POST /api/v1/sandboxes/NAME/input.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hvkube_reconcile_total",
			Help: "Reconciles run, by controller.",
		}, []string{"controller"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hvkube_reconcile_errors_total",
			Help: "Reconciles that returned an error (and were retried with backoff), by controller.",
		}, []string{"controller"}),
	}
	m.reg.MustRegister(m.acquire, m.screenshot, m.input, m.reconciles, m.errors,
		&objects{st: st},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Gatherer is the registry, for tests and for serving.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Handler serves the metrics in the Prometheus text (or OpenMetrics)
// format. A collector that fails is reported in the answer, and the rest
// are still served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: 2 * ScrapeTimeout})
}

// ObserveAcquire records one acquire.
func (m *Metrics) ObserveAcquire(how string, d time.Duration) {
	if m != nil {
		m.acquire.WithLabelValues(how).Observe(d.Seconds())
	}
}

// ObserveScreenshot records one screenshot served.
func (m *Metrics) ObserveScreenshot(format string, d time.Duration) {
	if m != nil {
		if format == "" {
			format = "png"
		}
		m.screenshot.WithLabelValues(format).Observe(d.Seconds())
	}
}

// ObserveInput records one input action served.
func (m *Metrics) ObserveInput(d time.Duration) {
	if m != nil {
		m.input.Observe(d.Seconds())
	}
}

// ObserveReconcile records one reconcile of controller and its outcome;
// it fits reconcile.Manager's Observe.
func (m *Metrics) ObserveReconcile(controller string, err error) {
	if m == nil {
		return
	}
	m.reconciles.WithLabelValues(controller).Inc()
	if err != nil {
		m.errors.WithLabelValues(controller).Inc()
	}
}

// CountEventDrops exports drops (how many events the store did not
// write, by why) as hvkube_events_dropped_total at each scrape.
func (m *Metrics) CountEventDrops(drops func() map[string]uint64) {
	if m != nil {
		m.reg.MustRegister(eventDrops(drops))
	}
}

var eventsDroppedDesc = prometheus.NewDesc("hvkube_events_dropped_total",
	"Events not written to the store, by why: queue-full, rate-limit (too many about one object), write-failed, store-closed.", []string{"why"}, nil)

type eventDrops func() map[string]uint64

func (d eventDrops) Describe(ch chan<- *prometheus.Desc) { ch <- eventsDroppedDesc }

func (d eventDrops) Collect(ch chan<- prometheus.Metric) {
	for why, n := range d() {
		ch <- prometheus.MustNewConstMetric(eventsDroppedDesc, prometheus.CounterValue, float64(n), why)
	}
}

// objects collects the object gauges from the store at scrape time: one
// list per kind, bounded by ScrapeTimeout.
type objects struct {
	st Lister
}

var (
	sandboxesDesc = prometheus.NewDesc("hvkube_sandboxes", "Sandboxes by phase.", []string{"phase"}, nil)
	agentsDesc    = prometheus.NewDesc("hvkube_agents", "Agents by phase.", []string{"phase"}, nil)
	poolReady     = prometheus.NewDesc("hvkube_pool_ready", "Sandboxes of the pool that are ready for an agent.", []string{"pool"}, nil)
	poolDesired   = prometheus.NewDesc("hvkube_pool_desired", "Sandboxes the pool aims for now (replicas raised for minReady and the queue).", []string{"pool"}, nil)
	poolReplicas  = prometheus.NewDesc("hvkube_pool_replicas", "Sandboxes the pool has.", []string{"pool"}, nil)
	humanDesc     = prometheus.NewDesc("hvkube_human_requests_pending", "Agents waiting for a person's answer.", nil, nil)
	controlDesc   = prometheus.NewDesc("hvkube_sandboxes_controlled", "Sandboxes whose input a person holds.", nil, nil)
	nodeMemory    = prometheus.NewDesc("hvkube_node_memory_bytes", "A node's memory as admission counts it: total, available (the kernel's MemAvailable), limit, used (by its desktops, measured), reserved (for desktops being made and running ones to grow), free (what a new desktop may take).", []string{"node", "kind"}, nil)
	nodeDesktops  = prometheus.NewDesc("hvkube_node_sandboxes", "A node's sandboxes by phase.", []string{"node", "phase"}, nil)
	nodeFit       = prometheus.NewDesc("hvkube_node_template_fit", "How many more clones of the template's snapshot fit on the node now.", []string{"node", "template", "snapshot"}, nil)
	nodeClone     = prometheus.NewDesc("hvkube_node_template_clone_bytes", "What a fresh clone of the template's snapshot uses on the node, measured.", []string{"node", "template", "snapshot"}, nil)
	nodeMoved     = prometheus.NewDesc("hvkube_node_moved_to_disk_total", "Idle desktops the node moved from RAM to disk under memory pressure since it started.", []string{"node"}, nil)
	nodePressure  = prometheus.NewDesc("hvkube_node_memory_pressure", "1 while the node is under memory pressure (moving idle desktops to disk), else 0.", []string{"node"}, nil)
)

var (
	sandboxPhases = []string{api.SandboxPending, api.SandboxCreating, api.SandboxRunning, api.SandboxPaused, api.SandboxSaved, api.SandboxTerminating, api.SandboxTerminated, api.SandboxError}
	agentPhases   = []string{api.AgentPending, api.AgentScheduled, api.AgentRunning, api.AgentCompleted, api.AgentFailed, api.AgentCancelled}
)

func (c *objects) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sandboxesDesc, agentsDesc, poolReady, poolDesired, poolReplicas, humanDesc, controlDesc,
		nodeMemory, nodeDesktops, nodeFit, nodeClone, nodeMoved, nodePressure} {
		ch <- d
	}
}

func (c *objects) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	list := func(kind string, desc *prometheus.Desc) ([]api.Object, bool) {
		items, _, err := c.st.List(ctx, kind, api.Selector{})
		if err != nil {
			ch <- prometheus.NewInvalidMetric(desc, err)
			return nil, false
		}
		return items, true
	}
	if items, ok := list(api.KindSandbox, sandboxesDesc); ok {
		counts, controlled := map[string]int{}, 0
		for _, it := range items {
			sb := it.(*api.Sandbox)
			counts[orPending(sb.Status.Phase)]++
			if sb.Status.Control != nil {
				controlled++
			}
		}
		gauges(ch, sandboxesDesc, sandboxPhases, counts)
		ch <- prometheus.MustNewConstMetric(controlDesc, prometheus.GaugeValue, float64(controlled))
	}
	if items, ok := list(api.KindAgent, agentsDesc); ok {
		counts, waiting := map[string]int{}, 0
		for _, it := range items {
			a := it.(*api.Agent)
			counts[orPending(a.Status.Phase)]++
			if a.Status.HumanRequest.Pending() {
				waiting++
			}
		}
		gauges(ch, agentsDesc, agentPhases, counts)
		ch <- prometheus.MustNewConstMetric(humanDesc, prometheus.GaugeValue, float64(waiting))
	}
	pools, _ := list(api.KindSandboxPool, poolReady)
	for _, it := range pools {
		p := it.(*api.SandboxPool)
		ch <- prometheus.MustNewConstMetric(poolReady, prometheus.GaugeValue, float64(p.Status.Ready), p.Metadata.Name)
		ch <- prometheus.MustNewConstMetric(poolDesired, prometheus.GaugeValue, float64(p.Status.Desired), p.Metadata.Name)
		ch <- prometheus.MustNewConstMetric(poolReplicas, prometheus.GaugeValue, float64(p.Status.Replicas), p.Metadata.Name)
	}
	nodes, _ := list(api.KindNode, nodeMemory)
	for _, it := range nodes {
		collectNode(ch, it.(*api.Node))
	}
}

// collectNode sends one node's gauges.
func collectNode(ch chan<- prometheus.Metric, n *api.Node) {
	name, m := n.Metadata.Name, n.Status.Memory
	for _, kv := range []struct {
		kind string
		mb   int
	}{{"total", m.TotalMB}, {"available", m.AvailableMB}, {"limit", m.LimitMB}, {"used", m.UsedMB}, {"reserved", m.ReservedMB}, {"free", m.FreeMB}} {
		ch <- prometheus.MustNewConstMetric(nodeMemory, prometheus.GaugeValue, float64(kv.mb)*(1<<20), name, kv.kind)
	}
	for _, p := range sandboxPhases {
		ch <- prometheus.MustNewConstMetric(nodeDesktops, prometheus.GaugeValue, float64(n.Status.Sandboxes[p]), name, p)
	}
	for _, t := range n.Status.Templates {
		ch <- prometheus.MustNewConstMetric(nodeFit, prometheus.GaugeValue, float64(t.Fit), name, t.Name, t.Snapshot)
		ch <- prometheus.MustNewConstMetric(nodeClone, prometheus.GaugeValue, float64(t.CloneMB)*(1<<20), name, t.Name, t.Snapshot)
	}
	ch <- prometheus.MustNewConstMetric(nodeMoved, prometheus.CounterValue, float64(n.Status.Pressure.Moved), name)
	pressure := 0.0
	if c := api.FindCondition(n.Status.Conditions, "MemoryPressure"); c != nil && c.Status == api.ConditionTrue {
		pressure = 1
	}
	ch <- prometheus.MustNewConstMetric(nodePressure, prometheus.GaugeValue, pressure, name)
}

// gauges sends one gauge per known phase (zero included, so that series
// do not come and go) and one per unknown phase seen.
func gauges(ch chan<- prometheus.Metric, desc *prometheus.Desc, phases []string, counts map[string]int) {
	for _, p := range phases {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(counts[p]), p)
		delete(counts, p)
	}
	for p, n := range counts {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(n), p)
	}
}

func orPending(phase string) string {
	if phase == "" {
		return api.SandboxPending // the same word for agents
	}
	return phase
}
