package osworld

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/guest"
)

// An OSWorld task (evaluation_examples/examples/DOMAIN/ID.json) made into
// an hvkube Agent: a workflow whose steps are the task's setup (config),
// then the steps that do the task (given by the caller: a recorded run, or
// an exec of an agent program), then its postconfig and its evaluator as
// assert steps. The instruction is the task's input. What does not map is
// named, and recorded on the Agent (annotation), never dropped silently.

// Task is the part of an OSWorld task file the import reads.
type Task struct {
	ID          string `json:"id"`
	Snapshot    string `json:"snapshot"`
	Instruction string `json:"instruction"`
	// Source is where the task comes from: a string, or a list of them.
	Source    json.RawMessage `json:"source"`
	Config    []TaskStep      `json:"config"`
	Evaluator json.RawMessage `json:"evaluator"`
}

// TaskStep is one step of a task's config or postconfig.
type TaskStep struct {
	Type       string          `json:"type"`
	Parameters json.RawMessage `json:"parameters"`
}

// ImportOptions say how a task becomes an Agent.
type ImportOptions struct {
	// Pool is the sandbox pool the Agent runs on.
	Pool string
	// User is the desktop's user, whom setup and checks run as
	// (api.DefaultGuestUser when empty).
	User string
	// Steps do the task, between setup and evaluation.
	Steps []api.Action
	// Name is the Agent's name; empty: "osworld-" and the task's ID.
	Name string
	// Settle is how long, in seconds (at most 100), each assert checks
	// again until it passes: a desktop acts after its input arrives, as
	// OSWorld's runner waits before it evaluates.
	Settle float64
	// OSWorld, when set, runs the task with OSWorld's own code instead of
	// mapping it: a custom Agent whose host command is the Python SDK's
	// hvkube.osworld_task, which sets the task up, runs the actions of
	// OSWorld.Steps and evaluates it with the task's own evaluator.
	OSWorld *OSWorldRun
}

// OSWorldRun is how an Agent runs a task with OSWorld's code, on the host
// of the node that runs the Agent (paths are that host's).
type OSWorldRun struct {
	// Dir is OSWorld's directory, Task the task file's path (both
	// absolute); Steps, when set, a JSON list of OSWorld actions; Cache
	// OSWorld's cache directory (empty: Dir/cache).
	Dir, Task, Steps, Cache string
	// Python runs the SDK (python3 when empty); PythonPath, when set,
	// is its PYTHONPATH (the SDK's directory and OSWorld's modules).
	Python, PythonPath string
}

// Annotations and labels an imported Agent carries.
const (
	TaskLabel          = "hvkube.io/osworld-task"
	UnmappedAnnotation = "hvkube.io/osworld-unmapped"
	InstructionMax     = 64 << 10
)

// Import makes the Agent of an OSWorld task. notes name each part of the
// task that does not map (also in the Agent's UnmappedAnnotation); an
// error is a task that cannot be read at all.
func Import(data []byte, opts ImportOptions) (*api.Agent, []string, error) {
	var t Task
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&t); err != nil {
		return nil, nil, api.Invalid("", "not an OSWorld task (JSON): %v", err)
	}
	switch {
	case t.ID == "":
		return nil, nil, api.Invalid("id", "required")
	case t.Instruction == "":
		return nil, nil, api.Invalid("instruction", "required")
	case len(t.Instruction) > InstructionMax:
		return nil, nil, api.Invalid("instruction", "%d bytes: at most %d", len(t.Instruction), InstructionMax)
	case opts.Pool == "":
		return nil, nil, api.Invalid("pool", "required: the pool whose sandboxes run the task")
	case opts.Settle < 0 || opts.Settle > 100:
		return nil, nil, api.Invalid("settle", "%g seconds: want 0..100", opts.Settle)
	}
	if opts.User == "" {
		opts.User = api.DefaultGuestUser
	}
	if err := checkSource(t.Source); err != nil {
		return nil, nil, err
	}
	if opts.OSWorld != nil {
		a, err := runWithOSWorld(t, opts)
		return a, nil, err
	}
	m := &mapper{user: opts.User}
	var steps []api.Action
	for i, st := range t.Config {
		steps = append(steps, m.setup(fmt.Sprintf("config[%d]", i), st)...)
	}
	steps = append(steps, opts.Steps...)
	for _, st := range m.evaluator(t.Evaluator) {
		if st.Action == "assert" {
			st.Duration = opts.Settle
		}
		steps = append(steps, st)
	}

	a := newAgent(t, opts)
	if len(m.notes) > 0 {
		a.Metadata.Annotations = map[string]string{UnmappedAnnotation: strings.Join(m.notes, "; ")}
	}
	a.Spec.Type = "workflow"
	a.Spec.Task.Steps = steps
	return a, m.notes, nil
}

// newAgent is the Agent of task t, without what it runs.
func newAgent(t Task, opts ImportOptions) *api.Agent {
	name := opts.Name
	if name == "" {
		name = agentName(t.ID)
	}
	input, _ := json.Marshal(map[string]any{"instruction": t.Instruction, "osworldTask": t.ID, "snapshot": t.Snapshot, "source": t.Source})
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name = name
	a.Metadata.Labels = map[string]string{TaskLabel: labelValue(t.ID)}
	a.Spec.SandboxSelector = &api.SandboxSelector{Pool: opts.Pool}
	a.Spec.Task.Input = input
	return a
}

// checkSource reads a task's source: absent, a string or a list of strings.
func checkSource(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return nil
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		return nil
	}
	return api.Invalid("source", "want a string or a list of strings")
}

// runWithOSWorld is the custom Agent that runs task t with OSWorld's own
// code on the host (hvkube.osworld_task), on the Agent's sandbox.
func runWithOSWorld(t Task, opts ImportOptions) (*api.Agent, error) {
	o := opts.OSWorld
	for _, f := range []struct{ field, v string }{{"osworld", o.Dir}, {"task", o.Task}, {"steps", o.Steps}, {"cache", o.Cache}} {
		if f.v != "" && !strings.HasPrefix(f.v, "/") {
			return nil, api.Invalid(f.field, "%q: want an absolute path (the Agent's command runs in a directory of its own)", f.v)
		}
	}
	if o.Dir == "" || o.Task == "" {
		return nil, api.Invalid("osworld", "OSWorld's directory and the task's file are required")
	}
	python := o.Python
	if python == "" {
		python = "python3"
	}
	var cmd []string
	if o.PythonPath != "" {
		cmd = []string{"/usr/bin/env", "PYTHONPATH=" + o.PythonPath}
	}
	cmd = append(cmd, python, "-m", "hvkube.osworld_task", "--osworld", o.Dir)
	if o.Cache != "" {
		cmd = append(cmd, "--cache", o.Cache)
	}
	if o.Steps != "" {
		cmd = append(cmd, "--steps", o.Steps)
	}
	cmd = append(cmd, "--", o.Task)
	a := newAgent(t, opts)
	a.Spec.Type = "custom"
	a.Spec.Task.Command = cmd
	a.Spec.Task.In = "host"
	return a, nil
}

var notLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// agentName is "osworld-" and the task's ID as a DNS label (IDs are UUIDs).
func agentName(id string) string {
	n := "osworld-" + strings.Trim(notLabel.ReplaceAllString(strings.ToLower(id), "-"), "-")
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	return n
}

var notLabelValue = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func labelValue(id string) string {
	v := strings.Trim(notLabelValue.ReplaceAllString(id, "-"), "-._")
	if len(v) > 63 {
		v = strings.TrimRight(v[:63], "-._")
	}
	return v
}

// mapper turns task parts into steps and collects what does not map.
type mapper struct {
	user  string
	notes []string
}

func (m *mapper) note(format string, args ...any) {
	m.notes = append(m.notes, fmt.Sprintf(format, args...))
}

// asUser is an exec step (or an assert's command) run as the desktop's
// user, as OSWorld's guest server runs everything.
func (m *mapper) asUser(argv ...string) []string {
	req := guest.AsUser(m.user, backend.ExecRequest{Path: argv[0], Args: argv[1:]})
	return append([]string{req.Path}, req.Args...)
}

func execStep(cmd []string, intent string) api.Action {
	return api.Action{Action: "exec", Command: cmd, Intent: intent}
}

// commandOf reads OSWorld's {"command": list or string, "shell": bool}
// as a program and its arguments (a string without shell split as shlex
// does; with shell, /bin/sh -c).
func (m *mapper) commandOf(raw json.RawMessage, shell bool) ([]string, error) {
	req, err := (&call{d: Desktop{User: m.user}}).command(raw, shell)
	if err != nil {
		return nil, err
	}
	return append([]string{req.Path}, req.Args...), nil
}

// detachScript starts its arguments as a program that outlives the step,
// its output discarded, as OSWorld's launch does.
const detachScript = `setsid --fork "$@" </dev/null >/dev/null 2>&1`

func (m *mapper) setup(where string, st TaskStep) []api.Action {
	var p map[string]json.RawMessage
	if len(st.Parameters) > 0 && json.Unmarshal(st.Parameters, &p) != nil {
		m.note("%s (%s): parameters are not an object", where, st.Type)
		return nil
	}
	str := func(k string) string {
		var s string
		json.Unmarshal(p[k], &s)
		return s
	}
	flag := func(k string) bool {
		var b bool
		json.Unmarshal(p[k], &b)
		return b
	}
	intent := fmt.Sprintf("OSWorld %s %s", where, st.Type)
	switch st.Type {
	case "launch", "execute", "command":
		cmd, err := m.commandOf(p["command"], flag("shell"))
		if err != nil {
			m.note("%s (%s): %v", where, st.Type, err)
			return nil
		}
		if st.Type == "launch" {
			return []api.Action{execStep(m.asUser(append([]string{"/bin/sh", "-c", detachScript, "sh"}, cmd...)...), intent)}
		}
		if _, ok := p["until"]; ok {
			m.note("%s (%s): until (retry until the output matches) is not mapped: the command runs once", where, st.Type)
		}
		// OSWorld's setup does not fail on a command's exit status.
		return []api.Action{execStep(m.asUser(append([]string{"/bin/sh", "-c", `"$@"; exit 0`, "sh"}, cmd...)...), intent)}
	case "sleep":
		var s float64
		if json.Unmarshal(p["seconds"], &s) != nil || s < 0 || s > 100 {
			m.note("%s (sleep): seconds must be a number in 0..100", where)
			return nil
		}
		return []api.Action{{Action: "wait", Duration: s, Intent: intent}}
	case "open":
		path := str("path")
		if path == "" {
			m.note("%s (open): no path", where)
			return nil
		}
		return []api.Action{execStep(m.asUser(OpenCommand(m.user, path, "", int(openWait.Seconds()))...), intent)}
	case "activate_window", "close_window":
		name := str("window_name")
		if name == "" {
			m.note("%s (%s): no window_name", where, st.Type)
			return nil
		}
		return []api.Action{execStep(m.asUser(WindowCommand(st.Type == "activate_window", name, flag("strict"), flag("by_class"))...), intent)}
	case "download":
		var files []struct {
			URL  string `json:"url"`
			Path string `json:"path"`
		}
		if json.Unmarshal(p["files"], &files) != nil || len(files) == 0 {
			m.note("%s (download): no files", where)
			return nil
		}
		var out []api.Action
		for _, f := range files {
			out = append(out, execStep(m.asUser("/usr/bin/python3", "-c", downloadScript, f.URL, expandHome(m.user, f.Path)), intent))
		}
		return out
	case "chrome_open_tabs":
		var urls []string
		if json.Unmarshal(p["urls_to_open"], &urls) != nil || len(urls) == 0 {
			m.note("%s (chrome_open_tabs): no urls_to_open", where)
			return nil
		}
		// Through the running Chromium's DevTools (browser-desktop), as
		// OSWorld does over CDP: each URL a new tab, the last in front.
		return []api.Action{execStep(m.asUser(append([]string{"/usr/bin/python3", "-c", openTabsScript}, urls...)...), intent)}
	}
	m.note("%s: setup step %q is not mapped", where, st.Type)
	return nil
}

// openTabsScript opens each URL of its arguments in a new tab of the
// running Chromium through its DevTools HTTP endpoint (the browser-desktop
// image's, on 127.0.0.1:9222), waiting up to two minutes for it to answer.
const openTabsScript = `import sys, time, urllib.parse, urllib.request
deadline = time.time() + 120
for url in sys.argv[1:]:
    while True:
        try:
            req = urllib.request.Request("http://127.0.0.1:9222/json/new?" + urllib.parse.quote(url, safe=""), method="PUT")
            urllib.request.urlopen(req, timeout=60).read()
            break
        except OSError as e:
            if time.time() > deadline:
                sys.exit("opening %s: %s" % (url, e))
            time.sleep(1)`

func expandHome(user, p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		return guest.Home(user) + p[1:]
	}
	return p
}

// OpenCommand is the program and arguments that open path (a file, with
// xdg-open, or a program's name) and wait up to timeout seconds for a
// window whose title holds window (or the file's name) and activate it:
// OSWorld's open_file.
func OpenCommand(user, path, window string, timeout int) []string {
	path = expandHome(user, path)
	candidates := []string{window}
	if window == "" {
		base := path[strings.LastIndex(path, "/")+1:]
		candidates = []string{base}
		if i := strings.LastIndex(base, "."); i > 0 {
			candidates = append(candidates, base[:i])
		}
	}
	return append([]string{"/bin/sh", "-c", openScript, "sh", path, fmt.Sprint(timeout)}, candidates...)
}

// WindowCommand is wmctrl activating or closing the window name (-x by
// class, -F strictly), as OSWorld does.
func WindowCommand(activate bool, name string, strict, byClass bool) []string {
	flag := "-"
	if byClass {
		flag += "x"
	}
	if strict {
		flag += "F"
	}
	if activate {
		flag += "a"
	} else {
		flag += "c"
	}
	return []string{"wmctrl", flag, name}
}

// evaluator is the task's evaluator as assert steps, after its
// postconfig. A conjunction "and" of mapped metrics is every assert; an
// "or", or a metric that does not map, is named instead.
type evaluator struct {
	Func       json.RawMessage `json:"func"`
	Result     json.RawMessage `json:"result"`
	Expected   json.RawMessage `json:"expected"`
	Conj       string          `json:"conj"`
	PostConfig []TaskStep      `json:"postconfig"`
	Options    json.RawMessage `json:"options"`
}

type getter struct {
	Type    string          `json:"type"`
	Command json.RawMessage `json:"command"`
	Shell   bool            `json:"shell"`
	Path    string          `json:"path"`
	Rules   json.RawMessage `json:"rules"`
}

func (m *mapper) evaluator(raw json.RawMessage) []api.Action {
	if len(raw) == 0 || string(raw) == "null" {
		m.note("evaluator: none")
		return nil
	}
	var ev evaluator
	if err := json.Unmarshal(raw, &ev); err != nil {
		m.note("evaluator: %v", err)
		return nil
	}
	var steps []api.Action
	for i, st := range ev.PostConfig {
		steps = append(steps, m.setup(fmt.Sprintf("evaluator.postconfig[%d]", i), st)...)
	}
	var funcs []string
	var results, expected []json.RawMessage
	if json.Unmarshal(ev.Func, &funcs) == nil {
		json.Unmarshal(ev.Result, &results)
		json.Unmarshal(ev.Expected, &expected)
	} else {
		var f string
		json.Unmarshal(ev.Func, &f)
		funcs, results, expected = []string{f}, []json.RawMessage{ev.Result}, []json.RawMessage{ev.Expected}
	}
	if len(funcs) > 1 && ev.Conj == "or" {
		m.note("evaluator: %q joined by or is not mapped (assert steps must all pass)", funcs)
		return steps
	}
	if len(ev.Options) > 0 && string(ev.Options) != "{}" && string(ev.Options) != "[]" && string(ev.Options) != "null" {
		m.note("evaluator: options %s are not mapped", ev.Options)
	}
	for i, f := range funcs {
		var res, exp json.RawMessage
		if i < len(results) {
			res = results[i]
		}
		if i < len(expected) {
			exp = expected[i]
		}
		if st, ok := m.metric(fmt.Sprintf("evaluator.func[%d]", i), f, res, exp); ok {
			steps = append(steps, st)
		}
	}
	return steps
}

// Assert scripts, given their values as arguments (never pasted in).
const (
	// exactScript: $1 is the expected text; the rest the command whose
	// standard output must equal it.
	exactScript = `exp=$1; shift; out=$("$@"; echo .); out=${out%.}
[ "$out" = "$exp" ] && exit 0
printf 'got %s, want %s\n' "$out" "$exp" >&2; exit 1`
	// includeScript (python3): argv[1] the number of strings to include,
	// those, then the number to exclude, those, then the command whose
	// standard output is checked.
	includeScript = `import subprocess, sys
a = sys.argv[1:]
n = int(a[0]); inc = a[1:1 + n]
m = int(a[1 + n]); exc = a[2 + n:2 + n + m]
out = subprocess.run(a[2 + n + m:], stdout=subprocess.PIPE, text=True, errors="replace").stdout
missing = [s for s in inc if s not in out]
found = [s for s in exc if s in out]
if missing or found:
    sys.exit("missing %r, excluded but found %r" % (missing, found))`
)

// metric maps one evaluator metric to an assert step.
func (m *mapper) metric(where, f string, resRaw, expRaw json.RawMessage) (api.Action, bool) {
	var res, exp getter
	json.Unmarshal(resRaw, &res)
	json.Unmarshal(expRaw, &exp)
	var source []string // the command whose output is the result
	switch res.Type {
	case "vm_command_line":
		cmd, err := m.commandOf(res.Command, res.Shell)
		if err != nil {
			m.note("%s (%s): result: %v", where, f, err)
			return api.Action{}, false
		}
		source = cmd
	case "vm_file":
		if res.Path == "" {
			m.note("%s (%s): result vm_file has no path", where, f)
			return api.Action{}, false
		}
		source = []string{"cat", "--", expandHome(m.user, res.Path)}
	default:
		if f == "infeasible" {
			m.note("%s: infeasible (the task cannot be done: the agent is to say so) is not mapped", where)
		} else {
			m.note("%s (%s): result getter %q is not mapped", where, f, res.Type)
		}
		return api.Action{}, false
	}
	if exp.Type != "" && exp.Type != "rule" {
		m.note("%s (%s): expected getter %q is not mapped (only rule)", where, f, exp.Type)
		return api.Action{}, false
	}
	intent := fmt.Sprintf("OSWorld %s %s", where, f)
	switch f {
	case "exact_match":
		var rules struct {
			Expected *string `json:"expected"`
		}
		if json.Unmarshal(exp.Rules, &rules) != nil || rules.Expected == nil {
			m.note("%s (exact_match): rules.expected is not a string", where)
			return api.Action{}, false
		}
		return api.Action{Action: "assert", Command: m.asUser(append([]string{"/bin/sh", "-c", exactScript, "sh", *rules.Expected}, source...)...), Intent: intent}, true
	case "check_include_exclude":
		var rules struct {
			Include []string `json:"include"`
			Exclude []string `json:"exclude"`
		}
		if json.Unmarshal(exp.Rules, &rules) != nil {
			m.note("%s (check_include_exclude): rules are not include/exclude lists", where)
			return api.Action{}, false
		}
		args := []string{"/usr/bin/python3", "-c", includeScript, fmt.Sprint(len(rules.Include))}
		args = append(args, rules.Include...)
		args = append(args, fmt.Sprint(len(rules.Exclude)))
		args = append(args, rules.Exclude...)
		return api.Action{Action: "assert", Command: m.asUser(append(args, source...)...), Intent: intent}, true
	}
	m.note("%s: metric %q is not mapped", where, f)
	return api.Action{}, false
}
