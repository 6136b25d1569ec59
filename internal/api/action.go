package api

import (
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// Actions lists the computer-use actions in the input API, workflow steps
// and MCP tools, plus the workflow-only ones (WorkflowActions).
var Actions = []string{
	"screenshot", "left_click", "right_click", "middle_click", "double_click",
	"triple_click", "mouse_move", "left_click_drag", "left_mouse_down",
	"left_mouse_up", "scroll", "type", "key", "hold_key", "cursor_position",
	"wait", "zoom", "exec", "assert",
}

// WorkflowActions are the steps only a workflow has: exec runs a command in
// the guest, assert checks the guest or the screen.
var WorkflowActions = []string{"exec", "assert"}

// Bounds on one action. An API call, an MCP tool call or a workflow step
// holds a request and a sandbox while it runs; longer work is several
// actions. The durations match the computer-use tool's own limit.
const (
	MaxWait       = 100  // seconds a wait or hold_key may last
	MaxTypeText   = 4096 // characters one type action sends (paste longer text through the clipboard)
	MaxKeyText    = 256  // bytes of a key combination
	MaxScrollStep = 100  // scroll_amount
)

// ValidateAction checks one action. width and height, when non-zero, bound
// coordinates to the screen. workflow allows the workflow-only actions.
func ValidateAction(p string, a Action, width, height int, workflow bool) error {
	known := false
	for _, n := range Actions {
		if a.Action == n {
			known = true
		}
	}
	if a.Action == "" {
		return Invalid(join(p, "action"), "required")
	}
	if !known || (!workflow && slices.Contains(WorkflowActions, a.Action)) {
		return Invalid(join(p, "action"), "unknown action %q", a.Action)
	}
	needCoord := false
	switch a.Action {
	case "left_click_drag":
		needCoord = true
		if err := validateCoord(join(p, "start_coordinate"), a.StartCoordinate, width, height, true); err != nil {
			return err
		}
	case "mouse_move":
		needCoord = true
	case "scroll":
		if err := oneOf(join(p, "scroll_direction"), a.ScrollDirection, "up", "down", "left", "right"); err != nil {
			return err
		}
		if a.ScrollAmount < 0 || a.ScrollAmount > MaxScrollStep {
			return Invalid(join(p, "scroll_amount"), "%d is out of range 0..%d", a.ScrollAmount, MaxScrollStep)
		}
	case "type", "key", "hold_key":
		if a.Text == "" {
			return Invalid(join(p, "text"), "required for %s", a.Action)
		}
		if a.Action == "type" && strings.ContainsRune(a.Text, 0) {
			return Invalid(join(p, "text"), "contains a NUL byte")
		}
		if n := utf8.RuneCountInString(a.Text); a.Action == "type" && n > MaxTypeText {
			return Invalid(join(p, "text"), "%d characters: a type action sends at most %d (set longer text through the clipboard)", n, MaxTypeText)
		}
		if a.Action != "type" && len(a.Text) > MaxKeyText {
			return Invalid(join(p, "text"), "%d bytes: a key combination is at most %d", len(a.Text), MaxKeyText)
		}
	case "zoom":
		if len(a.Region) != 4 {
			return Invalid(join(p, "region"), "want [x0, y0, x1, y1]")
		}
		if a.Region[0] < 0 || a.Region[1] < 0 || a.Region[2] <= a.Region[0] || a.Region[3] <= a.Region[1] {
			return Invalid(join(p, "region"), "%v is not a rectangle [x0, y0, x1, y1] with x1 > x0 and y1 > y0", a.Region)
		}
		if width > 0 && (a.Region[2] > width || a.Region[3] > height) {
			return Invalid(join(p, "region"), "%v is outside the %dx%d screen", a.Region, width, height)
		}
	case "exec":
		if len(a.Command) == 0 || strings.TrimSpace(a.Command[0]) == "" {
			return Invalid(join(p, "command"), "required for exec: the program and its arguments, as a list")
		}
	case "assert":
		forms := 0
		if a.FileContains != nil {
			forms++
			if fp := a.FileContains.Path; fp == "" || !strings.HasPrefix(fp, "/") && !winAbs.MatchString(fp) {
				return Invalid(join(p, "fileContains.path"), "required: an absolute path in the guest (/home/agent/x, or C:\\Users\\x in a Windows guest)")
			}
		}
		if len(a.Command) > 0 {
			forms++
			if strings.TrimSpace(a.Command[0]) == "" {
				return Invalid(join(p, "command"), "the program is empty")
			}
		}
		if a.ScreenNotBlank {
			forms++
		}
		if forms != 1 {
			return Invalid(join(p, "action"), "an assert needs exactly one of fileContains, command (with exitCode) or screenNotBlank")
		}
		if a.ExitCode != nil && len(a.Command) == 0 {
			return Invalid(join(p, "exitCode"), "only goes with command")
		}
	}
	if err := validateArgv(join(p, "command"), a.Command); err != nil {
		return err
	}
	if a.Duration < 0 || a.Duration > MaxWait || math.IsNaN(a.Duration) {
		return Invalid(join(p, "duration"), "%g seconds: a %s lasts at most %d seconds", a.Duration, a.Action, MaxWait)
	}
	if a.Action == "wait" && a.Duration == 0 {
		return Invalid(join(p, "duration"), "required for wait")
	}
	return validateCoord(join(p, "coordinate"), a.Coordinate, width, height, needCoord)
}

func validateCoord(field string, c []int, width, height int, required bool) error {
	if c == nil {
		if required {
			return Invalid(field, "required: [x, y]")
		}
		return nil
	}
	if len(c) != 2 {
		return Invalid(field, "want [x, y], got %d numbers", len(c))
	}
	if c[0] < 0 || c[1] < 0 {
		return Invalid(field, "%v is off screen", c)
	}
	if width > 0 && (c[0] >= width || c[1] >= height) {
		return Invalid(field, "%v is off the %dx%d screen", c, width, height)
	}
	return nil
}
