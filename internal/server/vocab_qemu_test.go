//go:build linux

package server

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestVocabulariesOnQEMU sends OpenAI's and Gemini's actions through the
// input API to a real guest: an OpenAI click with keys ["CTRL"] reaches an
// X client as a button press with Control held, and Gemini's (999, 999)
// puts the pointer on the screen's last pixel.
func TestVocabulariesOnQEMU(t *testing.T) {
	d := startQEMUDesk(t)
	guest := func(t *testing.T, script string) string {
		t.Helper()
		var res ExecResponse
		body := fmt.Sprintf(`{"command":"sh","args":["-c",%q],"env":["DISPLAY=:0","XAUTHORITY=/home/agent/.Xauthority"],"timeoutSeconds":60}`, script)
		d.call(t, "POST", "/api/v1/sandboxes/desk/exec", body, &res)
		if res.ExitCode != 0 {
			t.Fatalf("%s: exit %d: %s %s", script, res.ExitCode, res.Stdout, res.Stderr)
		}
		return res.Stdout
	}
	input := func(t *testing.T, body string) InputResponse {
		t.Helper()
		var out InputResponse
		d.call(t, "POST", "/api/v1/sandboxes/desk/input", body, &out)
		return out
	}

	t.Run("OpenAICtrlClick", func(t *testing.T) {
		// xev reports the X events of a window of its own; its log is
		// read back once the click is in.
		guest(t, `rm -f /tmp/xev.log; setsid timeout 120 xev -geometry 400x300+200+150 -name hvkube-xev </dev/null >/tmp/xev.log 2>&1 &
			xdotool search --sync --name '^hvkube-xev$' windowraise >/dev/null`)
		geo := guest(t, `xdotool search --sync --name '^hvkube-xev$' getwindowgeometry --shell | head -5`)
		vals := map[string]int{}
		for _, line := range strings.Fields(geo) {
			k, v, _ := strings.Cut(line, "=")
			vals[k], _ = strconv.Atoi(v)
		}
		if vals["WIDTH"] == 0 {
			t.Fatalf("xev's window: %q", geo)
		}
		x, y := vals["X"]+vals["WIDTH"]/2, vals["Y"]+vals["HEIGHT"]/2
		input(t, fmt.Sprintf(`{"type":"click","button":"left","x":%d,"y":%d,"keys":["CTRL"]}`, x, y))
		// And one without, to tell the two apart.
		input(t, fmt.Sprintf(`{"type":"click","button":"left","x":%d,"y":%d}`, x, y+10))

		press := regexp.MustCompile(`ButtonPress event[^\n]*\n[^\n]*\n\s*state (0x[0-9a-f]+), button (\d+)`)
		var got [][]string
		var log string
		for deadline := time.Now().Add(20 * time.Second); ; {
			log = guest(t, `cat /tmp/xev.log`)
			got = press.FindAllStringSubmatch(log, -1)
			if len(got) >= 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		guest(t, `pkill -x xev || true`)
		if len(got) < 2 {
			t.Fatalf("xev saw %d button presses: %q\n%s", len(got), got, log)
		}
		const controlMask = 0x4
		first, _ := strconv.ParseUint(got[0][1], 0, 32)
		second, _ := strconv.ParseUint(got[1][1], 0, 32)
		if got[0][2] != "1" || first&controlMask == 0 {
			t.Errorf("the ctrl+click arrived as button %s with state %s: Control is not held", got[0][2], got[0][1])
		}
		if got[1][2] != "1" || second&controlMask != 0 {
			t.Errorf("the plain click arrived as button %s with state %s: Control is still held", got[1][2], got[1][1])
		}
	})

	t.Run("GeminiCorner", func(t *testing.T) {
		var w, h int
		if _, err := fmt.Sscan(guest(t, `xdotool getdisplaygeometry`), &w, &h); err != nil || w == 0 {
			t.Fatalf("screen size: %v", err)
		}
		input(t, `{"name":"click","args":{"x":999,"y":999,"intent":"the corner"}}`)
		if got := input(t, `{"action":"cursor_position"}`).Coordinate; fmt.Sprint(got) != fmt.Sprint([]int{w - 1, h - 1}) {
			t.Errorf("after Gemini's (999, 999) the pointer is at %v, want the last pixel [%d %d]", got, w-1, h-1)
		}
		if x, y := d.cursor(t); x != w-1 || y != h-1 {
			t.Errorf("xdotool puts the pointer at %d,%d, want %d,%d", x, y, w-1, h-1)
		}
		input(t, `{"type":"function_call","name":"move","arguments":{"x":0,"y":0}}`)
		if got := input(t, `{"action":"cursor_position"}`).Coordinate; fmt.Sprint(got) != "[0 0]" {
			t.Errorf("after Gemini's (0, 0) the pointer is at %v", got)
		}
	})
}
