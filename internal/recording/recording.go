// Package recording records a screen into a video file: a Recording takes
// screenshots at a few frames a second and pipes them as JPEG into ffmpeg
// (from the host's packages), which encodes the video. A slow screenshot
// repeats the last frame, so that the video keeps the real pace.
//
// Agents' recordings (output.screenRecording) are VP8 WebM, which browsers
// play; OSWorld's /end_recording answers an H.264 MP4, as OSWorld's own
// server records.
package recording

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // DecodeConfig of the frames
	_ "image/png"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// Bounds of a recording.
const (
	// FPS is how many frames a second are taken.
	FPS = 2
	// MaxDuration ends a recording nobody stops.
	MaxDuration = 2 * time.Hour
	// stopWait bounds how long ffmpeg may take to finish the file.
	stopWait = 30 * time.Second
)

// Format is a video format ffmpeg writes.
type Format struct {
	// Name is ffmpeg's muxer.
	Name string
	// codec are the encoder's arguments.
	codec []string
}

var (
	// WebM is VP8 in WebM, in real-time mode (the encoder must not take
	// the cores the desktop needs).
	WebM = Format{"webm", []string{"-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "1M"}}
	// MP4 is H.264 in MP4, as OSWorld's server records.
	MP4 = Format{"mp4", []string{"-c:v", "libx264", "-preset", "ultrafast", "-movflags", "+faststart"}}
)

// Shot takes one frame, a JPEG.
type Shot func(ctx context.Context) ([]byte, error)

// Recording is a recording under way.
type Recording struct {
	cancel context.CancelFunc
	done   chan error
	// Path is the file written.
	Path string
}

// ErrNoFFmpeg: ffmpeg is not installed on this host.
var ErrNoFFmpeg = errors.New("ffmpeg is not installed on this host")

// Options say what to record, and where.
type Options struct {
	// Shot takes a frame, in the image format Frames names.
	Shot Shot
	// Frames is ffmpeg's decoder of the frames: mjpeg (the default) or
	// png.
	Frames string
	// Path is the file written, in Format.
	Path   string
	Format Format
	// Prepare, when set, sets ffmpeg's process attributes.
	Prepare func(*exec.Cmd)
}

// Start starts recording until Stop (or MaxDuration). It fails at once
// only when ffmpeg is missing; what fails later is Stop's error.
func Start(ctx context.Context, o Options) (*Recording, error) {
	bin, err := exec.LookPath("ffmpeg")
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrNoFFmpeg, err)
	}
	if o.Frames == "" {
		o.Frames = "mjpeg"
	}
	// The recording outlives a cancelled caller only as long as Stop
	// takes; its own cancel ends it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MaxDuration)
	r := &Recording{cancel: cancel, done: make(chan error, 1), Path: o.Path}
	go func() { r.done <- loop(rctx, bin, o) }()
	return r, nil
}

// Stop ends the recording and waits for the file: nil when it was written
// and holds frames. Stop is called once.
func (r *Recording) Stop() error {
	r.cancel()
	err := <-r.done
	if err != nil {
		return err
	}
	fi, err := os.Stat(r.Path)
	if err != nil {
		return err
	}
	if fi.Size() == 0 {
		return errors.New("no frame was recorded")
	}
	return nil
}

// loop feeds frames to ffmpeg until ctx ends, then lets it finish the
// file.
func loop(ctx context.Context, bin string, o Options) error {
	take := func() ([]byte, error) {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return o.Shot(sctx)
	}
	first, err := take()
	if err != nil {
		return fmt.Errorf("first frame: %w", err)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(first))
	if err != nil {
		return fmt.Errorf("first frame: %w", err)
	}
	// 4:2:0 wants even sizes; every frame is scaled to the first one's, so
	// that a resolution change midway does not break the file.
	w, h := cfg.Width&^1, cfg.Height&^1
	cmd := exec.Command(bin, ffmpegArgs(w, h, o)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	stderr := &limited{max: 4 << 10}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if o.Prepare != nil {
		o.Prepare(cmd)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start ffmpeg: %w", err)
	}
	werr := feedFrames(ctx, stdin, first, take)
	stdin.Close()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-time.After(stopWait):
		cmd.Process.Kill()
		err = fmt.Errorf("ffmpeg did not finish within %s", stopWait)
		<-waited
	}
	if err != nil {
		return fmt.Errorf("ffmpeg: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return werr
}

// feedFrames writes a frame per tick until ctx ends; when screenshots
// fall behind, the last frame is written again for the ticks missed.
func feedFrames(ctx context.Context, w io.Writer, first []byte, shot func() ([]byte, error)) error {
	start := time.Now()
	last, written := first, 0
	t := time.NewTicker(time.Second / FPS)
	defer t.Stop()
	for {
		due := int(time.Since(start)*FPS/time.Second) + 1
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

// ffmpegArgs reads frames on stdin at FPS and writes a w x h video of
// o.Format to o.Path, on one thread.
func ffmpegArgs(w, h int, o Options) []string {
	args := []string{
		"-hide_banner", "-loglevel", "error", "-y",
		"-f", "image2pipe", "-framerate", strconv.Itoa(FPS), "-c:v", o.Frames, "-i", "pipe:0",
		"-vf", fmt.Sprintf("scale=%d:%d", w, h),
	}
	args = append(args, o.Format.codec...)
	return append(args, "-pix_fmt", "yuv420p", "-threads", "1", "-f", o.Format.Name, o.Path)
}

// limited keeps the first max bytes written to it.
type limited struct {
	bytes.Buffer
	max int
}

func (b *limited) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
