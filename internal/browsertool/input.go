package browsertool

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
)

// input is a call's input object, read field by field so that each error
// names its field.
type input struct {
	raw map[string]json.RawMessage
}

func (in input) has(f string) bool {
	v, ok := in.raw[f]
	return ok && string(v) != "null"
}

// str reads a string field of at most n characters.
func (in input) str(f string, required bool, n int) (string, error) {
	if !in.has(f) {
		if required {
			return "", fmt.Errorf("%s: required", f)
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(in.raw[f], &s); err != nil {
		return "", fmt.Errorf("%s: not a string", f)
	}
	if len([]rune(s)) > n {
		return "", fmt.Errorf("%s: %d characters: at most %d", f, len([]rune(s)), n)
	}
	if required && s == "" {
		return "", fmt.Errorf("%s: required", f)
	}
	return s, nil
}

// intIn reads an integer field in lo..hi, def when absent.
func (in input) intIn(f string, def, lo, hi int) (int, error) {
	if !in.has(f) {
		return def, nil
	}
	var v float64
	if err := json.Unmarshal(in.raw[f], &v); err != nil || v != math.Trunc(v) {
		return 0, fmt.Errorf("%s: not an integer", f)
	}
	if v < float64(lo) || v > float64(hi) {
		return 0, fmt.Errorf("%s: %g is out of range %d..%d", f, v, lo, hi)
	}
	return int(v), nil
}

// ints reads an array of n integers.
func (in input) ints(f string, n int) ([]int, error) {
	if !in.has(f) {
		return nil, fmt.Errorf("%s: required", f)
	}
	var v []float64
	if err := json.Unmarshal(in.raw[f], &v); err != nil || len(v) != n {
		return nil, fmt.Errorf("%s: not an array of %d integers", f, n)
	}
	out := make([]int, n)
	for i, x := range v {
		if x != math.Trunc(x) || math.Abs(x) > 1e6 {
			return nil, fmt.Errorf("%s: not an array of %d integers", f, n)
		}
		out[i] = int(x)
	}
	return out, nil
}

// seconds reads a duration in seconds, 0..30.
func (in input) seconds(f string) (time.Duration, error) {
	if !in.has(f) {
		return 0, fmt.Errorf("%s: required", f)
	}
	var v float64
	if err := json.Unmarshal(in.raw[f], &v); err != nil {
		return 0, fmt.Errorf("%s: not a number of seconds", f)
	}
	if v < 0 || v > maxWait || math.IsNaN(v) {
		return 0, fmt.Errorf("%s: %g is out of range 0..%g seconds", f, v, maxWait)
	}
	return time.Duration(v * float64(time.Second)), nil
}

// target is a Target field: {"type": "coordinate", "x", "y"} or
// {"type": "ref", "ref"}.
type target struct {
	Type string   `json:"type"`
	X    *float64 `json:"x"`
	Y    *float64 `json:"y"`
	Ref  string   `json:"ref"`
}

func (in input) target(f string) (target, error) {
	if !in.has(f) {
		return target{}, fmt.Errorf("%s: required", f)
	}
	var t target
	if err := json.Unmarshal(in.raw[f], &t); err != nil {
		return target{}, fmt.Errorf("%s: not a target ({\"type\": \"coordinate\", \"x\", \"y\"} or {\"type\": \"ref\", \"ref\"})", f)
	}
	switch t.Type {
	case "coordinate":
		if t.X == nil || t.Y == nil || *t.X != math.Trunc(*t.X) || *t.Y != math.Trunc(*t.Y) {
			return target{}, fmt.Errorf("%s: a coordinate target needs integer x and y", f)
		}
	case "ref":
		if t.Ref == "" || len(t.Ref) > 64 {
			return target{}, fmt.Errorf("%s: a ref target needs a ref (ref_N, as read_page and find give them)", f)
		}
	default:
		return target{}, fmt.Errorf("%s.type: %q is not coordinate or ref", f, t.Type)
	}
	return t, nil
}

// modifiers reads a click's modifiers ("shift", "ctrl+shift", …) as
// DevTools' bit mask.
func (in input) modifiers() (int, error) {
	s, err := in.str("modifiers", false, 64)
	if err != nil || s == "" {
		return 0, err
	}
	m := 0
	for _, part := range strings.Split(s, "+") {
		bit, ok := modifierBits[strings.ToLower(strings.TrimSpace(part))]
		if !ok {
			return 0, fmt.Errorf("modifiers: %q is not a modifier (shift, ctrl, alt, cmd, joined by +)", part)
		}
		m |= bit
	}
	return m, nil
}

// DevTools' modifier bits.
const (
	modAlt   = 1
	modCtrl  = 2
	modMeta  = 4
	modShift = 8
)

var modifierBits = map[string]int{
	"alt": modAlt, "option": modAlt,
	"ctrl": modCtrl, "control": modCtrl,
	"meta": modMeta, "cmd": modMeta, "command": modMeta, "super": modMeta, "win": modMeta,
	"shift": modShift,
}
