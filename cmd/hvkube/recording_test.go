//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// requireFFmpeg skips when ffmpeg is not installed (scripts/deps.sh
// installs it), unless make test runs us, where that is a failure.
func requireFFmpeg(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("HVKUBE_REQUIRE_QEMU") != "" {
				t.Fatalf("%s is not installed: run scripts/deps.sh (%v)", bin, err)
			}
			t.Skipf("%s is not installed: run scripts/deps.sh (%v)", bin, err)
		}
	}
}

// TestScreenRecordingOnQEMU runs a workflow agent with
// output.screenRecording on a real desktop, follows its log with `hvkube
// logs -f agent/NAME` until it ends, and checks the recording is a video
// ffprobe decodes, the length of the run; /metrics counts the acquire.
func TestScreenRecordingOnQEMU(t *testing.T) {
	requireFFmpeg(t)
	l := newLoop(t)
	l.apply(poolYAML("rec", 1, ""))
	l.apply(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: recorded}
spec:
  sandboxSelector: {pool: rec}
  type: workflow
  task:
    steps:
    - {action: left_click, coordinate: [400, 300]}
    - {action: type, text: "echo recorded"}
    - {action: key, text: Return}
    - {action: wait, duration: 4}
  completion: {timeoutMinutes: 5}
  output: {screenRecording: true}
`)
	// Follow the agent's log from before it runs to its end.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	follow := exec.CommandContext(ctx, binary, "--server", l.p.url(), "logs", "-f", "agent/recorded")
	followed, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	var a *api.Agent
	l.waitFor("the agent completes", 4*time.Minute, func() (bool, string) {
		a = l.agent("recorded")
		return a.Status.Phase == api.AgentCompleted, fmt.Sprintf("%s %s %s", a.Status.Phase, a.Status.Reason, a.Status.Message)
	})
	logText, _ := io.ReadAll(followed)
	if err := follow.Wait(); err != nil {
		t.Fatalf("logs -f: %v\n%s", err, logText)
	}
	for _, want := range []string{"screen recording to recording.webm", "step 4 (wait) ok", "screen recording: recording.webm", "completed in"} {
		if !strings.Contains(string(logText), want) {
			t.Errorf("the followed log lacks %q:\n%s", want, logText)
		}
	}
	if !slices.Contains(a.Status.Result.Artifacts, "recording.webm") {
		t.Fatalf("artifacts %v lack the recording", a.Status.Result.Artifacts)
	}

	resp, err := http.Get(l.p.url() + "/api/v1/agents/recorded/files/recording.webm")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "video/webm" {
		t.Fatalf("get the recording: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	video := filepath.Join(t.TempDir(), "recording.webm")
	f, _ := os.Create(video)
	io.Copy(f, resp.Body)
	f.Close()
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,width,height,nb_read_frames", "-show_entries", "format=duration", "-of", "json", video).Output()
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	var probe struct {
		Streams []struct {
			Codec  string `json:"codec_name"`
			Width  int    `json:"width"`
			Height int    `json:"height"`
			Frames string `json:"nb_read_frames"`
		} `json:"streams"`
		Format struct {
			Duration string `json:"duration"`
		} `json:"format"`
	}
	if err := json.Unmarshal(out, &probe); err != nil || len(probe.Streams) != 1 {
		t.Fatalf("ffprobe: %v %s", err, out)
	}
	s := probe.Streams[0]
	frames, _ := strconv.Atoi(s.Frames)
	dur, _ := strconv.ParseFloat(probe.Format.Duration, 64)
	// The run has a 4 s wait, recorded at 2 frames a second.
	if s.Codec != "vp8" || s.Width < 640 || s.Height < 400 || frames < 8 || dur < 4 {
		t.Fatalf("recording: %s", out)
	}

	metrics, err := http.Get(l.p.url() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	if !strings.Contains(string(body), "hvkube_acquire_duration_seconds_count{how=") || !strings.Contains(string(body), `hvkube_agents{phase="Completed"} 1`) {
		t.Fatalf("/metrics after a run:\n%s", body)
	}
	mustHV(t, l.p, "delete", "agent", "recorded")
	mustHV(t, l.p, "delete", "pool", "rec")
}
