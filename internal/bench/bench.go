// Package bench measures hvkube end to end and reports percentiles: the
// numbers in docs/benchmarks.md come from here (hvkube bench …).
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/backend"
)

// Result is one measured operation.
type Result struct {
	Name    string
	Samples []time.Duration
	// Target, when set, is the goal as text (e.g. "p50 ≤ 50 ms").
	Target string
}

// Percentile returns the p-th percentile (0..100), nearest-rank.
func (r Result) Percentile(p float64) time.Duration {
	if len(r.Samples) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), r.Samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(p/100*float64(len(s))+0.999999) - 1
	if rank < 0 {
		rank = 0
	}
	if rank >= len(s) {
		rank = len(s) - 1
	}
	return s[rank]
}

// percentile is the nearest-rank p-th percentile of values.
func percentile(values []int64, p float64) int64 {
	r := Result{}
	for _, v := range values {
		r.Samples = append(r.Samples, time.Duration(v))
	}
	return int64(r.Percentile(p))
}

// Report is a set of results from one run.
type Report struct {
	Title   string
	Command string
	Results []Result
	// Extra lines (measured values that are not latencies).
	Facts []string
}

// Add measures fn n times and adds the result.
func (rep *Report) Add(name string, n int, target string, fn func(i int) error) error {
	r := Result{Name: name, Target: target}
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := fn(i); err != nil {
			return fmt.Errorf("%s: run %d: %w", name, i, err)
		}
		r.Samples = append(r.Samples, time.Since(start))
	}
	rep.Results = append(rep.Results, r)
	return nil
}

// Print writes the results as an aligned text table.
func (rep *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "%s\n", rep.Title)
	fmt.Fprintf(w, "%-64s %6s %10s %10s %10s  %s\n", "operation", "runs", "p50", "p95", "max", "target")
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%-64s %6d %10s %10s %10s  %s\n", r.Name, len(r.Samples), fmtDur(r.Percentile(50)), fmtDur(r.Percentile(95)), fmtDur(r.Percentile(100)), r.Target)
	}
	for _, f := range rep.Facts {
		fmt.Fprintf(w, "%s\n", f)
	}
}

// Markdown renders the report as a section of docs/benchmarks.md.
func (rep *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", rep.Title)
	fmt.Fprintf(&b, "Measured %s on %s with `%s`.\n\n", time.Now().UTC().Format("2006-01-02"), Machine(), rep.Command)
	fmt.Fprintf(&b, "| operation | runs | p50 | p95 | max | target |\n|---|---:|---:|---:|---:|---|\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", r.Name, len(r.Samples), fmtDur(r.Percentile(50)), fmtDur(r.Percentile(95)), fmtDur(r.Percentile(100)), r.Target)
	}
	if len(rep.Facts) > 0 {
		b.WriteString("\n")
		for _, f := range rep.Facts {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	return b.String()
}

// WriteSection replaces (or appends) the section named key in the markdown
// file at path, between <!-- bench:KEY --> and <!-- /bench:KEY --> markers.
func WriteSection(path, key, body string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	begin, end := "<!-- bench:"+key+" -->", "<!-- /bench:"+key+" -->"
	section := begin + "\n" + body + end
	text := string(old)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i >= 0 && j > i {
		text = text[:i] + section + text[j+len(end):]
	} else {
		if text != "" && !strings.HasSuffix(text, "\n\n") {
			text = strings.TrimRight(text, "\n") + "\n\n"
		}
		text += section + "\n"
	}
	return os.WriteFile(path, []byte(text), 0o644)
}

// Machine describes the host: CPU model, cores, memory, KVM or not.
func Machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				if _, v, ok := strings.Cut(line, ":"); ok {
					model = strings.TrimSpace(v)
					break
				}
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb)
		if kb > 0 {
			mem = fmt.Sprintf(", %.0f GiB RAM", float64(kb)/(1<<20))
		}
	}
	// Whether KVM runs guests is for a probe to say (the QEMU benchmarks
	// name the accelerator in use); the device node alone does not tell.
	kvm := "no /dev/kvm (TCG)"
	if _, err := os.Stat("/dev/kvm"); err == nil {
		kvm = "/dev/kvm present"
	}
	return fmt.Sprintf("%s, %d cores%s, %s, %s/%s", model, runtime.NumCPU(), mem, kvm, runtime.GOOS, runtime.GOARCH)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
}

// phaseRows gathers the steps a backend marked (backend.Phases) over the
// runs of one operation, as one result per step, in the order first seen.
type phaseRows struct {
	order   []string
	samples map[string][]time.Duration
}

func (p *phaseRows) add(steps []backend.Phase) {
	if p.samples == nil {
		p.samples = map[string][]time.Duration{}
	}
	for _, s := range steps {
		if _, ok := p.samples[s.Name]; !ok {
			p.order = append(p.order, s.Name)
		}
		p.samples[s.Name] = append(p.samples[s.Name], s.Took)
	}
}

// results are the steps' rows, named "↳ step".
func (p *phaseRows) results() []Result {
	var out []Result
	for _, name := range p.order {
		out = append(out, Result{Name: "↳ " + name, Samples: p.samples[name], Target: ""})
	}
	return out
}

// addPhased measures fn n times like Add, giving it a context that
// collects the backend's steps, and adds the total and then a row per
// step.
func (rep *Report) addPhased(ctx context.Context, name string, n int, target string, fn func(ctx context.Context, i int) error) error {
	r := Result{Name: name, Target: target}
	var rows phaseRows
	for i := 0; i < n; i++ {
		var ph backend.Phases
		pctx := backend.WithPhases(ctx, &ph)
		start := time.Now()
		if err := fn(pctx, i); err != nil {
			return fmt.Errorf("%s: run %d: %w", name, i, err)
		}
		r.Samples = append(r.Samples, time.Since(start))
		rows.add(ph.Steps())
	}
	rep.Results = append(rep.Results, r)
	rep.Results = append(rep.Results, rows.results()...)
	return nil
}
