package wmi

import (
	"context"
	"errors"
	"github.com/hvkube/hvkube/internal/powershell/pstest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/powershell"
)

// record runs f against a Recorder that answers every script and returns
// the one call it made.
func record(t *testing.T, f func(r powershell.Runner) error) pstest.Call {
	t.Helper()
	rec := &pstest.Recorder{Outputs: map[string]string{
		"vm-screenshot":  thumbnailJSON(make([]byte, 2), 1, 1),
		"vm-screen-size": `{"Width":1280,"Height":800}`,
	}}
	if err := f(rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Calls) != 1 {
		t.Fatalf("%d script runs, want 1", len(rec.Calls))
	}
	return rec.Calls[0]
}

// TestGolden keeps every script and the arguments of a typical call in
// testdata; go test -update rewrites them.
func TestGolden(t *testing.T) {
	ctx := context.Background()
	for name, f := range map[string]func(r powershell.Runner) error{
		"screenshot": func(r powershell.Runner) error {
			_, _, err := Screenshot(ctx, r, "hvkube-sbx1", backend.ScreenshotOptions{})
			return err
		},
		"screenshot-width": func(r powershell.Runner) error {
			_, _, err := Screenshot(ctx, r, "hvkube-sbx1", backend.ScreenshotOptions{Format: "jpeg", Quality: 70, Width: 1}) // the recorded thumbnail is 1x1
			return err
		},
		"screen-size": func(r powershell.Runner) error {
			_, _, err := ScreenSize(ctx, r, "hvkube-sbx1")
			return err
		},
		"send-input": func(r powershell.Runner) error {
			// shift+click at (640, 400), two notches down, ctrl+c.
			return SendInput(ctx, r, "hvkube-sbx1", []backend.InputEvent{
				move(640, 400),
				key("shift", true),
				button(backend.ButtonLeft, true),
				button(backend.ButtonLeft, false),
				key("shift", false),
				button(backend.ButtonWheelDown, true),
				button(backend.ButtonWheelDown, false),
				button(backend.ButtonWheelDown, true),
				button(backend.ButtonWheelDown, false),
				key("ctrl", true),
				key("c", true),
				key("c", false),
				key("ctrl", false),
			})
		},
		"type-text": func(r powershell.Runner) error {
			return TypeText(ctx, r, "hvkube-sbx1", "Grüße, 世界 😀")
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := record(t, f)
			if !strings.HasPrefix(c.Script.Text, "param(") {
				t.Errorf("%s does not begin with param()", c.Script.Name)
			}
			pstest.Golden(t, "testdata", name, c.Script, c.Args)
			pstest.CheckArgsInert(t, c.Script, c.Args)
		})
	}
}

func TestScreenSize(t *testing.T) {
	ctx := context.Background()
	rec := &pstest.Recorder{Outputs: map[string]string{"vm-screen-size": `{"Width":1920,"Height":1080}`}}
	w, h, err := ScreenSize(ctx, rec, "hvkube-a")
	if err != nil || w != 1920 || h != 1080 {
		t.Errorf("ScreenSize = %d, %d, %v; want 1920, 1080", w, h, err)
	}
	rec = &pstest.Recorder{Outputs: map[string]string{"vm-screen-size": `{"Width":0,"Height":0}`}}
	if _, _, err := ScreenSize(ctx, rec, "hvkube-a"); err == nil {
		t.Error("a 0x0 screen is no error")
	}
	nf := &powershell.Error{Script: "vm-screen-size", Message: "no Hyper-V VM is named 'hvkube-a'", Category: "ObjectNotFound"}
	rec = &pstest.Recorder{Errors: map[string]error{"vm-screen-size": nf}}
	if _, _, err := ScreenSize(ctx, rec, "hvkube-a"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("missing VM: %v, want not found", err)
	}
}

func TestTypeText(t *testing.T) {
	ctx := context.Background()
	rec := &pstest.Recorder{}
	long := strings.Repeat("ab", 200) + strings.Repeat("😀", 100) // 400 units, then 100 pairs
	if err := TypeText(ctx, rec, "hvkube-a", long); err != nil {
		t.Fatal(err)
	}
	if len(rec.Calls) != 1 {
		t.Fatalf("%d script runs, want 1", len(rec.Calls))
	}
	chunks := rec.Calls[0].Args["Chunks"].([]string)
	if strings.Join(chunks, "") != long {
		t.Error("the chunks do not add up to the text")
	}
	for i, c := range chunks {
		if n := len(utf16.Encode([]rune(c))); n > maxTypeTextUnits || n == 0 {
			t.Errorf("chunk %d has %d UTF-16 units", i, n)
		}
	}
	if len(chunks) != 3 { // 256 | 144 + 56 pairs | 44 pairs
		t.Errorf("%d chunks, want 3", len(chunks))
	}
	if rec.Calls[0].Args["Unicode"] != true {
		t.Error("Unicode is not set for text beyond ASCII")
	}

	rec.Reset()
	if err := TypeText(ctx, rec, "hvkube-a", "plain"); err != nil {
		t.Fatal(err)
	}
	if rec.Calls[0].Args["Unicode"] != false {
		t.Error("Unicode is set for ASCII text")
	}

	rec.Reset()
	if err := TypeText(ctx, rec, "hvkube-a", ""); err != nil || len(rec.Calls) != 0 {
		t.Errorf("empty text: %v, %d runs", err, len(rec.Calls))
	}
	for _, bad := range []string{"a\x00b", "\xff"} {
		if err := TypeText(ctx, rec, "hvkube-a", bad); !errors.Is(err, api.ErrInvalid) || api.FieldOf(err) != "text" {
			t.Errorf("%q: %v, want invalid text", bad, err)
		}
	}
	untypable := &powershell.Error{Script: "vm-type-text", Message: "Msvm_Keyboard.TypeText returned 1", Category: "InvalidArgument", ErrorID: "HvkubeUntypable,Invoke-HvkubeMethod"}
	rec = &pstest.Recorder{Errors: map[string]error{"vm-type-text": untypable}}
	if err := TypeText(ctx, rec, "hvkube-a", "ü"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("untypable text: %v, want invalid", err)
	}
	noUnicode := &powershell.Error{Script: "vm-type-text", Message: "no Unicode", Category: "NotImplemented", ErrorID: "HvkubeUnsupported,<ScriptBlock>"}
	rec = &pstest.Recorder{Errors: map[string]error{"vm-type-text": noUnicode}}
	if err := TypeText(ctx, rec, "hvkube-a", "ü"); !errors.Is(err, api.ErrUnsupported) {
		t.Errorf("keyboard without Unicode: %v, want unsupported", err)
	}
}

func TestSplitUTF16(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want []string
	}{
		{"abcde", 2, []string{"ab", "cd", "e"}},
		{"abcd", 2, []string{"ab", "cd"}},
		{"a😀b", 2, []string{"a", "😀", "b"}},
		{"😀😀", 3, []string{"😀", "😀"}},
		{"ü", 1, []string{"ü"}},
	} {
		if got := splitUTF16(tc.s, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitUTF16(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

// FuzzArgsInert checks that no VM name or text, whatever it holds, changes
// the text of any script: values travel only as arguments.
func FuzzArgsInert(f *testing.F) {
	for _, s := range []string{
		"hvkube-a",
		"it's",
		`"double"`,
		"$(Remove-Item -Recurse C:\\)",
		"${env:PATH}",
		"`$x` `n",
		"a; Stop-Computer",
		"line\nbreak\r\n",
		"@{a=1}|Out-Host",
		"'; exit 1; '",
		"Grüße 😀",
	} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, name, text string) {
		ctx := context.Background()
		rec := &pstest.Recorder{Outputs: map[string]string{
			"vm-screenshot":  thumbnailJSON(make([]byte, 2), 1, 1),
			"vm-screen-size": `{"Width":1280,"Height":800}`,
		}}
		_, _, _ = Screenshot(ctx, rec, name, backend.ScreenshotOptions{})
		_, _, _ = ScreenSize(ctx, rec, name)
		_ = SendInput(ctx, rec, name, []backend.InputEvent{move(1, 2), key("a", true), key("a", false)})
		_ = TypeText(ctx, rec, name, text)
		scripts := map[string]powershell.Script{}
		for _, s := range []powershell.Script{screenshotScript, screenSizeScript, sendInputScript, typeTextScript} {
			scripts[s.Name] = s
		}
		for _, c := range rec.Calls {
			if c.Script != scripts[c.Script.Name] {
				t.Fatalf("%s ran with a script text of its own", c.Script.Name)
			}
			pstest.CheckArgsInert(t, c.Script, c.Args)
		}
	})
}
