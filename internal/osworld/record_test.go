package osworld

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// TestRecordingsAreTheHolders: a recording is whoever held the sandbox
// when it started: another holder's /end_recording gets nothing, and once
// the sandbox has another holder (or is gone) the recording ends and its
// file goes; the same holder gets its MP4.
func TestRecordingsAreTheHolders(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg is not installed (make deps installs it)")
	}
	defer func(d time.Duration) { recordingCheck = d }(recordingCheck)
	recordingCheck = 50 * time.Millisecond
	var mu sync.Mutex
	holder, exists := "agent-a/1", true
	held := func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if !exists {
			return "", fmt.Errorf("sandbox desk: %w", api.ErrNotFound)
		}
		return holder, nil
	}
	set := func(h string, there bool) {
		mu.Lock()
		holder, exists = h, there
		mu.Unlock()
	}
	frame := func(context.Context) ([]byte, error) {
		var b bytes.Buffer
		png.Encode(&b, image.NewRGBA(image.Rect(0, 0, 64, 48)))
		return b.Bytes(), nil
	}
	var rs Recordings
	defer rs.Close()
	ctx := context.Background()

	if err := rs.start(ctx, "desk", held, frame); err != nil {
		t.Fatal(err)
	}
	if err := rs.start(ctx, "desk", held, frame); !errors.Is(err, errRecording) {
		t.Fatalf("a second start: %v, want %v", err, errRecording)
	}
	if _, err := rs.stop("desk", "agent-b/1"); !errors.Is(err, errNoRecording) {
		t.Fatalf("another holder's end: %v, want %v", err, errNoRecording)
	}
	time.Sleep(700 * time.Millisecond)
	path, err := rs.stop("desk", "agent-a/1")
	if err != nil {
		t.Fatalf("the holder's end: %v", err)
	}
	if b, _ := os.ReadFile(path); len(b) < 12 || string(b[4:8]) != "ftyp" {
		t.Fatalf("%s: no MP4 (%d bytes)", path, len(b))
	}
	os.Remove(path)

	// The sandbox changes hands, or goes: the recording ends by itself,
	// its file with it, and a new one may start.
	for _, change := range []struct {
		name   string
		holder string
		there  bool
	}{{"another holder", "agent-b/1", true}, {"no holder", "", true}, {"deleted", "", false}} {
		set("agent-a/1", true)
		if err := rs.start(ctx, "desk", held, frame); err != nil {
			t.Fatalf("%s: start: %v", change.name, err)
		}
		rs.mu.Lock()
		file := rs.m["desk"].rec.Path
		rs.mu.Unlock()
		set(change.holder, change.there)
		deadline := time.Now().Add(30 * time.Second)
		for {
			rs.mu.Lock()
			left := rs.m["desk"]
			rs.mu.Unlock()
			_, statErr := os.Stat(file)
			if left == nil && errors.Is(statErr, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the recording is still there (%v, file: %v)", change.name, left != nil, statErr)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := rs.stop("desk", change.holder); !errors.Is(err, errNoRecording) {
			t.Errorf("%s: the new holder's end: %v, want %v", change.name, err, errNoRecording)
		}
	}
}
