package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/hvkube/hvkube/internal/api"
)

// table is a set of columns for one kind.
type table struct {
	headers []string
	wide    []string
	row     func(o api.Object, now time.Time) (cols, wide []string)
}

func tableFor(kind string) table {
	switch kind {
	case api.KindTemplate:
		return table{
			headers: []string{"NAME", "PHASE", "RESOLUTION", "CPU", "MEMORY", "AGE"},
			wide:    []string{"OS", "IMAGE", "SHAPES"},
			row: func(o api.Object, now time.Time) ([]string, []string) {
				t := o.(*api.Template)
				img := "-"
				switch {
				case t.Spec.QEMU != nil && t.Spec.QEMU.Image != "":
					img = t.Spec.QEMU.Image
				case t.Spec.QEMU != nil:
					img = t.Spec.QEMU.Disk
				case t.Spec.HyperV != nil:
					img = t.Spec.HyperV.VHDXPath
				case t.Spec.VHDXPath != "":
					img = t.Spec.VHDXPath
				}
				return []string{t.Metadata.Name, orDefault(phaseOf(o, t.Status.Phase), api.TemplatePending), t.Spec.Display.Resolution,
						strconv.Itoa(t.Spec.Resources.CPU), fmt.Sprintf("%dMi", t.Spec.Resources.MemoryMB), age(t.Metadata.CreationTimestamp, now)},
					[]string{t.Spec.Guest.OS, img, shapesOf(t)}
			},
		}
	case api.KindSandbox:
		return table{
			headers: []string{"NAME", "STATUS", "POOL", "AGENT", "AGE"},
			wide:    []string{"TEMPLATE", "RESOLUTION", "DISPLAY", "PID"},
			row: func(o api.Object, now time.Time) ([]string, []string) {
				s := o.(*api.Sandbox)
				pid := "-"
				if s.Status.PID > 0 {
					pid = strconv.Itoa(s.Status.PID)
				}
				res := orDefault(s.Status.Resolution, s.Spec.Display.Resolution)
				return []string{s.Metadata.Name, sandboxStatus(s), orDash(api.OwnerOf(o, api.KindSandboxPool)),
						orDash(s.Status.CurrentAgent), age(s.Metadata.CreationTimestamp, now)},
					[]string{orDash(orDefault(s.Status.Template, s.Spec.TemplateRef)), orDash(res), orDash(s.Status.Display), pid}
			},
		}
	case api.KindSandboxPool:
		return table{
			headers: []string{"NAME", "READY", "DESIRED", "WARM", "BUSY", "AGE"},
			wide:    []string{"TIER", "TEMPLATE", "CONDITION"},
			row: func(o api.Object, now time.Time) ([]string, []string) {
				p := o.(*api.SandboxPool)
				desired := p.Status.Desired
				if desired == 0 && p.Status.ObservedGeneration == 0 {
					desired = p.Spec.Replicas // not reconciled yet
				}
				return []string{p.Metadata.Name, fmt.Sprintf("%d/%d", p.Status.Ready, desired), strconv.Itoa(desired),
						strconv.Itoa(p.Status.Warm), strconv.Itoa(p.Status.Busy), age(p.Metadata.CreationTimestamp, now)},
					[]string{p.Spec.WarmTier, orDash(p.Spec.Template.Spec.TemplateRef), conditionSummary(p.Status.Conditions)}
			},
		}
	case api.KindAgent:
		return table{
			headers: []string{"NAME", "STATUS", "SANDBOX", "AGE"},
			wide:    []string{"TYPE", "ATTEMPTS", "NODE", "REASON", "SELECTOR"},
			row: func(o api.Object, now time.Time) ([]string, []string) {
				a := o.(*api.Agent)
				sel := a.Spec.SandboxName
				if a.Spec.SandboxSelector != nil {
					sel = api.SelectorFromMap(a.Spec.SandboxSelector.MatchLabels).String()
				}
				return []string{a.Metadata.Name, orDefault(phaseOf(o, a.Status.Phase), api.AgentPending), orDash(a.Status.Sandbox), age(a.Metadata.CreationTimestamp, now)},
					[]string{a.Spec.Type, strconv.Itoa(a.Status.Attempts), orDash(a.Status.Node), orDash(a.Status.Reason), orDash(sel)}
			},
		}
	case api.KindDisplayService:
		return table{
			headers: []string{"NAME", "TYPE", "SELECTOR", "PORTS", "AGE"},
			wide:    []string{"GATEWAY", "ENDPOINTS"},
			row: func(o api.Object, now time.Time) ([]string, []string) {
				d := o.(*api.DisplayService)
				var ports []string
				for _, p := range d.Spec.Ports {
					ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
				}
				gw := "-"
				if d.Spec.Gateway.Enabled {
					gw = d.Spec.Gateway.Path
				}
				return []string{d.Metadata.Name, d.Spec.Type, orDash(api.SelectorFromMap(d.Spec.Selector).String()), orDash(strings.Join(ports, ",")), age(d.Metadata.CreationTimestamp, now)},
					[]string{gw, strconv.Itoa(len(d.Status.Endpoints))}
			},
		}
	case api.KindSecret:
		return table{
			headers: []string{"NAME", "KEYS", "AGE"},
			row: func(o api.Object, now time.Time) ([]string, []string) {
				s := o.(*api.Secret)
				return []string{s.Metadata.Name, orDash(strings.Join(s.Spec.Keys, ",")), age(s.Metadata.CreationTimestamp, now)}, nil
			},
		}
	case api.KindNode:
		return table{
			headers: []string{"NAME", "STATUS", "MEMORY USED", "RESERVED", "FREE", "RUNNING", "PAUSED", "SAVED", "FITS", "HEARTBEAT"},
			wide:    []string{"BACKEND", "TOTAL", "AVAILABLE", "LIMIT", "MOVED TO DISK", "PENDING", "ADDRESS"},
			row: func(o api.Object, now time.Time) ([]string, []string) {
				n := o.(*api.Node)
				m, sb := n.Status.Memory, n.Status.Sandboxes
				status := "Ready"
				if c := api.FindCondition(n.Status.Conditions, "Ready"); c != nil && c.Status == api.ConditionFalse {
					status = orDash(c.Reason) // NodeLost
				} else if c := api.FindCondition(n.Status.Conditions, "MemoryPressure"); c != nil && c.Status == api.ConditionTrue {
					status = "MemoryPressure"
				}
				var fits []string
				for _, t := range n.Status.Templates {
					fits = append(fits, fmt.Sprintf("%s=%d", t.Name, t.Fit))
				}
				beat := "-"
				if n.Status.LastHeartbeat != nil {
					beat = age(*n.Status.LastHeartbeat, now)
				}
				return []string{n.Metadata.Name, status, mib(m.UsedMB), mib(m.ReservedMB), mib(m.FreeMB),
						strconv.Itoa(sb[api.SandboxRunning]), strconv.Itoa(sb[api.SandboxPaused]), strconv.Itoa(sb[api.SandboxSaved]),
						orDash(strings.Join(fits, ",")), beat},
					[]string{orDash(n.Status.Backend), mib(m.TotalMB), mib(m.AvailableMB), mib(m.LimitMB),
						strconv.Itoa(n.Status.Pressure.Moved), strconv.Itoa(sb[api.SandboxPending] + sb[api.SandboxCreating]), orDash(n.Status.Address)}
			},
		}
	case api.KindEvent:
		return table{
			headers: []string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"},
			row: func(o api.Object, now time.Time) ([]string, []string) {
				e := o.(*api.Event)
				obj := strings.ToLower(e.InvolvedObject.Kind) + "/" + e.InvolvedObject.Name
				return []string{age(e.Timestamp, now), e.Type, e.Reason, obj, e.Message}, nil
			},
		}
	}
	return table{headers: []string{"NAME"}, row: func(o api.Object, _ time.Time) ([]string, []string) { return []string{o.GetMeta().Name}, nil }}
}

// mib writes a memory size as kubectl top does: 1234Mi.
func mib(mb int) string { return strconv.Itoa(mb) + "Mi" }

// sandboxStatus is a sandbox's STATUS: its phase, or IOError while its
// guest, meant to run, is stopped on a failed disk write (kubectl shows a
// pod's reason in its place in the same way).
func sandboxStatus(s *api.Sandbox) string {
	phase := orDefault(phaseOf(s, s.Status.Phase), api.SandboxPending)
	if phase == api.SandboxRunning && s.Status.Reason == "IOError" {
		return "IOError"
	}
	return phase
}

func phaseOf(o api.Object, phase string) string {
	if o.GetMeta().DeletionTimestamp != nil {
		return "Terminating"
	}
	return phase
}

func orDash(s string) string { return orDefault(s, "-") }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// tablePrinter writes aligned rows; header once.
type tablePrinter struct {
	tw       *tabwriter.Writer
	t        table
	wide     bool
	noHeader bool
	printed  bool
	now      func() time.Time
}

func newTablePrinter(w io.Writer, kind string, wide, noHeader bool, now func() time.Time) *tablePrinter {
	return &tablePrinter{tw: tabwriter.NewWriter(w, 0, 8, 3, ' ', 0), t: tableFor(kind), wide: wide, noHeader: noHeader, now: now}
}

func (p *tablePrinter) print(objs ...api.Object) {
	if !p.printed && !p.noHeader {
		h := p.t.headers
		if p.wide {
			h = append(h[:len(h):len(h)], p.t.wide...)
		}
		fmt.Fprintln(p.tw, strings.Join(h, "\t"))
	}
	p.printed = true
	now := p.now()
	for _, o := range objs {
		cols, wide := p.t.row(o, now)
		if p.wide {
			cols = append(cols, wide...)
		}
		fmt.Fprintln(p.tw, strings.Join(cols, "\t"))
	}
	p.tw.Flush()
}

// age formats a duration the way kubectl's AGE column does.
func age(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return humanDuration(now.Sub(t))
}

func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 120:
		return fmt.Sprintf("%ds", s)
	case s < 10*60:
		if s%60 == 0 {
			return fmt.Sprintf("%dm", s/60)
		}
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 3*3600:
		return fmt.Sprintf("%dm", s/60)
	case s < 8*3600:
		if m := (s / 60) % 60; m != 0 {
			return fmt.Sprintf("%dh%dm", s/3600, m)
		}
		return fmt.Sprintf("%dh", s/3600)
	case s < 48*3600:
		return fmt.Sprintf("%dh", s/3600)
	case s < 8*86400:
		if h := (s / 3600) % 24; h != 0 {
			return fmt.Sprintf("%dd%dh", s/86400, h)
		}
		return fmt.Sprintf("%dd", s/86400)
	case s < 2*365*86400:
		return fmt.Sprintf("%dd", s/86400)
	default:
		return fmt.Sprintf("%dy", s/(365*86400))
	}
}

// listOf wraps objects in a Kubernetes-shaped list.
func listOf(kind string, objs []api.Object) map[string]any {
	if objs == nil {
		objs = []api.Object{}
	}
	return map[string]any{"apiVersion": api.Version, "kind": kind + "List", "items": objs}
}

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func printYAML(w io.Writer, v any) error {
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		return err
	}
	_, err = w.Write(y)
	return err
}

// kindRef is "sandboxpool/browser-workers".
func kindRef(o api.Object) string {
	return strings.ToLower(o.GetTypeMeta().Kind) + "/" + o.GetMeta().Name
}

func sortedLabels(m map[string]string) string {
	if len(m) == 0 {
		return "<none>"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// conditionSummary names the conditions that are not True (with their
// reasons), or "-" when all are.
func conditionSummary(conds []api.Condition) string {
	var bad []string
	for _, c := range conds {
		if c.Status != api.ConditionTrue {
			bad = append(bad, c.Type+"="+c.Status+"("+c.Reason+")")
		}
	}
	if len(bad) == 0 {
		return "-"
	}
	return strings.Join(bad, ",")
}

// shapesOf lists a template's snapshots of other shapes: node,
// memory/resolution and phase.
func shapesOf(t *api.Template) string {
	var out []string
	for _, sh := range t.Status.Shapes {
		out = append(out, fmt.Sprintf("%s:%dMi/%s(%s)", sh.Node, sh.MemoryMB, sh.Resolution, sh.Phase))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}
