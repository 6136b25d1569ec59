package osworld

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/recording"
)

// OSWorld's runner records every task: /start_recording starts ffmpeg in
// the guest, /end_recording stops it and answers the MP4. hvkube records
// on the host instead (the guest does no encoding), from the screenshots
// the hypervisor takes, into an H.264 MP4 as OSWorld's server writes it;
// the file lives in Recordings' directory until /end_recording has sent
// it. A recording belongs to the process serving the API: with several
// API servers both calls must reach the same one.
//
// A recording is its holder's: whoever holds the sandbox when it starts
// (the agent that runs on it; "" when none). It ends, and its file goes,
// as soon as the sandbox has another holder or is gone (a reset to the
// pool, a release, a deletion), so that no later holder is recorded or
// gets what an earlier one did; only the same holder's /end_recording
// gets it.

// Holder says who holds a sandbox now ("" for nobody); an error that
// is api.ErrNotFound means the sandbox is gone.
type Holder func(ctx context.Context) (string, error)

// recordingCheck is how often a recording checks that its holder still
// holds the sandbox.
var recordingCheck = 2 * time.Second

// Recordings are the recordings under way, one a sandbox at most.
type Recordings struct {
	mu  sync.Mutex // guards the following fields
	dir string
	m   map[string]*ownedRecording
}

// ownedRecording is a recording and whose it is.
type ownedRecording struct {
	rec    *recording.Recording
	holder string
	stop   chan struct{} // closed when the recording is taken out of the map
}

// errRecording: the sandbox is being recorded already.
var errRecording = errors.New("Recording is already in progress.")

// errNoRecording: the sandbox is not being recorded (for this holder).
var errNoRecording = errors.New("No recording in progress to stop.")

// start starts recording sandbox name's screen (shot takes PNG frames) for
// its holder now; the recording ends by itself when held says another
// holds the sandbox, or that it is gone.
func (rs *Recordings) start(ctx context.Context, name string, held Holder, shot recording.Shot) error {
	holder, err := held(ctx)
	if err != nil {
		return err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m[name] != nil {
		return errRecording
	}
	if rs.dir == "" {
		dir, err := os.MkdirTemp("", "hvkube-osworld-recordings-")
		if err != nil {
			return err
		}
		rs.dir, rs.m = dir, map[string]*ownedRecording{}
	}
	path := filepath.Join(rs.dir, name+".mp4")
	os.Remove(path)
	rec, err := recording.Start(ctx, recording.Options{Shot: shot, Frames: "png", Path: path, Format: recording.MP4})
	if err != nil {
		return err
	}
	o := &ownedRecording{rec: rec, holder: holder, stop: make(chan struct{})}
	rs.m[name] = o
	go rs.watch(context.WithoutCancel(ctx), name, o, held)
	return nil
}

// watch ends o (and removes its file) once the sandbox has another holder
// or is gone, or after recording.MaxDuration.
func (rs *Recordings) watch(ctx context.Context, name string, o *ownedRecording, held Holder) {
	t := time.NewTicker(recordingCheck)
	defer t.Stop()
	end := time.After(recording.MaxDuration)
	for {
		select {
		case <-o.stop:
			return
		case <-end:
		case <-t.C:
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			h, err := held(cctx)
			cancel()
			if err == nil && h == o.holder {
				continue
			}
			if err != nil && !gone(err) {
				continue // the store did not answer: look again
			}
		}
		if rs.take(name, o) {
			o.rec.Stop()
			os.Remove(o.rec.Path)
		}
		return
	}
}

// take removes o from the map if it is still there; true when it was.
func (rs *Recordings) take(name string, o *ownedRecording) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m[name] != o {
		return false
	}
	delete(rs.m, name)
	close(o.stop)
	return true
}

// stop ends sandbox name's recording when holder is its holder, and
// returns its file, which the caller removes.
func (rs *Recordings) stop(name, holder string) (string, error) {
	rs.mu.Lock()
	o := rs.m[name]
	rs.mu.Unlock()
	if o == nil || o.holder != holder || !rs.take(name, o) {
		return "", errNoRecording
	}
	if err := o.rec.Stop(); err != nil {
		os.Remove(o.rec.Path)
		return "", err
	}
	return o.rec.Path, nil
}

// Close stops every recording and removes their files.
func (rs *Recordings) Close() {
	rs.mu.Lock()
	recs, dir := rs.m, rs.dir
	rs.m, rs.dir = nil, ""
	for _, o := range recs {
		close(o.stop)
	}
	rs.mu.Unlock()
	for _, o := range recs {
		o.rec.Stop()
	}
	if dir != "" {
		os.RemoveAll(dir)
	}
}

func (a *call) startRecording() {
	if a.d.Recordings == nil || a.d.Holder == nil || a.d.Name == "" {
		a.failed(http.StatusNotImplemented, "screen recording is not served here: record the attempt with hvkube instead (an Agent's recording, docs/agents.md)")
		return
	}
	shot := func(ctx context.Context) ([]byte, error) { return a.g.Screenshot(ctx) }
	err := a.d.Recordings.start(a.r.Context(), a.d.Name, a.d.Holder, shot)
	switch {
	case errors.Is(err, errRecording):
		a.json(http.StatusBadRequest, map[string]string{"status": "error", "message": err.Error()})
	case err != nil:
		a.failed(http.StatusInternalServerError, "Failed to start recording: "+err.Error())
	default:
		a.json(http.StatusOK, map[string]string{"status": "success", "message": "Started recording successfully."})
	}
}

func (a *call) endRecording() {
	if a.d.Recordings == nil || a.d.Holder == nil || a.d.Name == "" {
		a.failed(http.StatusNotImplemented, "screen recording is not served here: record the attempt with hvkube instead (an Agent's recording, docs/agents.md)")
		return
	}
	holder, err := a.d.Holder(a.r.Context())
	if err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	path, err := a.d.Recordings.stop(a.d.Name, holder)
	switch {
	case errors.Is(err, errNoRecording):
		a.json(http.StatusBadRequest, map[string]string{"status": "error", "message": err.Error()})
		return
	case err != nil:
		a.failed(http.StatusInternalServerError, fmt.Sprintf("Recording failed: %v", err))
		return
	}
	defer os.Remove(path)
	f, err := os.Open(path)
	if err != nil {
		a.failed(http.StatusInternalServerError, "Recording failed: "+err.Error())
		return
	}
	defer f.Close()
	a.w.Header().Set("Content-Type", "video/mp4")
	a.w.Header().Set("Content-Disposition", `attachment; filename="recording.mp4"`)
	http.ServeContent(a.w, a.r, "recording.mp4", time.Time{}, f)
}

// gone reports whether err says the sandbox is no more.
func gone(err error) bool { return errors.Is(err, api.ErrNotFound) }
