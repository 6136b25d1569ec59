package wmi

import (
	"context"
	"errors"
	"github.com/hvkube/hvkube/internal/powershell/pstest"
	"reflect"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/powershell"
)

func move(x, y int) backend.InputEvent {
	return backend.InputEvent{Kind: backend.EventMove, X: x, Y: y}
}

func button(b string, down bool) backend.InputEvent {
	return backend.InputEvent{Kind: backend.EventButton, Button: b, Down: down}
}

func key(k string, down bool) backend.InputEvent {
	return backend.InputEvent{Kind: backend.EventKey, Key: k, Down: down}
}

func TestOps(t *testing.T) {
	evs := []backend.InputEvent{
		move(10, 20),
		button(backend.ButtonLeft, true),
		button(backend.ButtonLeft, false),
		button(backend.ButtonRight, true),
		button(backend.ButtonMiddle, false),
		button(backend.ButtonBack, true),
		button(backend.ButtonForward, false),
		button(backend.ButtonWheelUp, true),
		button(backend.ButtonWheelUp, false),
		button(backend.ButtonWheelDown, true),
		button(backend.ButtonWheelDown, false),
		key("ctrl", true),
		key("a", true),
		key("a", false),
		key("ctrl", false),
		key("ret", true),
	}
	got, err := opsOf(evs, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []op{
		{I: 0, Op: "move", X: 10, Y: 20},
		{I: 1, Op: "button", Code: 1, Down: true},
		{I: 2, Op: "button", Code: 1},
		{I: 3, Op: "button", Code: 2, Down: true},
		{I: 4, Op: "button", Code: 3},
		{I: 5, Op: "button", Code: 4, Down: true},
		{I: 6, Op: "button", Code: 5},
		{I: 7, Op: "scroll", Delta: 120},
		{I: 9, Op: "scroll", Delta: -120},
		{I: 11, Op: "key", Code: 0xA2, Down: true},
		{I: 12, Op: "key", Code: 0x41, Down: true},
		{I: 13, Op: "key", Code: 0x41},
		{I: 14, Op: "key", Code: 0xA2},
		{I: 15, Op: "key", Code: 0x0D, Down: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ops\n got %+v\nwant %+v", got, want)
	}
}

func TestCheckEvents(t *testing.T) {
	for _, tc := range []struct {
		name  string
		evs   []backend.InputEvent
		w, h  int
		field string // api.ErrInvalid naming this field
		unsup bool   // api.ErrUnsupported
	}{
		{name: "ok", evs: []backend.InputEvent{move(0, 0), move(1279, 799)}, w: 1280, h: 800},
		{name: "ok without size", evs: []backend.InputEvent{move(5000, 5000)}},
		{name: "off screen right", evs: []backend.InputEvent{move(0, 0), move(1280, 0)}, w: 1280, h: 800, field: "events[1]"},
		{name: "off screen bottom", evs: []backend.InputEvent{move(0, 800)}, w: 1280, h: 800, field: "events[0]"},
		{name: "negative", evs: []backend.InputEvent{move(-1, 0)}, field: "events[0]"},
		{name: "negative with size", evs: []backend.InputEvent{move(3, -1)}, w: 1280, h: 800, field: "events[0]"},
		{name: "kind", evs: []backend.InputEvent{move(0, 0), {Kind: "touch"}}, field: "events[1].kind"},
		{name: "button", evs: []backend.InputEvent{button("thumb", true)}, field: "events[0].button"},
		{name: "key", evs: []backend.InputEvent{key("a", true), key("Return", true)}, field: "events[1].key"},
		{name: "empty key", evs: []backend.InputEvent{key("", true)}, field: "events[0].key"},
		{name: "wheel left", evs: []backend.InputEvent{button(backend.ButtonWheelLeft, true)}, unsup: true},
		{name: "wheel right release", evs: []backend.InputEvent{button(backend.ButtonWheelRight, false)}, unsup: true},
		{name: "key without code", evs: []backend.InputEvent{key("henkan", true)}, unsup: true},
	} {
		err := CheckEvents(tc.evs, tc.w, tc.h)
		switch {
		case tc.field != "":
			if !errors.Is(err, api.ErrInvalid) || api.FieldOf(err) != tc.field {
				t.Errorf("%s: error %v, want invalid %s", tc.name, err, tc.field)
			}
		case tc.unsup:
			if !errors.Is(err, api.ErrUnsupported) {
				t.Errorf("%s: error %v, want unsupported", tc.name, err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestSendInput(t *testing.T) {
	ctx := context.Background()
	rec := &pstest.Recorder{}
	evs := []backend.InputEvent{move(100, 200), button(backend.ButtonLeft, true), button(backend.ButtonLeft, false)}
	if err := SendInput(ctx, rec, "hvkube-a", evs); err != nil {
		t.Fatal(err)
	}
	if len(rec.Calls) != 1 {
		t.Fatalf("%d script runs for one call, want 1", len(rec.Calls))
	}
	c := rec.Calls[0]
	if c.Script.Name != "vm-send-input" || c.Args["VMName"] != "hvkube-a" {
		t.Errorf("ran %s with %v", c.Script.Name, c.Args)
	}
	if ops, _ := c.Args["Ops"].([]op); len(ops) != 3 {
		t.Errorf("Ops %v, want 3", c.Args["Ops"])
	}

	// Nothing to deliver: no script run.
	rec.Reset()
	if err := SendInput(ctx, rec, "hvkube-a", nil); err != nil {
		t.Fatal(err)
	}
	if err := SendInput(ctx, rec, "hvkube-a", []backend.InputEvent{button(backend.ButtonWheelDown, false)}); err != nil {
		t.Fatal(err)
	}
	if len(rec.Calls) != 0 {
		t.Errorf("%d script runs for no operation", len(rec.Calls))
	}

	// Bad events and names: no script run.
	if err := SendInput(ctx, rec, "hvkube-a", []backend.InputEvent{key("nosuch", true)}); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("bad key: %v", err)
	}
	if err := SendInput(ctx, rec, " ", evs); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("empty name: %v", err)
	}
	if len(rec.Calls) != 0 {
		t.Errorf("%d script runs for bad input", len(rec.Calls))
	}
}

func TestErrorCategories(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		want error
	}{
		{&powershell.Error{Script: "vm-send-input", Message: "no Hyper-V VM is named 'x'", Category: "ObjectNotFound", ErrorID: "HvkubeNotFound,Get-HvkubeVM"}, api.ErrNotFound},
		{&powershell.Error{Script: "vm-send-input", Message: "events[0]: [5000, 0] is outside the 1280x800 screen", Category: "InvalidArgument", ErrorID: "HvkubeOffScreen"}, api.ErrInvalid},
		{&powershell.Error{Script: "vm-send-input", Message: "no Unicode", Category: "NotImplemented", ErrorID: "HvkubeUnsupported"}, api.ErrUnsupported},
	} {
		rec := &pstest.Recorder{Errors: map[string]error{"vm-send-input": tc.err}}
		err := SendInput(ctx, rec, "x", []backend.InputEvent{move(5000, 0)})
		if !errors.Is(err, tc.want) {
			t.Errorf("%v: not %v", err, tc.want)
		}
	}
}
