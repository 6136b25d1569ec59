package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
)

// QEMUOptions size the desktop benchmark.
type QEMUOptions struct {
	ImageDir string
	Image    string // image name, e.g. linux-desktop
	Runs     int
	// ColdBoots is how many cold boots to time (each takes tens of seconds
	// under TCG).
	ColdBoots int
	// Batches is how many times to clone 10 sandboxes at once.
	Batches int
	// ClonesOnly stops after the cold boots, the clones to paused, the
	// network on the claim path and the clones' memory (for images whose
	// other numbers are the same as linux-desktop's, such as
	// browser-desktop).
	ClonesOnly bool
	// CompareLoadvm also boots the image in a plain QEMU and times QEMU's
	// own revert (savevm once, loadvm in place) beside hvkube's reset: one
	// more cold boot.
	CompareLoadvm bool
	Log           io.Writer
}

// Key is the benchmarks.md section of a run: "qemu" for linux-desktop,
// "qemu-IMAGE" for another image.
func (o QEMUOptions) Key() string { return sectionKey("qemu", o.Image) }

// sectionKey names the benchmarks.md section of a run of bench on image:
// bench itself for linux-desktop, bench-IMAGE for another image.
func sectionKey(bench, image string) string {
	if image == "" || image == "linux-desktop" {
		return bench
	}
	return bench + "-" + image
}

// QEMU measures the desktop fast path on the QEMU backend: cold boot,
// clone, resume, restore, memory, and screenshots and input through the
// API of a real server.
func QEMU(ctx context.Context, o QEMUOptions) (*Report, error) {
	be, dir, closeBackend, err := newBackend(ctx, "hvkube-bench-qemu-", qemu.Config{ImageDir: o.ImageDir})
	if err != nil {
		return nil, err
	}
	defer closeBackend() // VMs outlive a backend: end them, even on failure
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, format+"\n", args...) }
	rep := &Report{}
	img := api.QEMUImage{Image: o.Image}
	if size, err := imageSize(o.ImageDir, o.Image); err == nil {
		rep.Facts = append(rep.Facts, size)
	}

	// Cold boots: each builds a template from scratch, boot to ready.
	var tplID string
	cold := Result{Name: "cold boot to ready desktop", Target: "reference"}
	for i := 0; i < o.ColdBoots; i++ {
		id := fmt.Sprintf("bench-cold-%d", i)
		info, err := be.BuildTemplate(ctx, backend.TemplateSpec{ID: id, Image: img}, nil)
		if err != nil {
			return nil, err
		}
		cold.Samples = append(cold.Samples, info.BootTime)
		logf("cold boot %d/%d: %s", i+1, o.ColdBoots, info.BootTime.Round(time.Millisecond))
		if tplID == "" {
			tplID = id
		} else {
			be.DeleteTemplate(ctx, id)
		}
	}
	rep.Results = append(rep.Results, cold)

	n := 0
	newID := func() string { n++; return fmt.Sprintf("bench-%d", n) }
	create := func(id string) error {
		_, err := be.Create(ctx, backend.SandboxSpec{ID: id, TemplateID: tplID})
		return err
	}

	logf("clone to paused ×%d", o.Runs)
	// The template's first clone; from it on, a spare is kept.
	first, err := be.Create(ctx, backend.SandboxSpec{ID: newID(), TemplateID: tplID})
	if err != nil {
		return nil, err
	}
	guestMB := first.MemoryMB
	name := "QEMU desktops"
	if o.Key() != "qemu" {
		name += ": " + o.Image
	}
	rep.Title = fmt.Sprintf("%s (%s, %d MB guest, %s)", name, be.Accel(), guestMB, first.Resolution)
	rep.Facts = append(rep.Facts, fmt.Sprintf("accelerator: %s (%s)", be.Accel(), be.AccelReason()))
	// A clone's latency: each finds a spare ready, made while the one
	// before it waited. A second later, as when a pool's sandbox is
	// acquired, the clone's first resume, and its first guest call, which
	// waits for the hostname being written after the resume.
	var cloneSteps, firstSteps phaseRows
	clone := Result{Name: "clone from template snapshot to paused (spare ready)", Target: "p50 ≤ 150 ms"}
	firstResume := Result{Name: "first resume of a clone from a spare, to the guest answering", Target: "p50 ≤ 5 ms"}
	firstCall := Result{Name: "first guest call after it (waits for the hostname)"}
	for i := 0; i < o.Runs; i++ {
		time.Sleep(time.Second)
		id := newID()
		var ph backend.Phases
		t := time.Now()
		if _, err := be.Create(backend.WithPhases(ctx, &ph), backend.SandboxSpec{ID: id, TemplateID: tplID}); err != nil {
			return nil, err
		}
		clone.Samples = append(clone.Samples, time.Since(t))
		cloneSteps.add(ph.Steps())
		time.Sleep(time.Second)
		t = time.Now()
		if err := be.Resume(backend.WithPhases(ctx, &ph), id); err != nil {
			return nil, err
		}
		firstResume.Samples = append(firstResume.Samples, time.Since(t))
		firstSteps.add(ph.Steps())
		t = time.Now()
		if err := be.Alive(ctx, id); err != nil {
			return nil, err
		}
		firstCall.Samples = append(firstCall.Samples, time.Since(t))
		if err := be.Pause(ctx, id); err != nil {
			return nil, err
		}
	}
	rep.Results = append(rep.Results, clone)
	rep.Results = append(rep.Results, cloneSteps.results()...)
	rep.Results = append(rep.Results, firstResume)
	rep.Results = append(rep.Results, firstSteps.results()...)
	rep.Results = append(rep.Results, firstCall)
	if err := networkBench(ctx, rep, be, tplID, img, o, logf); err != nil {
		return nil, err
	}
	// Private memory of the paused clones made so far.
	var priv []int64
	for i := 1; i <= n; i++ {
		if p, err := be.PrivateMemory(ctx, fmt.Sprintf("bench-%d", i)); err == nil {
			priv = append(priv, p)
		}
	}
	if len(priv) > 0 {
		p50, p95 := float64(percentile(priv, 50))/(1<<20), float64(percentile(priv, 95))/(1<<20)
		rep.Facts = append(rep.Facts, fmt.Sprintf("private memory of a paused clone: p50 %.0f MiB, p95 %.0f MiB of %d MiB guest RAM (%.0f%% / %.0f%%; target ≤ 25%%), Private_Clean+Private_Dirty from /proc/PID/smaps_rollup over %d clones",
			p50, p95, guestMB, p50/float64(guestMB)*100, p95/float64(guestMB)*100, len(priv)))
	}
	// Every clone counts its guest RAM against the host memory limit.
	deleteAll := func() {
		for i := 1; i <= n; i++ {
			be.Delete(ctx, fmt.Sprintf("bench-%d", i))
		}
	}
	deleteAll()
	if o.ClonesOnly {
		rep.Command = fmt.Sprintf("hvkube bench qemu --image %s --clones-only --runs %d --cold-boots %d", o.Image, o.Runs, o.ColdBoots)
		return rep, nil
	}
	// Clones asked for back to back: each waits for the spare being made.
	if err := rep.Add("clone to paused, back to back", o.Runs, "", func(int) error {
		return create(newID())
	}); err != nil {
		return nil, err
	}
	deleteAll()
	if err := cloneOnDemand(ctx, rep, dir, img, o, logf); err != nil {
		return nil, err
	}
	// Between the clones above, the backend sized the template's spares
	// to their churn.
	if sp := be.Spares(tplID); sp > 0 {
		rep.Facts = append(rep.Facts, fmt.Sprintf("spares kept for the template after the clones above: %d (at most %d; sized to the clones and resets of the last %s)", sp, qemu.DefaultMaxSpares, qemu.SpareChurnWindow))
	}

	id := newID()
	if err := create(id); err != nil {
		return nil, err
	}
	logf("pause and resume ×%d", o.Runs)
	// As in a pool: a sandbox waits paused for a while, then an agent takes
	// it. After each resume the guest clock is set in the background; the
	// next pause waits until that is done.
	pause := Result{Name: "pause"}
	resume := Result{Name: "resume to guest answering", Target: "p50 ≤ 5 ms"}
	var resumeSteps phaseRows
	if err := be.Resume(ctx, id); err != nil {
		return nil, err
	}
	for i := 0; i < o.Runs; i++ {
		time.Sleep(time.Second)
		t := time.Now()
		if err := be.Pause(ctx, id); err != nil {
			return nil, err
		}
		pause.Samples = append(pause.Samples, time.Since(t))
		time.Sleep(1100 * time.Millisecond)
		var ph backend.Phases
		t = time.Now()
		if err := be.Resume(backend.WithPhases(ctx, &ph), id); err != nil {
			return nil, err
		}
		resume.Samples = append(resume.Samples, time.Since(t))
		resumeSteps.add(ph.Steps())
	}
	rep.Results = append(rep.Results, pause, resume)
	rep.Results = append(rep.Results, resumeSteps.results()...)

	logf("save and restore ×%d", o.Runs)
	save := Result{Name: "save to disk (running guest)"}
	restore := Result{Name: "restore from saved to paused", Target: "p50 ≤ 1 s"}
	for i := 0; i < o.Runs; i++ {
		if err := be.Resume(ctx, id); err != nil {
			return nil, err
		}
		t := time.Now()
		if err := be.Save(ctx, id); err != nil {
			return nil, err
		}
		save.Samples = append(save.Samples, time.Since(t))
		t = time.Now()
		if err := be.Restore(ctx, id); err != nil {
			return nil, err
		}
		restore.Samples = append(restore.Samples, time.Since(t))
	}
	rep.Results = append(rep.Results, save, restore)

	// Reset as a pool does it: the desktop was used (resumed, a command
	// run in it), then it is reset to clean; a second later it is acquired
	// (resumed, until the guest answers). The loadvm comparison's
	// "revert + guest agent answers" is the same work done in place.
	reset, resetResume, err := resetBench(ctx, rep, be, id, o.Runs)
	if err != nil {
		return nil, err
	}
	be.Delete(ctx, id)
	if o.CompareLoadvm {
		logf("QEMU's own loadvm in place, for comparison ×%d", o.Runs)
		revert, answer, err := compareLoadvm(ctx, o, logf)
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, revert, answer)
		if f := ratioFact(reset, answer); f != "" {
			rep.Facts = append(rep.Facts, f)
		}
		if len(resetResume.Samples) > 0 && len(answer.Samples) > 0 {
			rep.Facts = append(rep.Facts, fmt.Sprintf("hvkube's reset + resume to the guest answering p50 %s is %.2fx loadvm + guest agent answer p50 %s",
				fmtDur(resetResume.Percentile(50)), float64(resetResume.Percentile(50))/float64(answer.Percentile(50)), fmtDur(answer.Percentile(50))))
		}
	}

	logf("10 clones at once ×%d", o.Batches)
	batch := Result{Name: "10 clones from one template, in parallel", Target: "≤ 3 s; ≥ 10x cold boots"}
	for i := 0; i < o.Batches; i++ {
		ids := make([]string, 10)
		for j := range ids {
			ids[j] = newID()
		}
		t := time.Now()
		errs := make(chan error, len(ids))
		for _, cid := range ids {
			go func() { errs <- create(cid) }()
		}
		for range ids {
			if err := <-errs; err != nil {
				return nil, err
			}
		}
		batch.Samples = append(batch.Samples, time.Since(t))
		for _, cid := range ids {
			be.Delete(ctx, cid)
		}
	}
	rep.Results = append(rep.Results, batch)
	if len(batch.Samples) > 0 && len(cold.Samples) > 0 {
		rep.Facts = append(rep.Facts, fmt.Sprintf("10 clones take %s (p50); 10 cold boots would take about %s: %.0fx faster",
			fmtDur(batch.Percentile(50)), fmtDur(10*cold.Percentile(50)), float64(10*cold.Percentile(50))/float64(batch.Percentile(50))))
	}

	if err := apiBench(ctx, rep, be, dir, o); err != nil {
		return nil, err
	}
	rep.Command = fmt.Sprintf("hvkube bench qemu --runs %d --cold-boots %d --batches %d", o.Runs, o.ColdBoots, o.Batches)
	if o.Key() != "qemu" {
		rep.Command = fmt.Sprintf("hvkube bench qemu --image %s --runs %d --cold-boots %d --batches %d", o.Image, o.Runs, o.ColdBoots, o.Batches)
	}
	if o.CompareLoadvm {
		rep.Command += " --compare-loadvm"
	}
	return rep, nil
}

// networkBench measures the guest network on the claim path: a clone of
// the template (which has a network device) cloned and resumed, then its
// first HTTP response from a server on the host's loopback, fetched in the
// guest through its NAT (the egress rule allows it); and clone + first
// resume beside the same for a template built with network mode none (one
// more cold boot), one after the other so that both meet the same load.
// The first guest call after a resume waits for the clone's hostname, so
// the HTTP row includes that.
func networkBench(ctx context.Context, rep *Report, be *qemu.Backend, tplID string, img api.QEMUImage, o QEMUOptions, logf func(string, ...any)) error {
	if info, err := be.InspectTemplate(ctx, tplID); err != nil {
		return err
	} else if !info.Network {
		rep.Facts = append(rep.Facts, "no network rows: the template has no network device (the image declares no network)")
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	port := strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)
	allow := api.Network{Egress: api.Egress{Allow: []string{"127.0.0.1:" + port}}}
	fetch := backend.ExecRequest{Path: "timeout", Args: []string{"20", "bash", "-c",
		`exec 3<>/dev/tcp/10.0.2.2/$1 || exit 7; printf 'GET / HTTP/1.0\r\n\r\n' >&3; cat <&3`, "fetch", port}}
	logf("building a template with network mode none (a cold boot)")
	const noNet = "bench-nonet"
	if _, err := be.BuildTemplate(ctx, backend.TemplateSpec{ID: noNet, Image: img, NetworkMode: api.NetworkNone}, nil); err != nil {
		return err
	}
	defer be.DeleteTemplate(context.WithoutCancel(ctx), noNet)
	// Its first clone has its spares made, as the other template's has.
	n := 0
	cloneResume := func(tpl string, network api.Network) (string, time.Duration, error) {
		n++
		id := fmt.Sprintf("bench-net-%d", n)
		t := time.Now()
		if _, err := be.Create(ctx, backend.SandboxSpec{ID: id, TemplateID: tpl, Network: network}); err != nil {
			return id, 0, err
		}
		if err := be.Resume(ctx, id); err != nil {
			return id, 0, err
		}
		return id, time.Since(t), nil
	}
	id, _, err := cloneResume(noNet, api.Network{})
	be.Delete(ctx, id)
	if err != nil {
		return err
	}
	on := Result{Name: "clone + first resume to the guest answering, network on (spare ready)", Target: "≤ 10 % over off"}
	off := Result{Name: "clone + first resume to the guest answering, network off (template mode none)"}
	http1 := Result{Name: "clone → first HTTP response from a host server through the guest's NAT", Target: "-"}
	logf("network on the claim path ×%d", o.Runs)
	for i := 0; i < o.Runs; i++ {
		time.Sleep(time.Second)
		id, d, err := cloneResume(tplID, allow)
		if err == nil {
			on.Samples = append(on.Samples, d)
			t := time.Now()
			var res backend.ExecResult
			res, err = be.Exec(ctx, id, fetch)
			if err == nil && (res.ExitCode != 0 || !strings.HasSuffix(string(res.Stdout), "ok")) {
				err = fmt.Errorf("fetch in the guest: exit %d: %s", res.ExitCode, res.Stderr)
			}
			http1.Samples = append(http1.Samples, d+time.Since(t))
		}
		be.Delete(ctx, id)
		if err != nil {
			return err
		}
		time.Sleep(time.Second)
		id, d, err = cloneResume(noNet, api.Network{})
		be.Delete(ctx, id)
		if err != nil {
			return err
		}
		off.Samples = append(off.Samples, d)
	}
	rep.Results = append(rep.Results, on, off, http1)
	if p50on, p50off := on.Percentile(50), off.Percentile(50); p50off > 0 {
		rep.Facts = append(rep.Facts, fmt.Sprintf("network on the claim path: clone + first resume p50 %s with the network, %s without (%+.0f %%; target ≤ 10 %%)",
			fmtDur(p50on), fmtDur(p50off), (float64(p50on)/float64(p50off)-1)*100))
	}
	return nil
}

// imageSize describes the image's size on disk from the image.json its
// builder wrote.
func imageSize(imageDir, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(imageDir, name, "current", "image.json"))
	if err != nil {
		return "", err
	}
	var info struct {
		Sizes struct {
			DiskBytes        int64 `json:"diskBytes"`
			DiskVirtualBytes int64 `json:"diskVirtualBytes"`
			RootfsBytes      int64 `json:"rootfsBytes"`
		} `json:"sizes"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return "", fmt.Errorf("%s: image.json: %w", name, err)
	}
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	return fmt.Sprintf("image %s: %.0f MiB qcow2 disk (%.0f MiB of files in the root filesystem, %.0f MiB virtual)",
		name, mib(info.Sizes.DiskBytes), mib(info.Sizes.RootfsBytes), mib(info.Sizes.DiskVirtualBytes)), nil
}

// cloneOnDemand measures clones that start their QEMU when asked, as
// they do with spares off or when clones are asked for faster than spares
// are made: a backend of its own with spares off, and a template of its
// own.
func cloneOnDemand(ctx context.Context, rep *Report, dir string, img api.QEMUImage, o QEMUOptions, logf func(string, ...any)) error {
	be, err := qemu.New(ctx, qemu.Config{Dir: filepath.Join(dir, "qemu-nospare"), ImageDir: o.ImageDir, NoSpares: true})
	if err != nil {
		return err
	}
	defer be.Close()
	defer deleteSandboxes(ctx, be)
	logf("clone to paused, QEMU started on demand ×%d", o.Runs)
	if _, err := be.BuildTemplate(ctx, backend.TemplateSpec{ID: "bench-nospare", Image: img}, nil); err != nil {
		return err
	}
	return rep.addPhased(ctx, "clone to paused, QEMU started on demand (no spare)", o.Runs, "", func(ctx context.Context, i int) error {
		id := fmt.Sprintf("bench-nospare-%d", i)
		_, err := be.Create(ctx, backend.SandboxSpec{ID: id, TemplateID: "bench-nospare"})
		return err
	})
}

// resetBench measures resets of sandbox id as a pool does them, each after
// the desktop was used, and the acquire that follows.
func resetBench(ctx context.Context, rep *Report, be *qemu.Backend, id string, runs int) (reset, both Result, err error) {
	reset = Result{Name: "reset to clean (a spare swapped in)", Target: "p50 ≤ ½ (loadvm + guest answers)"}
	acquire := Result{Name: "resume after the reset, to the guest answering", Target: "p50 ≤ 5 ms"}
	both = Result{Name: "reset + resume to the guest answering"}
	var resetSteps, acquireSteps phaseRows
	for i := 0; i < runs; i++ {
		if err := be.Resume(ctx, id); err != nil {
			return reset, both, err
		}
		if _, err := be.Exec(ctx, id, backend.ExecRequest{Path: "sh", Args: []string{"-c", "echo used > /tmp/used"}}); err != nil {
			return reset, both, err
		}
		time.Sleep(time.Second)
		var ph backend.Phases
		t := time.Now()
		if err := be.Reset(backend.WithPhases(ctx, &ph), id); err != nil {
			return reset, both, err
		}
		r := time.Since(t)
		resetSteps.add(ph.Steps())
		time.Sleep(time.Second)
		t = time.Now()
		if err := be.Resume(backend.WithPhases(ctx, &ph), id); err != nil {
			return reset, both, err
		}
		a := time.Since(t)
		acquireSteps.add(ph.Steps())
		reset.Samples = append(reset.Samples, r)
		acquire.Samples = append(acquire.Samples, a)
		both.Samples = append(both.Samples, r+a)
		if err := be.Pause(ctx, id); err != nil {
			return reset, both, err
		}
	}
	rep.Results = append(rep.Results, reset)
	rep.Results = append(rep.Results, resetSteps.results()...)
	rep.Results = append(rep.Results, acquire)
	rep.Results = append(rep.Results, acquireSteps.results()...)
	rep.Results = append(rep.Results, both)
	return reset, both, nil
}

// deleteSandboxes deletes every sandbox of be.
func deleteSandboxes(ctx context.Context, be *qemu.Backend) {
	list, _ := be.List(context.WithoutCancel(ctx))
	for _, info := range list {
		be.Delete(context.WithoutCancel(ctx), info.ID)
	}
}

// apiBench measures screenshots and input through a real server's HTTP API.
func apiBench(ctx context.Context, rep *Report, be *qemu.Backend, dir string, o QEMUOptions) error {
	c, closeDesk, err := openDesk(ctx, be, dir, o.Image, "bench-api")
	if err != nil {
		return err
	}
	defer closeDesk()
	if err := rep.Add("screenshot via API (1280x800 PNG, unchanged screen)", o.Runs*5, "p50 ≤ 5 ms", func(int) error {
		_, _, err := c.Screenshot(ctx, "bench-api", nil)
		return err
	}); err != nil {
		return err
	}
	// The same with the screen changed before each shot (a key typed into
	// the terminal, not timed), so that every one is encoded anew.
	if _, err := c.Input(ctx, "bench-api", api.Action{Action: "left_click", Coordinate: []int{400, 300}}); err != nil {
		return err
	}
	changed := Result{Name: "screenshot via API (1280x800 PNG, changed screen)", Target: "p50 ≤ 12 ms"}
	for i := 0; i < o.Runs*5; i++ {
		if _, err := c.Input(ctx, "bench-api", api.Action{Action: "key", Text: string(rune('a' + i%26))}); err != nil {
			return err
		}
		time.Sleep(150 * time.Millisecond)
		t := time.Now()
		if _, _, err := c.Screenshot(ctx, "bench-api", nil); err != nil {
			return err
		}
		changed.Samples = append(changed.Samples, time.Since(t))
	}
	rep.Results = append(rep.Results, changed)
	jpegChanged := Result{Name: "screenshot via API (1280x800 JPEG q80, changed screen)", Target: "-"}
	jq := url.Values{"format": {"jpeg"}, "quality": {"80"}}
	for i := 0; i < o.Runs*5; i++ {
		if _, err := c.Input(ctx, "bench-api", api.Action{Action: "key", Text: string(rune('a' + i%26))}); err != nil {
			return err
		}
		time.Sleep(150 * time.Millisecond)
		t := time.Now()
		if _, _, err := c.Screenshot(ctx, "bench-api", jq); err != nil {
			return err
		}
		jpegChanged.Samples = append(jpegChanged.Samples, time.Since(t))
	}
	rep.Results = append(rep.Results, jpegChanged)
	if err := settleBench(ctx, rep, c, o); err != nil {
		return err
	}
	if err := rep.Add("input round trip via API (mouse_move)", o.Runs*5, "p50 ≤ 20 ms", func(i int) error {
		_, err := c.Input(ctx, "bench-api", api.Action{Action: "mouse_move", Coordinate: []int{100 + i%500, 100 + i%300}})
		return err
	}); err != nil {
		return err
	}
	if err := rep.Add("input round trip via API (left_click)", o.Runs*5, "p50 ≤ 20 ms", func(i int) error {
		_, err := c.Input(ctx, "bench-api", api.Action{Action: "left_click", Coordinate: []int{1000 + i%100, 700}})
		return err
	}); err != nil {
		return err
	}
	return nil
}

// settleBench measures an action followed by the screenshot that shows its
// effect: a right click on the desktop's background opens the window
// manager's menu; the screenshot comes either settled (returned once the
// screen has stopped changing) or after the fixed sleep agent loops use.
// A fact records how often the screenshot showed the menu.
func settleBench(ctx context.Context, rep *Report, c *client.Client, o QEMUOptions) error {
	const bg = 1100 // x of the background, right of the terminal
	run := func(name string, shot func() ([]byte, error)) error {
		r := Result{Name: name, Target: "-"}
		shown := 0
		for i := 0; i < o.Runs; i++ {
			before, _, err := c.Screenshot(ctx, "bench-api", nil)
			if err != nil {
				return err
			}
			t := time.Now()
			if _, err := c.Input(ctx, "bench-api", api.Action{Action: "right_click", Coordinate: []int{bg, 200 + i%200}}); err != nil {
				return err
			}
			after, err := shot()
			if err != nil {
				return err
			}
			r.Samples = append(r.Samples, time.Since(t))
			if !bytes.Equal(before, after) {
				shown++
			}
			if _, err := c.Input(ctx, "bench-api", api.Action{Action: "key", Text: "Escape"}); err != nil {
				return err
			}
			if _, _, err := c.Screenshot(ctx, "bench-api", url.Values{"settle": {"true"}}); err != nil {
				return err
			}
		}
		rep.Results = append(rep.Results, r)
		rep.Facts = append(rep.Facts, fmt.Sprintf("%s: the screenshot showed the menu %d times of %d", name, shown, o.Runs))
		return nil
	}
	if err := run("right click opens a menu → settled screenshot (?settle=true)", func() ([]byte, error) {
		b, _, err := c.Screenshot(ctx, "bench-api", url.Values{"settle": {"true"}})
		return b, err
	}); err != nil {
		return err
	}
	return run("right click opens a menu → fixed 2 s sleep, then screenshot", func() ([]byte, error) {
		time.Sleep(2 * time.Second)
		b, _, err := c.Screenshot(ctx, "bench-api", nil)
		return b, err
	})
}

func waitPhase(ctx context.Context, c *client.Client, kind, name, phase string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		o, err := c.Get(ctx, kind, name)
		if err != nil {
			return err
		}
		var got, msg string
		switch x := o.(type) {
		case *api.Template:
			got, msg = x.Status.Phase, x.Status.Message
		case *api.Sandbox:
			got, msg = x.Status.Phase, x.Status.Message
		}
		if got == phase {
			return nil
		}
		if got == api.TemplateFailed || got == api.SandboxError {
			return fmt.Errorf("%s %s is %s: %s", kind, name, got, msg)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s %s is still %s after %s", kind, name, got, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
