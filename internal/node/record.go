package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // DecodeConfig of the frames
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// Screen recording (output.screenRecording): a recorder takes screenshots
// of the agent's sandbox at a few frames a second and pipes them as JPEG
// into ffmpeg (from the host's packages), which encodes a VP8 WebM video,
// a format browsers play. A slow screenshot repeats the last frame, so
// that the video keeps the run's real pace.

// Recording bounds.
const (
	RecordingFile = "recording.webm"
	recordFPS     = 2
	maxRecording  = 2 * time.Hour
	// recordStopWait bounds how long ffmpeg may take to finish the file.
	recordStopWait = 30 * time.Second
)

// recorder records one attempt's screen.
type recorder struct {
	path   string
	lg     *runLog
	cancel context.CancelFunc
	done   chan error
}

// record starts recording sandbox's screen into the attempt's directory.
// It returns nil (and logs why) when recording cannot start; the run goes
// on without it. A nil recorder's stop does nothing.
func (n *Node) record(ctx context.Context, sandbox, dir string, lg *runLog) *recorder {
	bin, err := exec.LookPath("ffmpeg")
	if err != nil {
		lg.printf("screen recording: ffmpeg is not installed on this host (%v); recording nothing", err)
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		lg.printf("screen recording: %v", err)
		return nil
	}
	// The recorder outlives a cancelled attempt only as long as stop
	// takes; its own cancel ends it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxRecording)
	r := &recorder{path: filepath.Join(dir, RecordingFile), lg: lg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- n.recordLoop(rctx, bin, sandbox, r.path) }()
	lg.printf("screen recording to %s at %d frames a second", RecordingFile, recordFPS)
	return r
}

// stop ends the recording and, when the video was written, adds it to
// res's artifacts (res is created when nil).
func (r *recorder) stop(res **api.AgentResult) {
	if r == nil {
		return
	}
	r.cancel()
	err := <-r.done
	fi, serr := os.Stat(r.path)
	if err != nil || serr != nil || fi.Size() == 0 {
		if err == nil {
			err = serr
		}
		if err == nil {
			err = errors.New("no frame was recorded")
		}
		r.lg.printf("screen recording failed: %v", err)
		os.Remove(r.path)
		return
	}
	if *res == nil {
		*res = &api.AgentResult{}
	}
	(*res).Artifacts = append((*res).Artifacts, RecordingFile)
	r.lg.printf("screen recording: %s, %d bytes", RecordingFile, fi.Size())
}

// recordLoop feeds frames to ffmpeg until ctx ends, then lets it finish
// the file.
func (n *Node) recordLoop(ctx context.Context, bin, sandbox, path string) error {
	shot := func() ([]byte, error) {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		b, _, err := n.Screenshot(sctx, sandbox, backend.ScreenshotOptions{Format: "jpeg", Quality: 85})
		return b, err
	}
	first, err := shot()
	if err != nil {
		return fmt.Errorf("first frame: %w", err)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(first))
	if err != nil {
		return fmt.Errorf("first frame: %w", err)
	}
	// VP8 in 4:2:0 wants even sizes; every frame is scaled to the first
	// one's, so that a resolution change mid-run does not break the file.
	w, h := cfg.Width&^1, cfg.Height&^1
	cmd := exec.Command(bin, ffmpegArgs(w, h, path)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stderr limitedBuffer
	stderr.max = 4 << 10
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	setChildAttrs(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start ffmpeg: %w", err)
	}
	werr := feedFrames(ctx, stdin, first, shot)
	stdin.Close()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-time.After(recordStopWait):
		cmd.Process.Kill()
		err = fmt.Errorf("ffmpeg did not finish within %s", recordStopWait)
		<-waited
	}
	if err != nil {
		return fmt.Errorf("ffmpeg: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	if werr != nil {
		return werr
	}
	return nil
}

// feedFrames writes a frame per tick until ctx ends; when screenshots
// fall behind, the last frame is written again for the ticks missed.
func feedFrames(ctx context.Context, w io.Writer, first []byte, shot func() ([]byte, error)) error {
	start := time.Now()
	last, written := first, 0
	t := time.NewTicker(time.Second / recordFPS)
	defer t.Stop()
	for {
		due := int(time.Since(start)*recordFPS/time.Second) + 1
		for ; written < due; written++ {
			if _, err := w.Write(last); err != nil {
				return fmt.Errorf("write a frame to ffmpeg: %w", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if b, err := shot(); err == nil {
			last = b
		} else if ctx.Err() != nil {
			return nil
		}
		// A failed screenshot (the sandbox paused for a moment) repeats
		// the last frame.
	}
}

// ffmpegArgs reads JPEG frames on stdin at recordFPS and writes a VP8
// WebM of w x h to path. The encoder runs in real-time mode: recording
// must not take the cores the desktop needs.
func ffmpegArgs(w, h int, path string) []string {
	return []string{
		"-hide_banner", "-loglevel", "error", "-y",
		"-f", "image2pipe", "-framerate", strconv.Itoa(recordFPS), "-c:v", "mjpeg", "-i", "pipe:0",
		"-vf", fmt.Sprintf("scale=%d:%d", w, h),
		"-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "1M", "-pix_fmt", "yuv420p",
		"-threads", "1",
		"-f", "webm", path,
	}
}
