package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Actions lists the actions of Anthropic's computer tool that the input
// API, workflow steps and MCP tools take, plus the workflow-only ones
// (WorkflowActions).
var Actions = []string{
	"screenshot", "left_click", "right_click", "middle_click", "double_click",
	"triple_click", "mouse_move", "left_click_drag", "left_mouse_down",
	"left_mouse_up", "scroll", "type", "key", "hold_key", "cursor_position",
	"wait", "zoom", "exec", "assert",
}

// WorkflowActions are the steps only a workflow has: exec runs a command in
// the guest, assert checks the guest or the screen.
var WorkflowActions = []string{"exec", "assert"}

// OpenAIActions are the types of OpenAI's computer actions.
var OpenAIActions = []string{"click", "double_click", "drag", "keypress", "move", "screenshot", "scroll", "type", "wait"}

// Bounds on one action. An API call, an MCP tool call or a workflow step
// holds a request and a sandbox while it runs; longer work is several
// actions. The durations match the computer-use tool's own limit.
const (
	MaxWait       = 100  // seconds a wait or hold_key may last
	MaxTypeText   = 4096 // characters one type action sends (paste longer text through the clipboard)
	MaxKeyText    = 256  // bytes of a key combination
	MaxScrollStep = 100  // scroll_amount
	MaxPath       = 1000 // points of an OpenAI drag
	// MaxBatch bounds the actions of a batch. A batch as a whole also
	// waits at most MaxWait seconds and types at most MaxTypeText
	// characters.
	MaxBatch = 100
	// GeminiGrid is the side of Gemini's coordinate grid: x and y run
	// from 0 to GeminiGrid-1 whatever the screen's size.
	GeminiGrid = 1000
)

// Forms of an Action: the vocabulary it speaks, or a batch.
const (
	FormAnthropic = "anthropic"
	FormOpenAI    = "openai"
	FormGemini    = "gemini"
	FormBatch     = "batch"
)

// PathPoint is a point of an OpenAI drag's path.
type PathPoint struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// GeminiArgs are the arguments of a Gemini computer-use function call, all
// of its functions' in one: coordinates are on the 0-999 grid.
type GeminiArgs struct {
	X *int `json:"x,omitempty"`
	Y *int `json:"y,omitempty"`
	// drag_and_drop, Gemini 3.5: from (start_x, start_y) to (end_x,
	// end_y); earlier: from (x, y) to (destination_x, destination_y).
	StartX       *int `json:"start_x,omitempty"`
	StartY       *int `json:"start_y,omitempty"`
	EndX         *int `json:"end_x,omitempty"`
	EndY         *int `json:"end_y,omitempty"`
	DestinationX *int `json:"destination_x,omitempty"`
	DestinationY *int `json:"destination_y,omitempty"`

	Text              string `json:"text,omitempty"`
	PressEnter        *bool  `json:"press_enter,omitempty"`
	ClearBeforeTyping *bool  `json:"clear_before_typing,omitempty"`

	Direction string `json:"direction,omitempty"`
	// Magnitude is scroll_at's distance on the grid (default 800),
	// MagnitudeInPixels scroll's in pixels (default 300).
	Magnitude         *int `json:"magnitude,omitempty"`
	MagnitudeInPixels *int `json:"magnitude_in_pixels,omitempty"`

	Key  string      `json:"key,omitempty"`
	Keys *GeminiKeys `json:"keys,omitempty"`
	URL  string      `json:"url,omitempty"`
	// Seconds is how long a wait lasts (default 1).
	Seconds *float64 `json:"seconds,omitempty"`

	Intent string `json:"intent,omitempty"`
	// SafetyDecision is what Gemini's safety check said of the action.
	// A caller that sends an action marked require_confirmation has
	// asked its user; hvkube runs what it is sent.
	SafetyDecision *SafetyDecision `json:"safety_decision,omitempty"`
}

// SafetyDecision is Gemini's safety_decision argument.
type SafetyDecision struct {
	Decision    string `json:"decision,omitempty"`
	Explanation string `json:"explanation,omitempty"`
}

// GeminiKeys are the keys of Gemini's hotkey (a list: ["Control", "C"])
// or key_combination (one string: "control+c"); either form is taken by
// both, and written back as it came.
type GeminiKeys struct {
	List []string
	// Combo is the keys as one "+"-joined string, when they came so.
	Combo string
}

// UnmarshalJSON takes a list of key names or one combination.
func (k *GeminiKeys) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*k = GeminiKeys{Combo: s}
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return errors.New("want a list of key names or a combination such as control+c")
	}
	*k = GeminiKeys{List: l}
	return nil
}

// MarshalJSON writes the keys in the form they came in.
func (k GeminiKeys) MarshalJSON() ([]byte, error) {
	if k.List == nil {
		return json.Marshal(k.Combo)
	}
	return json.Marshal(k.List)
}

// Names returns the key names: the list, or the combination as one.
func (k *GeminiKeys) Names() []string {
	if k == nil {
		return nil
	}
	if k.List == nil {
		return []string{k.Combo}
	}
	return k.List
}

// geminiFunc is what a Gemini computer-use function takes.
type geminiFunc struct {
	args     []string // besides intent and safety_decision
	required []string
	// refused, when set, is why hvkube does not run the function.
	refused string
}

var (
	geminiPoint = geminiFunc{args: []string{"x", "y"}, required: []string{"x", "y"}}
	geminiKey   = geminiFunc{args: []string{"key"}, required: []string{"key"}}
	geminiNone  = geminiFunc{}
	noBrowser   = "hvkube has no browser API in the action layer yet"
)

// geminiFuncs are the functions of Gemini's computer use hvkube knows:
// Gemini 3.5's, and those of the earlier computer-use models (click_at,
// type_text_at, …). Those marked refused are answered with ErrUnsupported.
var geminiFuncs = map[string]geminiFunc{
	// Gemini 3.5, browser and desktop environments.
	"click":           geminiPoint,
	"double_click":    geminiPoint,
	"triple_click":    geminiPoint,
	"middle_click":    geminiPoint,
	"right_click":     geminiPoint,
	"mouse_down":      geminiPoint,
	"mouse_up":        geminiPoint,
	"move":            geminiPoint,
	"type":            {args: []string{"text", "press_enter"}},
	"drag_and_drop":   {args: []string{"start_x", "start_y", "end_x", "end_y", "x", "y", "destination_x", "destination_y"}},
	"wait":            {args: []string{"seconds"}},
	"press_key":       geminiKey,
	"key_down":        geminiKey,
	"key_up":          geminiKey,
	"hotkey":          {args: []string{"keys"}, required: []string{"keys"}},
	"take_screenshot": geminiNone,
	"scroll":          {args: []string{"x", "y", "direction", "magnitude_in_pixels"}, required: []string{"x", "y", "direction"}},
	"go_back":         geminiNone,
	"go_forward":      geminiNone,
	"navigate":        {args: []string{"url"}, required: []string{"url"}},
	// The earlier computer-use models (Gemini 2.5 and 3 Flash).
	"click_at":        geminiPoint,
	"hover_at":        geminiPoint,
	"type_text_at":    {args: []string{"x", "y", "text", "press_enter", "clear_before_typing"}, required: []string{"x", "y"}},
	"key_combination": {args: []string{"keys"}, required: []string{"keys"}},
	"scroll_document": {args: []string{"direction"}, required: []string{"direction"}},
	"scroll_at":       {args: []string{"x", "y", "direction", "magnitude"}, required: []string{"x", "y", "direction"}},
	"wait_5_seconds":  geminiNone,
	"search":          {refused: noBrowser + ", and which search page the browser opens is its own setting: use navigate with the search page's address"},
	"open_web_browser": {refused: "the action layer does not start programs: start the browser with exec (a workflow step, " +
		"or POST /api/v1/sandboxes/NAME/exec), or use a browser-desktop sandbox, where it runs"},
	// Gemini 3.5's mobile environment.
	"open_app":   {refused: "an action of Gemini's mobile environment: hvkube's sandboxes are desktops"},
	"list_apps":  {refused: "an action of Gemini's mobile environment: hvkube's sandboxes are desktops"},
	"long_press": {refused: "an action of Gemini's mobile environment: hvkube's sandboxes are desktops"},
}

// GeminiActions lists the Gemini function names hvkube knows, sorted; the
// ones it refuses (GeminiRefused) among them.
func GeminiActions() []string {
	names := make([]string, 0, len(geminiFuncs))
	for n := range geminiFuncs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// GeminiRefused says why hvkube does not run the Gemini function name, or
// "" if it does (or does not know it).
func GeminiRefused(name string) string { return geminiFuncs[name].refused }

// Form tells which vocabulary a speaks (FormAnthropic, FormOpenAI,
// FormGemini), or FormBatch. An action that names none is taken as
// Anthropic's, whose validation then asks for action.
func (a Action) Form() string {
	switch {
	case a.Actions != nil:
		return FormBatch
	case a.Action != "":
		return FormAnthropic
	case a.Type == "function_call" || a.Name != "":
		return FormGemini
	case a.Type != "":
		return FormOpenAI
	}
	return FormAnthropic
}

// FunctionArgs returns a Gemini call's arguments and the field they came
// in (args, or the Interactions API's arguments).
func (a Action) FunctionArgs() (GeminiArgs, string) {
	if a.Type == "function_call" || a.Arguments != nil {
		if a.Arguments == nil {
			return GeminiArgs{}, "arguments"
		}
		return *a.Arguments, "arguments"
	}
	if a.Args == nil {
		return GeminiArgs{}, "args"
	}
	return *a.Args, "args"
}

// Intents returns why the action, or each action of a batch, is taken, in
// order: hvkube's intent and Gemini's argument of that name.
func (a Action) Intents() []string {
	var out []string
	if s := strings.TrimSpace(a.Intent); s != "" {
		out = append(out, s)
	}
	if a.Form() == FormGemini {
		if args, _ := a.FunctionArgs(); strings.TrimSpace(args.Intent) != "" {
			out = append(out, strings.TrimSpace(args.Intent))
		}
	}
	for _, e := range a.Actions {
		out = append(out, e.Intents()...)
	}
	return out
}

// Describe names the action for logs and errors: "left_click", "OpenAI
// click", "Gemini click_at", "a batch of 3 actions".
func (a Action) Describe() string {
	switch a.Form() {
	case FormBatch:
		if len(a.Actions) == 1 {
			return "a batch of 1 action"
		}
		return fmt.Sprintf("a batch of %d actions", len(a.Actions))
	case FormOpenAI:
		return "OpenAI " + a.Type
	case FormGemini:
		return "Gemini " + a.Name
	}
	return a.Action
}

// DecodeAction reads one action (or batch) from a JSON body in any of the
// vocabularies Action takes. Unknown fields, wrong types and duplicate
// keys fail naming their path ("args.x", "actions[1].keys"). An OpenAI
// computer_call with one action ({"type": "computer_call", "action":
// {…}}) is read as a batch of that one. It does not validate: see
// ValidateAction.
func DecodeAction(b []byte) (Action, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return Action{}, Invalid("", "empty body: expected a JSON object")
	}
	v, err := parseJSON(b)
	var fe *FieldError
	if errors.As(err, &fe) {
		return Action{}, err
	}
	if err != nil {
		return Action{}, Invalid("", "invalid JSON: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return Action{}, Invalid("", "expected a JSON object, got %s", describe(v))
	}
	if one, ok := m["action"].(map[string]any); ok {
		if _, both := m["actions"]; both {
			return Action{}, Invalid("action", "a computer_call carries action or actions, not both")
		}
		m["actions"] = []any{one}
		delete(m, "action")
	}
	// A function hvkube refuses is refused as such, before the
	// arguments it came with (which Action may not know) are read.
	if err := refusedCall("", m); err != nil {
		return Action{}, err
	}
	if err := checkValue("", m, reflect.TypeOf(Action{})); err != nil {
		return Action{}, err
	}
	norm, err := json.Marshal(m)
	if err != nil {
		return Action{}, Invalid("", "%v", err)
	}
	var a Action
	if err := json.Unmarshal(norm, &a); err != nil {
		return Action{}, Invalid("", "%v", err)
	}
	return a, nil
}

// refusedCall finds a Gemini function call hvkube refuses in the decoded
// action m at path p, or in its batch.
func refusedCall(p string, m map[string]any) error {
	if name, ok := m["name"].(string); ok {
		if why := GeminiRefused(name); why != "" {
			return &FieldError{Field: join(p, "name"), Detail: fmt.Sprintf("%s is not supported: %s", name, why), Category: ErrUnsupported}
		}
	}
	acts, _ := m["actions"].([]any)
	for i, e := range acts {
		if em, ok := e.(map[string]any); ok {
			if err := refusedCall(join(p, fmt.Sprintf("actions[%d]", i)), em); err != nil {
				return err
			}
		}
	}
	return nil
}

// ValidateAction checks one action, or a batch, in any vocabulary. width
// and height, when non-zero, bound pixel coordinates to the screen
// (Gemini's are on their grid whatever the screen). workflow allows the
// workflow-only actions. A Gemini function hvkube does not run fails with
// a FieldError of category ErrUnsupported.
func ValidateAction(p string, a Action, width, height int, workflow bool) error {
	return validateAction(p, a, width, height, workflow, false)
}

func validateAction(p string, a Action, width, height int, workflow, inBatch bool) error {
	named := 0
	for _, set := range []bool{a.Action != "", a.Type != "" && a.Type != "computer_call" && a.Type != "function_call", a.Name != "", a.Actions != nil} {
		if set {
			named++
		}
	}
	if named > 1 {
		return Invalid(join(p, "action"), "names an action in two vocabularies: an action is Anthropic's (action), "+
			"OpenAI's (type), Gemini's (name), or a batch (actions), one of them")
	}
	if a.Type == "computer_call" && a.Actions == nil {
		return Invalid(join(p, "actions"), "required: a computer_call carries its actions (or one action)")
	}
	form := a.Form()
	if err := onlyFields(p, a, form); err != nil {
		return err
	}
	switch form {
	case FormBatch:
		if inBatch {
			return Invalid(join(p, "actions"), "a batch holds single actions, not batches")
		}
		return validateBatch(p, a, width, height)
	case FormOpenAI:
		return validateOpenAI(p, a, width, height)
	case FormGemini:
		return validateGemini(p, a)
	}
	return validateAnthropic(p, a, width, height, workflow && !inBatch)
}

// formFields are the fields each form takes.
var formFields = map[string][]string{
	FormAnthropic: {"action", "coordinate", "start_coordinate", "text", "scroll_direction", "scroll_amount", "duration",
		"region", "command", "fileContains", "exitCode", "screenNotBlank", "intent", "keys"},
	FormOpenAI: {"type", "x", "y", "button", "keys", "path", "scroll_x", "scroll_y", "text", "ms", "intent"},
	FormBatch:  {"actions", "type", "call_id", "id", "status", "pending_safety_checks", "intent"},
	FormGemini: {"name", "args", "arguments", "id", "type", "intent"},
}

var formNames = map[string]string{
	FormAnthropic: "Anthropic's actions (named by action)",
	FormOpenAI:    "OpenAI's actions (named by type)",
	FormBatch:     "a batch (actions)",
	FormGemini:    "Gemini's function calls (name and args)",
}

// onlyFields fails on the first field a has that its form does not take.
func onlyFields(p string, a Action, form string) error {
	for _, f := range setFields(a) {
		if !slices.Contains(formFields[form], f) {
			return Invalid(join(p, f), "not a field of %s", formNames[form])
		}
	}
	return nil
}

// setFields lists the JSON names of v's fields that are set, in order.
func setFields(v any) []string {
	rv := reflect.ValueOf(v)
	var out []string
	for i := 0; i < rv.NumField(); i++ {
		if rv.Field(i).IsZero() {
			continue
		}
		name, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}

func validateAnthropic(p string, a Action, width, height int, workflow bool) error {
	if a.Action == "" {
		return Invalid(join(p, "action"), "required: an action of Anthropic's computer tool (action), OpenAI's (type), "+
			"a Gemini function call (name), or a batch (actions)")
	}
	if !slices.Contains(Actions, a.Action) || (!workflow && slices.Contains(WorkflowActions, a.Action)) {
		hint := ""
		if _, gemini := geminiFuncs[a.Action]; gemini || slices.Contains(OpenAIActions, a.Action) {
			hint = " (OpenAI's actions are named by type, Gemini's by name: see docs/actions.md)"
		}
		return Invalid(join(p, "action"), "unknown action %q%s", a.Action, hint)
	}
	pointer := slices.Contains([]string{"left_click", "right_click", "middle_click", "double_click", "triple_click",
		"mouse_move", "left_click_drag", "scroll"}, a.Action)
	if a.Keys != nil && !pointer {
		return Invalid(join(p, "keys"), "%s holds no modifier keys: keys go with the clicks, mouse_move, left_click_drag and scroll", a.Action)
	}
	if err := validateKeyNames(join(p, "keys"), a.Keys, false); err != nil {
		return err
	}
	if a.Text != "" && !pointer && !slices.Contains([]string{"type", "key", "hold_key"}, a.Action) {
		return Invalid(join(p, "text"), "%s takes no text", a.Action)
	}
	if pointer && len(a.Text) > MaxKeyText {
		return Invalid(join(p, "text"), "%d bytes: modifier keys are at most %d", len(a.Text), MaxKeyText)
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
		if a.Action == "type" {
			if err := validateTyped(join(p, "text"), a.Text); err != nil {
				return err
			}
		} else if len(a.Text) > MaxKeyText {
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
	if err := validateSeconds(join(p, "duration"), a.Duration, a.Action); err != nil {
		return err
	}
	if a.Action == "wait" && a.Duration == 0 {
		return Invalid(join(p, "duration"), "required for wait")
	}
	return validateCoord(join(p, "coordinate"), a.Coordinate, width, height, needCoord)
}

func validateOpenAI(p string, a Action, width, height int) error {
	fields := map[string][]string{
		"click":        {"x", "y", "button", "keys"},
		"double_click": {"x", "y", "keys"},
		"drag":         {"path", "keys"},
		"keypress":     {"keys"},
		"move":         {"x", "y", "keys"},
		"screenshot":   nil,
		"scroll":       {"x", "y", "scroll_x", "scroll_y", "keys"},
		"type":         {"text"},
		"wait":         {"ms"},
	}
	takes, ok := fields[a.Type]
	if !ok {
		return Invalid(join(p, "type"), "unknown OpenAI computer action %q: want one of %s", a.Type, strings.Join(OpenAIActions, ", "))
	}
	for _, f := range setFields(a) {
		if f != "type" && f != "intent" && !slices.Contains(takes, f) {
			return Invalid(join(p, f), "an OpenAI %s takes no %s", a.Type, f)
		}
	}
	if slices.Contains(takes, "x") {
		if a.X == nil || a.Y == nil {
			// Named x either way, as the input API always has.
			return Invalid(join(p, "x"), "x and y are required for %s", a.Type)
		}
		if err := validatePixel(p, "x", "y", *a.X, *a.Y, width, height); err != nil {
			return err
		}
	}
	switch a.Type {
	case "click":
		if err := oneOf(join(p, "button"), strings.ToLower(a.Button), "", "left", "right", "wheel", "middle", "back", "forward"); err != nil {
			return err
		}
	case "drag":
		if len(a.Path) < 2 {
			return Invalid(join(p, "path"), "a drag needs at least two points")
		}
		if len(a.Path) > MaxPath {
			return Invalid(join(p, "path"), "%d points: at most %d", len(a.Path), MaxPath)
		}
		for i, pt := range a.Path {
			if err := validatePixel(join(p, fmt.Sprintf("path[%d]", i)), "x", "y", pt.X, pt.Y, width, height); err != nil {
				return err
			}
		}
	case "keypress":
		if len(a.Keys) == 0 {
			return Invalid(join(p, "keys"), "required for keypress")
		}
	case "type":
		if a.Text == "" {
			return Invalid(join(p, "text"), "required for type")
		}
		if err := validateTyped(join(p, "text"), a.Text); err != nil {
			return err
		}
	case "wait":
		if a.MS != nil && (*a.MS < 1 || *a.MS > MaxWait*1000) {
			return Invalid(join(p, "ms"), "%d is out of range 1..%d", *a.MS, MaxWait*1000)
		}
	}
	return validateKeyNames(join(p, "keys"), a.Keys, a.Type == "keypress")
}

func validateGemini(p string, a Action) error {
	if a.Type != "" && a.Type != "function_call" {
		return Invalid(join(p, "type"), "a Gemini function call has no type, or type function_call")
	}
	interactions := a.Type == "function_call"
	if interactions && a.Args != nil {
		return Invalid(join(p, "args"), "a function_call step carries its arguments in arguments")
	}
	if !interactions && a.Arguments != nil {
		if a.Type != "" {
			return Invalid(join(p, "type"), "a Gemini function call with arguments has type function_call")
		}
		return Invalid(join(p, "arguments"), "a function call carries its arguments in args (or, with type function_call, in arguments)")
	}
	if a.Name == "" {
		return Invalid(join(p, "name"), "required: the function's name")
	}
	fn, ok := geminiFuncs[a.Name]
	if !ok {
		return Invalid(join(p, "name"), "unknown Gemini computer-use function %q: see docs/actions.md", a.Name)
	}
	if fn.refused != "" {
		return &FieldError{Field: join(p, "name"), Detail: fmt.Sprintf("%s is not supported: %s", a.Name, fn.refused), Category: ErrUnsupported}
	}
	args, an := a.FunctionArgs()
	ap := join(p, an)
	set := setFields(args)
	for _, f := range set {
		if f != "intent" && f != "safety_decision" && !slices.Contains(fn.args, f) {
			return Invalid(join(ap, f), "%s takes no %s", a.Name, f)
		}
	}
	for _, f := range fn.required {
		if !slices.Contains(set, f) {
			return Invalid(join(ap, f), "required for %s", a.Name)
		}
	}
	for _, c := range []struct {
		name string
		v    *int
	}{{"x", args.X}, {"y", args.Y}, {"start_x", args.StartX}, {"start_y", args.StartY}, {"end_x", args.EndX},
		{"end_y", args.EndY}, {"destination_x", args.DestinationX}, {"destination_y", args.DestinationY}} {
		if c.v != nil && (*c.v < 0 || *c.v >= GeminiGrid) {
			return Invalid(join(ap, c.name), "%d is off the 0-%d grid", *c.v, GeminiGrid-1)
		}
	}
	for _, m := range []struct {
		name string
		v    *int
	}{{"magnitude", args.Magnitude}, {"magnitude_in_pixels", args.MagnitudeInPixels}} {
		if m.v != nil && (*m.v < 0 || *m.v >= GeminiGrid) {
			return Invalid(join(ap, m.name), "%d is out of range 0..%d", *m.v, GeminiGrid-1)
		}
	}
	if args.Direction != "" || slices.Contains(fn.required, "direction") {
		if err := oneOf(join(ap, "direction"), args.Direction, "up", "down", "left", "right"); err != nil {
			return err
		}
	}
	if err := validateTyped(join(ap, "text"), args.Text); err != nil {
		return err
	}
	switch a.Name {
	case "type":
		if args.Text == "" && (args.PressEnter == nil || !*args.PressEnter) {
			return Invalid(join(ap, "text"), "required for type (or press_enter)")
		}
	case "drag_and_drop":
		if err := validateGeminiDrag(ap, args); err != nil {
			return err
		}
	case "scroll_document":
		if args.Direction == "left" || args.Direction == "right" {
			return &FieldError{Field: join(ap, "direction"), Category: ErrUnsupported,
				Detail: "scroll_document " + args.Direction + " is not supported: no key scrolls a page sideways, and " + noBrowser +
					" (scroll_at or scroll turn the wheel at a point)"}
		}
	case "navigate":
		if err := validateTyped(join(ap, "url"), args.URL); err != nil {
			return err
		}
		if i := strings.IndexFunc(args.URL, unicode.IsControl); i >= 0 {
			return Invalid(join(ap, "url"), "has a control character at byte %d", i)
		}
	}
	if args.Key != "" && len(args.Key) > MaxKeyText {
		return Invalid(join(ap, "key"), "%d bytes: a key combination is at most %d", len(args.Key), MaxKeyText)
	}
	if args.Keys != nil {
		if err := validateKeyNames(join(ap, "keys"), args.Keys.Names(), true); err != nil {
			return err
		}
	}
	if args.Seconds != nil {
		if err := validateSeconds(join(ap, "seconds"), *args.Seconds, a.Name); err != nil {
			return err
		}
	}
	return nil
}

// validateGeminiDrag checks that a drag_and_drop has one whole pair of
// ends: Gemini 3.5's start_/end_, or the earlier x, y, destination_.
func validateGeminiDrag(ap string, args GeminiArgs) error {
	form := []struct {
		name string
		v    *int
	}{{"start_x", args.StartX}, {"start_y", args.StartY}, {"end_x", args.EndX}, {"end_y", args.EndY}}
	other := []struct {
		name string
		v    *int
	}{{"x", args.X}, {"y", args.Y}, {"destination_x", args.DestinationX}, {"destination_y", args.DestinationY}}
	if args.StartX == nil && args.StartY == nil && args.EndX == nil && args.EndY == nil {
		form, other = other, form
	}
	for _, o := range other {
		if o.v != nil {
			return Invalid(join(ap, o.name), "goes with x, y, destination_x and destination_y, not with start_x, start_y, end_x and end_y")
		}
	}
	for _, f := range form {
		if f.v == nil {
			return Invalid(join(ap, f.name), "required for drag_and_drop (start_x, start_y, end_x, end_y; or x, y, destination_x, destination_y)")
		}
	}
	return nil
}

func validateBatch(p string, a Action, width, height int) error {
	if a.Type != "" && a.Type != "computer_call" {
		return Invalid(join(p, "type"), "a batch is a computer_call, or has no type")
	}
	if len(a.Actions) == 0 {
		return Invalid(join(p, "actions"), "required: at least one action")
	}
	if len(a.Actions) > MaxBatch {
		return Invalid(join(p, "actions"), "%d actions: a batch holds at most %d", len(a.Actions), MaxBatch)
	}
	var wait float64
	typed := 0
	for i, e := range a.Actions {
		ep := join(p, fmt.Sprintf("actions[%d]", i))
		if err := validateAction(ep, e, width, height, false, true); err != nil {
			return err
		}
		w, t := e.load()
		wait += w
		typed += t
		if wait > MaxWait {
			return Invalid(ep, "the batch waits %g seconds up to here: a batch waits at most %d (split it)", wait, MaxWait)
		}
		if typed > MaxTypeText {
			return Invalid(ep, "the batch types %d characters up to here: a batch types at most %d (split it, or set long text through the clipboard)", typed, MaxTypeText)
		}
	}
	return nil
}

// load is how long a (valid, single) action waits, in seconds, and how
// many characters it types.
func (a Action) load() (wait float64, typed int) {
	switch a.Form() {
	case FormOpenAI:
		switch a.Type {
		case "wait":
			if a.MS == nil {
				return 1, 0
			}
			return float64(*a.MS) / 1000, 0
		case "type":
			return 0, utf8.RuneCountInString(a.Text)
		}
	case FormGemini:
		args, _ := a.FunctionArgs()
		switch a.Name {
		case "wait":
			if args.Seconds == nil {
				return 1, 0
			}
			return *args.Seconds, 0
		case "wait_5_seconds":
			return 5, 0
		case "navigate":
			return 0, utf8.RuneCountInString(args.URL)
		}
		return 0, utf8.RuneCountInString(args.Text)
	default:
		switch a.Action {
		case "wait", "hold_key":
			return a.Duration, 0
		case "type":
			return 0, utf8.RuneCountInString(a.Text)
		}
	}
	return 0, 0
}

// validateTyped checks text that is typed.
func validateTyped(field, text string) error {
	if strings.ContainsRune(text, 0) {
		return Invalid(field, "contains a NUL byte")
	}
	if n := utf8.RuneCountInString(text); n > MaxTypeText {
		return Invalid(field, "%d characters: a type action sends at most %d (set longer text through the clipboard)", n, MaxTypeText)
	}
	return nil
}

// validateKeyNames checks a list of key names (whether the keys exist is
// the action layer's to say).
func validateKeyNames(field string, keys []string, required bool) error {
	if required && len(keys) == 0 {
		return Invalid(field, "required: at least one key")
	}
	n := 0
	for i, k := range keys {
		if strings.TrimSpace(k) == "" {
			return Invalid(fmt.Sprintf("%s[%d]", field, i), "empty key name")
		}
		n += len(k) + 1
	}
	if n > MaxKeyText {
		return Invalid(field, "%d bytes: a key combination is at most %d", n, MaxKeyText)
	}
	return nil
}

func validateSeconds(field string, s float64, what string) error {
	if s < 0 || s > MaxWait || math.IsNaN(s) {
		return Invalid(field, "%g seconds: a %s lasts at most %d seconds", s, what, MaxWait)
	}
	return nil
}

func validatePixel(p, xf, yf string, x, y, width, height int) error {
	for _, c := range []struct {
		f    string
		v, n int
	}{{xf, x, width}, {yf, y, height}} {
		if c.v < 0 {
			return Invalid(join(p, c.f), "%d is off screen", c.v)
		}
		if c.n > 0 && c.v >= c.n {
			return Invalid(join(p, c.f), "%d is off the %dx%d screen", c.v, width, height)
		}
	}
	return nil
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
