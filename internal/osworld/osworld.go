// Package osworld serves OSWorld's guest API for one desktop, so that
// OSWorld's own clients (its PythonController and SetupController, written
// for the Flask server it runs inside each VM on port 5000) work against an
// hvkube sandbox unchanged. Nothing runs in the guest for it: each request
// becomes programs run through the guest agent (a Runner), as the desktop's
// user, with the same request and answer formats as OSWorld's server.
//
// Every program gets its arguments as a list; what a request says is never
// pasted into a shell command. A request that asks for a shell (OSWorld's
// "shell": true) gets /bin/sh -c with its command as that one argument, as
// OSWorld does, as the desktop's user: that is what the route is for.
package osworld

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/guest"
)

// Guest is one desktop as the guest API needs it.
type Guest interface {
	// Exec runs a program in the guest as root (guest.AsUser makes it the
	// desktop user's) and waits for it, or starts it (Detach).
	Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error)
	// Screenshot is the screen as a PNG.
	Screenshot(ctx context.Context) ([]byte, error)
}

// Desktop is what the API knows of the guest.
type Desktop struct {
	// User is the desktop's user: programs run as it.
	User string
	// OS is the guest's operating system: linux (OSWorld's routes), or
	// windows (Windows Agent Arena's variant, windows.go).
	OS string
	// Name is the sandbox's; Recordings keeps what /start_recording
	// started, for whom Holder says holds the sandbox (nil: the recording
	// routes answer 501).
	Name       string
	Recordings *Recordings
	Holder     Holder
}

// Bounds of the API.
const (
	// maxJSON bounds a JSON or form request body.
	maxJSON = 1 << 20
	// ExecTimeout is OSWorld's own bound on /execute.
	ExecTimeout = 120 * time.Second
	// pythonTimeout is OSWorld's bound on /run_python.
	pythonTimeout = 30 * time.Second
	// maxWait bounds every other wait a request asks for (a script's, a
	// verification's).
	maxWait = 10 * time.Minute
	// openWait is OSWorld's bound on /setup/open_file's wait for the
	// window (its server's TIMEOUT): its client waits 10 s longer, and a
	// first start of an application under emulation takes minutes.
	openWait = 30 * time.Minute
	// maxTreeEntries bounds /list_directory.
	maxTreeEntries = 20000
)

// MaxBody bounds a request body (an upload).
const MaxBody = guest.MaxFile + maxJSON

// Routes are the paths Serve answers, OSWorld's (desktop_env/server/main.py).
var Routes = []string{
	"/execute", "/setup/execute", "/execute_with_verification", "/setup/execute_with_verification",
	"/setup/launch", "/screenshot", "/terminal", "/accessibility", "/screen_size", "/window_size",
	"/desktop_path", "/wallpaper", "/list_directory", "/file", "/setup/upload", "/platform",
	"/cursor_position", "/setup/change_wallpaper", "/setup/download_file", "/setup/open_file",
	"/setup/activate_window", "/setup/close_window", "/start_recording", "/end_recording",
	"/run_python", "/run_bash_script",
}

// Serve answers one request of OSWorld's guest API; route is its path
// (/screenshot, /setup/execute, …).
func Serve(w http.ResponseWriter, r *http.Request, g Guest, d Desktop, route string) {
	a := &call{w: w, r: r, g: g, d: d}
	if d.OS == "windows" {
		serveWindows(a, route)
		return
	}
	method := http.MethodPost
	switch route {
	case "/screenshot", "/terminal", "/accessibility", "/platform", "/cursor_position":
		method = http.MethodGet
	}
	h, ok := handlers[route]
	switch {
	case !ok:
		a.text(http.StatusNotFound, "no route "+route+" in OSWorld's guest API")
		return
	case r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead):
		w.Header().Set("Allow", method)
		a.text(http.StatusMethodNotAllowed, r.Method+" "+route+": use "+method)
		return
	}
	h(a)
}

var handlers map[string]func(*call)

func init() {
	handlers = map[string]func(*call){
		"/execute": (*call).execute, "/setup/execute": (*call).execute,
		"/execute_with_verification": (*call).executeVerified, "/setup/execute_with_verification": (*call).executeVerified,
		"/setup/launch": (*call).launch, "/screenshot": (*call).screenshot, "/terminal": (*call).terminal,
		"/accessibility": (*call).accessibility, "/screen_size": (*call).screenSize, "/window_size": (*call).windowSize,
		"/desktop_path": (*call).desktopPath, "/wallpaper": (*call).wallpaper, "/list_directory": (*call).listDirectory,
		"/file": (*call).file, "/setup/upload": (*call).upload, "/platform": (*call).platform,
		"/cursor_position": (*call).cursorPosition, "/setup/change_wallpaper": (*call).changeWallpaper,
		"/setup/download_file": (*call).downloadFile, "/setup/open_file": (*call).openFile,
		"/setup/activate_window": (*call).activateWindow, "/setup/close_window": (*call).closeWindow,
		"/start_recording": (*call).startRecording, "/end_recording": (*call).endRecording,
		"/run_python": (*call).runPython, "/run_bash_script": (*call).runBashScript,
	}
}

// call is one request being answered.
type call struct {
	w http.ResponseWriter
	r *http.Request
	g Guest
	d Desktop
}

func (a *call) json(code int, v any) {
	a.w.Header().Set("Content-Type", "application/json")
	a.w.WriteHeader(code)
	json.NewEncoder(a.w).Encode(v)
}

func (a *call) text(code int, s string) {
	a.w.Header().Set("Content-Type", "text/html; charset=utf-8")
	a.w.WriteHeader(code)
	io.WriteString(a.w, s)
}

// failed answers a failure in the shape OSWorld's routes use most.
func (a *call) failed(code int, msg string) {
	a.json(code, map[string]any{"status": "error", "message": msg})
}

// body decodes a JSON request body into v. OSWorld reads the fields it
// knows and ignores others; so does this.
func (a *call) body(v any) bool {
	b, err := io.ReadAll(http.MaxBytesReader(a.w, a.r.Body, maxJSON))
	if err != nil {
		a.json(http.StatusBadRequest, map[string]string{"error": "reading the request body: " + err.Error()})
		return false
	}
	if err := json.Unmarshal(b, v); err != nil {
		a.json(http.StatusBadRequest, map[string]string{"error": "the request body is not the JSON object this route takes: " + err.Error()})
		return false
	}
	return true
}

// form reads a form field of an urlencoded or multipart body.
func (a *call) form(max int64) bool {
	a.r.Body = http.MaxBytesReader(a.w, a.r.Body, max)
	ct, _, _ := mime.ParseMediaType(a.r.Header.Get("Content-Type"))
	var err error
	if ct == "multipart/form-data" {
		err = a.r.ParseMultipartForm(max)
	} else {
		err = a.r.ParseForm()
	}
	if err != nil {
		a.json(http.StatusBadRequest, map[string]string{"error": "reading the form: " + err.Error()})
		return false
	}
	return true
}

// run runs a program as the desktop's user.
func (a *call) run(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	return a.g.Exec(ctx, guest.AsUser(a.d.User, req))
}

// command is OSWorld's {"command": list or string, "shell": bool} made into
// a program and its arguments: a string without shell is split as shlex
// does; with shell, /bin/sh -c runs the string (a list's first element,
// the rest its arguments); ~/ at the start of an argument is the home.
func (a *call) command(raw json.RawMessage, shell bool) (backend.ExecRequest, error) {
	var words []string
	var s string
	if len(raw) == 0 || string(raw) == "null" {
		return backend.ExecRequest{}, errors.New("command: required")
	}
	if err := json.Unmarshal(raw, &s); err == nil {
		if shell {
			words = []string{s}
		} else if words, err = splitWords(s); err != nil {
			return backend.ExecRequest{}, fmt.Errorf("command: %w", err)
		}
	} else if err := json.Unmarshal(raw, &words); err != nil {
		return backend.ExecRequest{}, errors.New("command: want a list of strings or a string")
	}
	if len(words) == 0 {
		return backend.ExecRequest{}, errors.New("command: empty")
	}
	home := guest.Home(a.d.User)
	for i, w := range words {
		if strings.HasPrefix(w, "~/") {
			words[i] = home + w[1:]
		}
	}
	if shell {
		return backend.ExecRequest{Path: "/bin/sh", Args: append([]string{"-c"}, words...)}, nil
	}
	return backend.ExecRequest{Path: words[0], Args: words[1:]}, nil
}

// commandBody is a command route's body. shell is read as Python reads
// it (truthy): OSWorld's own tasks send "shell": "true".
type commandBody struct {
	Command json.RawMessage `json:"command"`
	Shell   json.RawMessage `json:"shell"`
}

// notFound is how env(1), which runs the program as the user, says it has
// no such program: OSWorld's server raises FileNotFoundError there.
func notFound(res backend.ExecResult) bool {
	return res.ExitCode == 127 && strings.HasPrefix(string(res.Stderr), "/usr/bin/env: ")
}

func (a *call) execute() {
	var b commandBody
	if !a.body(&b) {
		return
	}
	req, err := a.command(b.Command, truthy(b.Shell))
	if err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	res, ok := a.runCommand(req)
	if ok {
		a.json(http.StatusOK, map[string]any{"status": "success", "output": text(res.Stdout), "error": text(res.Stderr), "returncode": res.ExitCode})
	}
}

// runCommand runs an /execute command within OSWorld's timeout and answers
// a failure to run it.
func (a *call) runCommand(req backend.ExecRequest) (backend.ExecResult, bool) {
	ctx, cancel := context.WithTimeout(a.r.Context(), ExecTimeout)
	defer cancel()
	res, err := a.run(ctx, req)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		a.failed(http.StatusInternalServerError, fmt.Sprintf("Command '%s' timed out after %d seconds", req.Path, int(ExecTimeout.Seconds())))
		return res, false
	case err != nil:
		a.failed(http.StatusInternalServerError, err.Error())
		return res, false
	case notFound(res):
		a.failed(http.StatusInternalServerError, "[Errno 2] No such file or directory: '"+req.Path+"'")
		return res, false
	}
	return res, true
}

type verifiedBody struct {
	commandBody
	Verification struct {
		WindowExists   string `json:"window_exists"`
		CommandSuccess string `json:"command_success"`
	} `json:"verification"`
	MaxWaitTime   *float64 `json:"max_wait_time"`
	CheckInterval *float64 `json:"check_interval"`
}

func (a *call) executeVerified() {
	var b verifiedBody
	if !a.body(&b) {
		return
	}
	req, err := a.command(b.Command, truthy(b.Shell))
	if err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	res, ok := a.runCommand(req)
	if !ok {
		return
	}
	out := map[string]any{"status": "success", "output": text(res.Stdout), "error": text(res.Stderr), "returncode": res.ExitCode}
	v := b.Verification
	if v.WindowExists == "" && v.CommandSuccess == "" {
		a.json(http.StatusOK, out)
		return
	}
	wait, interval := seconds(b.MaxWaitTime, 10), seconds(b.CheckInterval, 1)
	interval = max(interval, 100*time.Millisecond)
	start := time.Now()
	for time.Since(start) < wait {
		if a.verified(v.WindowExists, v.CommandSuccess) {
			out["verification"], out["wait_time"] = "passed", time.Since(start).Seconds()
			a.json(http.StatusOK, out)
			return
		}
		select {
		case <-a.r.Context().Done():
			return
		case <-time.After(interval):
		}
	}
	out["status"], out["verification"], out["wait_time"] = "verification_failed", "failed", wait.Seconds()
	a.json(http.StatusInternalServerError, out)
}

// verified checks a verification's window (by title, case-insensitively,
// as wmctrl -l lists it) and command (sh -c, within 5 s).
func (a *call) verified(window, command string) bool {
	ctx, cancel := context.WithTimeout(a.r.Context(), 30*time.Second)
	defer cancel()
	if window != "" {
		res, err := a.run(ctx, backend.ExecRequest{Path: "wmctrl", Args: []string{"-l"}})
		if err != nil || res.ExitCode != 0 || !strings.Contains(strings.ToLower(string(res.Stdout)), strings.ToLower(window)) {
			return false
		}
	}
	if command != "" {
		res, err := a.run(ctx, backend.ExecRequest{Path: "timeout", Args: []string{"5", "/bin/sh", "-c", command}})
		if err != nil || res.ExitCode != 0 {
			return false
		}
	}
	return true
}

// seconds is an optional number of seconds, within maxWait.
func seconds(v *float64, def float64) time.Duration {
	s := def
	if v != nil && *v >= 0 {
		s = *v
	}
	return min(time.Duration(s*float64(time.Second)), maxWait)
}

func (a *call) launch() {
	var b commandBody
	if !a.body(&b) {
		return
	}
	req, err := a.command(b.Command, truthy(b.Shell))
	if err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(a.r.Context(), 30*time.Second)
	defer cancel()
	// setsid: the program outlives the request and the guest agent's
	// interest in it, as a Popen that nobody waits for does.
	req = backend.ExecRequest{Path: "setsid", Args: append([]string{"--fork", req.Path}, req.Args...), Detach: true}
	if _, err := a.run(ctx, req); err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	var words []string
	if truthy(b.Shell) {
		var s string
		json.Unmarshal(b.Command, &s)
		words = []string{s}
	} else {
		words = req.Args[1:]
	}
	a.text(http.StatusOK, strings.Join(words, " ")+" launched successfully")
}

// screenshot answers the screen. It shows the pointer, as OSWorld's
// server's screenshots do (it pastes the cursor's image at the pointer):
// the virtual display has no cursor plane, so X draws the pointer into the
// framebuffer the hypervisor reads.
func (a *call) screenshot() {
	ctx, cancel := context.WithTimeout(a.r.Context(), 30*time.Second)
	defer cancel()
	png, err := a.g.Screenshot(ctx)
	if err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	a.w.Header().Set("Content-Type", "image/png")
	a.w.Header().Set("Content-Length", strconv.Itoa(len(png)))
	a.w.Write(png)
}

// terminal answers the text of the active GNOME Terminal, as OSWorld's
// server reads it from the accessibility tree: the focused terminal of
// gnome-terminal-server's active window. No such window (or an image
// without GNOME Terminal or the accessibility helper) is null.
func (a *call) terminal() {
	out, err := TerminalText(a.r.Context(), a.g)
	if err != nil && !errors.Is(err, ErrNoAccessibility) {
		a.json(http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	var v any
	if out != nil {
		v = *out
	}
	a.json(http.StatusOK, map[string]any{"output": v, "status": "success"})
}

// TerminalText is the text of the active GNOME Terminal window's focused
// terminal, nil when there is none.
func TerminalText(ctx context.Context, g Guest) (*string, error) {
	doc, err := accessibilityTree(ctx, g, "--app", "gnome-terminal-server", "--timeout", "10")
	if err != nil {
		return nil, err
	}
	return focusedTerminal(doc)
}

// accessNode is an element of the accessibility XML.
type accessNode struct {
	XMLName  xml.Name
	Attrs    []xml.Attr   `xml:",any,attr"`
	Text     string       `xml:",chardata"`
	Children []accessNode `xml:",any"`
}

func (n *accessNode) attr(local string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == local {
			return a.Value
		}
	}
	return ""
}

// focusedTerminal reads the text as OSWorld does: the nodes of its XPath
// //application[@name="gnome-terminal-server"]/frame[@st:active="true"]//terminal[@st:focused="true"],
// the text of the one there is with its trailing blanks cut, none when
// there are none or several.
func focusedTerminal(doc string) (*string, error) {
	var root accessNode
	if err := xml.Unmarshal([]byte(doc), &root); err != nil {
		return nil, fmt.Errorf("the accessibility tree: %w", err)
	}
	var found []string
	var find func(n *accessNode)
	find = func(n *accessNode) {
		if n.XMLName.Local == "terminal" && n.attr("focused") == "true" {
			found = append(found, n.Text)
		}
		for i := range n.Children {
			find(&n.Children[i])
		}
	}
	for i := range root.Children {
		app := &root.Children[i]
		if app.XMLName.Local != "application" || app.attr("name") != "gnome-terminal-server" {
			continue
		}
		for j := range app.Children {
			if f := &app.Children[j]; f.XMLName.Local == "frame" && f.attr("active") == "true" {
				for k := range f.Children {
					find(&f.Children[k])
				}
			}
		}
	}
	if len(found) != 1 {
		return nil, nil
	}
	t := strings.TrimRightFunc(found[0], unicode.IsSpace)
	return &t, nil
}

// AccessibilityHelper is the image's program that prints the desktop's
// accessibility tree as OSWorld's XML (images/browser-desktop).
const AccessibilityHelper = "/usr/local/bin/hvkube-accessibility"

// accessibilityWait bounds one run of the accessibility helper.
const accessibilityWait = 4 * time.Minute

// ErrNoAccessibility: the guest has no accessibility helper.
var ErrNoAccessibility = fmt.Errorf("the desktop's image has no accessibility helper (%s): %w", AccessibilityHelper, api.ErrUnsupported)

// Accessibility is the desktop's accessibility tree as OSWorld's XML,
// from the image's helper; ErrNoAccessibility without one.
func Accessibility(ctx context.Context, g Guest) (string, error) {
	return accessibilityTree(ctx, g)
}

// accessibilityTree runs the helper with the arguments args (constant
// ones, never a request's).
func accessibilityTree(ctx context.Context, g Guest, args ...string) (string, error) {
	// The helper bounds its own reading (20 s by default); its start
	// (python, two bus connections) took 1-3 minutes in guests of a host
	// running four emulated desktops with Chrome at once. OSWorld's
	// client waits without a limit.
	ctx, cancel := context.WithTimeout(ctx, accessibilityWait)
	defer cancel()
	res, err := g.Exec(ctx, backend.ExecRequest{Path: "/bin/sh", Args: append([]string{"-c", `[ -x "$0" ] || exit 127; exec "$0" "$@"`, AccessibilityHelper}, args...)})
	switch {
	case err != nil:
		return "", err
	case res.ExitCode == 127:
		return "", ErrNoAccessibility
	case res.ExitCode != 0:
		return "", fmt.Errorf("%s: %s", AccessibilityHelper, guestMessage(res))
	}
	return text(res.Stdout), nil
}

func (a *call) accessibility() {
	xml, err := Accessibility(a.r.Context(), a.g)
	if err != nil {
		a.json(http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	a.json(http.StatusOK, map[string]string{"AT": xml})
}

func (a *call) screenSize() {
	ctx, cancel := context.WithTimeout(a.r.Context(), 30*time.Second)
	defer cancel()
	// X queries read the display only: as root, two fewer programs to start.
	res, err := a.g.Exec(ctx, backend.ExecRequest{Path: "xdotool", Args: []string{"getdisplaygeometry"}})
	var w, h int
	if err == nil && res.ExitCode == 0 {
		_, err = fmt.Sscanf(string(res.Stdout), "%d %d", &w, &h)
	} else if err == nil {
		err = errors.New(guestMessage(res))
	}
	if err != nil {
		a.failed(http.StatusInternalServerError, "screen size: "+err.Error())
		return
	}
	a.json(http.StatusOK, map[string]int{"width": w, "height": h})
}

func (a *call) windowSize() {
	if !a.form(maxJSON) {
		return
	}
	class := a.r.PostForm.Get("app_class_name")
	if class == "" {
		a.json(http.StatusBadRequest, map[string]string{"error": "app_class_name is required"})
		return
	}
	ctx, cancel := context.WithTimeout(a.r.Context(), 30*time.Second)
	defer cancel()
	// The first visible window whose WM_CLASS class is that name, exactly.
	res, err := a.g.Exec(ctx, backend.ExecRequest{Path: "xdotool", Args: []string{"search", "--limit", "1", "--onlyvisible", "--class", "^" + regexpQuote(class) + "$", "getwindowgeometry", "--shell"}})
	if err != nil || res.ExitCode != 0 {
		a.json(http.StatusNotFound, map[string]string{"error": "no window of class " + class})
		return
	}
	var w, h int
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		k, v, _ := strings.Cut(line, "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "WIDTH":
			w = n
		case "HEIGHT":
			h = n
		}
	}
	a.json(http.StatusOK, map[string]int{"width": w, "height": h})
}

// regexpQuote escapes s for the extended regular expressions xdotool
// matches names and classes with.
func regexpQuote(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (a *call) desktopPath() {
	p := guest.Home(a.d.User) + "/Desktop"
	ctx, cancel := context.WithTimeout(a.r.Context(), 30*time.Second)
	defer cancel()
	res, err := a.run(ctx, backend.ExecRequest{Path: "test", Args: []string{"-e", p}})
	if err != nil || res.ExitCode != 0 {
		a.json(http.StatusNotFound, map[string]string{"error": "Unsupported operating system or desktop path not found"})
		return
	}
	a.json(http.StatusOK, map[string]string{"desktop_path": p})
}

// The background is GNOME's setting, as OSWorld's server reads and
// writes it: org.gnome.desktop.background picture-uri, through gsettings
// as the desktop's user (on the session's bus). An image without GNOME's
// settings (no gsettings, or no schema) has no background to read (404,
// as OSWorld answers when it finds none) or to set (501).
const (
	backgroundSchema = "org.gnome.desktop.background"
	backgroundKey    = "picture-uri"
)

// noSettings reports whether gsettings could not be used at all: the
// program or the schema is missing.
func noSettings(res backend.ExecResult) bool {
	return notFound(res) || strings.Contains(string(res.Stderr), "No such schema")
}

func (a *call) wallpaper() {
	ctx, cancel := context.WithTimeout(a.r.Context(), 30*time.Second)
	defer cancel()
	res, err := a.run(ctx, backend.ExecRequest{Path: "gsettings", Args: []string{"get", backgroundSchema, backgroundKey}})
	if err != nil {
		a.json(http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	p := ""
	if res.ExitCode == 0 {
		p = wallpaperPath(strings.TrimSpace(string(res.Stdout)))
	}
	if p == "" || noSettings(res) {
		a.text(http.StatusNotFound, "Wallpaper file not found")
		return
	}
	data, err := guest.ReadFile(ctx, a.g, a.d.User, p, guest.MaxFile)
	switch {
	case errors.Is(err, api.ErrNotFound):
		a.text(http.StatusNotFound, "Wallpaper file not found")
		return
	case err != nil:
		a.json(http.StatusInternalServerError, map[string]string{"error": "Failed to serve wallpaper: " + err.Error()})
		return
	}
	// OSWorld sends it as image/png whatever it is.
	a.w.Header().Set("Content-Type", "image/png")
	a.w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	a.w.Write(data)
}

// wallpaperPath is the file of a picture-uri value as gsettings prints it
// ('file:///usr/share/…', quoted), read as OSWorld reads it: the scheme
// and the quotes cut, nothing else (change_wallpaper writes the path as it
// is).
func wallpaperPath(v string) string {
	v = strings.Trim(v, "'\"")
	return strings.TrimPrefix(v, "file://")
}

func (a *call) changeWallpaper() {
	var b struct {
		Path string `json:"path"`
	}
	if !a.body(&b) {
		return
	}
	if b.Path == "" {
		a.text(http.StatusBadRequest, "Path not supplied!")
		return
	}
	p := a.expand(b.Path)
	ctx, cancel := context.WithTimeout(a.r.Context(), 30*time.Second)
	defer cancel()
	// OSWorld checks the file first, as the user sees it.
	if res, err := a.run(ctx, backend.ExecRequest{Path: "test", Args: []string{"-e", p}}); err == nil && res.ExitCode != 0 {
		a.text(http.StatusNotFound, "File not found: "+p)
		return
	}
	// As OSWorld writes it: the path as it is after file://.
	res, err := a.run(ctx, backend.ExecRequest{Path: "gsettings", Args: []string{"set", backgroundSchema, backgroundKey, "file://" + p}})
	switch {
	case err != nil:
		a.text(http.StatusInternalServerError, "Failed to change wallpaper. Error: "+err.Error())
	case noSettings(res):
		a.text(http.StatusNotImplemented, "Failed to change wallpaper. Error: this desktop has no GNOME background setting (gsettings, "+backgroundSchema+"): use the osworld image")
	case res.ExitCode != 0:
		a.text(http.StatusInternalServerError, "Failed to change wallpaper. Error: "+guestMessage(res))
	default:
		a.text(http.StatusOK, "Wallpaper changed successfully")
	}
}

// expand is OSWorld's expanduser for a path a request gives.
func (a *call) expand(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		return guest.Home(a.d.User) + p[1:]
	}
	return p
}

// treeScript lists directory $1 below it, one entry a line: its type
// (d for a directory) and its path relative to $1, NUL-terminated, at most
// $2 entries; exit 3 when $1 is not a directory.
const treeScript = `[ -d "$1" ] || exit 3
find "$1" -mindepth 1 -printf '%y %P\0' 2>/dev/null | head -z -n "$2"`

// Node is an entry of /list_directory's tree: a directory has children
// (an empty list when it is empty), a file none.
type Node struct {
	Type     string
	Name     string
	Children []*Node
}

// MarshalJSON writes children for directories only, as OSWorld does.
func (n *Node) MarshalJSON() ([]byte, error) {
	if n.Type != "directory" {
		return json.Marshal(struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}{n.Type, n.Name})
	}
	return json.Marshal(struct {
		Type     string  `json:"type"`
		Name     string  `json:"name"`
		Children []*Node `json:"children"`
	}{n.Type, n.Name, append([]*Node{}, n.Children...)})
}

func (a *call) listDirectory() {
	var b struct {
		Path *string `json:"path"`
	}
	if !a.body(&b) {
		return
	}
	if b.Path == nil {
		a.json(http.StatusBadRequest, map[string]string{"error": "Missing 'path' parameter"})
		return
	}
	dir := *b.Path
	ctx, cancel := context.WithTimeout(a.r.Context(), 60*time.Second)
	defer cancel()
	res, err := a.run(ctx, backend.ExecRequest{Path: "/bin/sh", Args: []string{"-c", treeScript, "sh", dir, strconv.Itoa(maxTreeEntries)}})
	switch {
	case err != nil:
		a.json(http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	case res.ExitCode == 3:
		a.json(http.StatusBadRequest, map[string]string{"error": "The provided path is not a directory"})
		return
	case res.ExitCode != 0:
		a.json(http.StatusInternalServerError, map[string]string{"error": guestMessage(res)})
		return
	}
	a.json(http.StatusOK, map[string]any{"directory_tree": buildTree(path.Base(dir), res.Stdout)})
}

// buildTree makes OSWorld's nested tree of find's NUL-terminated "TYPE
// RELATIVE/PATH" entries (parents come before their children).
func buildTree(name string, list []byte) *Node {
	root := &Node{Type: "directory", Name: name, Children: []*Node{}}
	dirs := map[string]*Node{"": root}
	for _, e := range strings.Split(string(list), "\x00") {
		typ, rel, ok := strings.Cut(e, " ")
		if !ok || rel == "" {
			continue
		}
		parent := dirs[path.Dir(rel)]
		if path.Dir(rel) == "." {
			parent = root
		}
		if parent == nil {
			continue
		}
		n := &Node{Type: "file", Name: path.Base(rel)}
		if typ == "d" {
			n.Type, n.Children = "directory", []*Node{}
			dirs[rel] = n
		}
		parent.Children = append(parent.Children, n)
	}
	return root
}

func (a *call) file() {
	if !a.form(maxJSON) {
		return
	}
	p := a.r.PostForm.Get("file_path")
	if p == "" {
		a.json(http.StatusBadRequest, map[string]string{"error": "file_path is required"})
		return
	}
	p = a.expand(p)
	ctx, cancel := context.WithTimeout(a.r.Context(), 5*time.Minute)
	defer cancel()
	data, err := guest.ReadFile(ctx, a.g, a.d.User, p, guest.MaxFile)
	switch {
	case errors.Is(err, api.ErrNotFound):
		a.json(http.StatusNotFound, map[string]string{"error": "File not found"})
		return
	case errors.Is(err, guest.ErrTooLarge):
		a.json(http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("Failed to serve file: %v", err)})
		return
	case err != nil:
		a.json(http.StatusInternalServerError, map[string]string{"error": fmt.Sprintf("Failed to serve file: %v", err)})
		return
	}
	a.w.Header().Set("Content-Type", "application/octet-stream")
	a.w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	a.w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	a.w.Write(data)
}

// uploaded reads an upload's form: file_path and the file_data's bytes
// (at most one more than guest.MaxFile), or the error reading them. It
// answers a form without both fields itself (ok false).
func (a *call) uploaded() (p string, data []byte, ok bool, err error) {
	if !a.form(MaxBody) {
		return "", nil, false, nil
	}
	p = a.r.PostForm.Get("file_path")
	f, _, ferr := a.r.FormFile("file_data")
	if p == "" || ferr != nil {
		a.json(http.StatusBadRequest, map[string]string{"error": "file_path and file_data are required"})
		return "", nil, false, nil
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, guest.MaxFile+1))
	return p, data, true, err
}

func (a *call) upload() {
	p, data, ok, err := a.uploaded()
	if !ok {
		return
	}
	if err != nil {
		a.json(http.StatusInternalServerError, map[string]string{"error": "Failed to upload file: " + err.Error()})
		return
	}
	p = a.expand(p)
	ctx, cancel := context.WithTimeout(a.r.Context(), 5*time.Minute)
	defer cancel()
	if err := guest.WriteFile(ctx, a.g, a.d.User, p, data); err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, guest.ErrTooLarge) {
			code = http.StatusRequestEntityTooLarge
		}
		a.json(code, map[string]string{"error": "Failed to upload file: " + err.Error()})
		return
	}
	a.text(http.StatusOK, fmt.Sprintf("File Uploaded: %d bytes", len(data)))
}

func (a *call) platform() { a.text(http.StatusOK, "Linux") }

func (a *call) cursorPosition() {
	ctx, cancel := context.WithTimeout(a.r.Context(), 30*time.Second)
	defer cancel()
	x, y, err := guest.NewLinux(nil).Cursor(ctx, a.g)
	if err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	a.json(http.StatusOK, []int{x, y})
}

// downloadScript fetches URL $1 into file $2 in the guest (over the
// sandbox's own network and its egress policy), making its directory; it
// prints the size.
const downloadScript = `import os, sys, urllib.request
url, dst = sys.argv[1], sys.argv[2]
os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
try:
    with urllib.request.urlopen(url, timeout=300) as r, open(dst, "wb") as f:
        while True:
            b = r.read(1 << 16)
            if not b:
                break
            f.write(b)
except Exception as e:
    try:
        os.remove(dst)
    except OSError:
        pass
    sys.exit(str(e))
print(os.path.getsize(dst))`

// downloadBody is a download_file request.
type downloadBody struct {
	URL  string `json:"url"`
	Path string `json:"path"`
}

// download reads a download_file request and answers one that names no
// file or no http(s) URL (the guest is asked for nothing else).
func (a *call) download() (downloadBody, bool) {
	var b downloadBody
	if !a.body(&b) {
		return b, false
	}
	if b.URL == "" || b.Path == "" {
		a.text(http.StatusBadRequest, "Path or URL not supplied!")
		return b, false
	}
	if u, err := url.Parse(b.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		a.text(http.StatusBadRequest, "url: "+strconv.Quote(b.URL)+" is not an http or https URL")
		return b, false
	}
	return b, true
}

func (a *call) downloadFile() {
	b, ok := a.download()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(a.r.Context(), 6*time.Minute)
	defer cancel()
	var last string
	for i := 0; i < 3; i++ {
		res, err := a.run(ctx, backend.ExecRequest{Path: "/usr/bin/python3", Args: []string{"-c", downloadScript, b.URL, a.expand(b.Path)}})
		if err == nil && res.ExitCode == 0 {
			a.text(http.StatusOK, "File downloaded successfully: "+strings.TrimSpace(string(res.Stdout))+" bytes")
			return
		}
		if err != nil {
			last = err.Error()
			if ctx.Err() != nil {
				break
			}
		} else {
			last = guestMessage(res)
		}
	}
	a.text(http.StatusInternalServerError, "Failed to download "+b.URL+". No retries left. Error: "+last)
}

// openScript opens $1 (a file, with xdg-open; else a program on the PATH)
// detached, then waits up to $2 s for a window whose title holds one of
// the other arguments, and activates it. Exit 4: no such file or program;
// 5: no window in time.
const openScript = `p=$1 t=$2
shift 2
if [ -e "$p" ]; then
	setsid --fork xdg-open "$p" </dev/null >/dev/null 2>&1
else
	command -v -- "$p" >/dev/null || exit 4
	setsid --fork "$p" </dev/null >/dev/null 2>&1
fi
end=$(($(date +%s) + t))
while :; do
	id=$(wmctrl -l 2>/dev/null | while IFS= read -r line; do
		for c in "$@"; do
			case $line in *"$c"*) echo "${line%% *}"; exit 0 ;; esac
		done
	done)
	if [ -n "$id" ]; then
		wmctrl -i -a "$id"
		exit 0
	fi
	[ "$(date +%s)" -lt "$end" ] || exit 5
	sleep 1
done`

func (a *call) openFile() {
	var b struct {
		Path       string   `json:"path"`
		WindowName string   `json:"window_name"`
		Timeout    *float64 `json:"timeout_seconds"`
	}
	if !a.body(&b) {
		return
	}
	if b.Path == "" {
		a.text(http.StatusBadRequest, "Path not supplied!")
		return
	}
	wait := openWait
	if b.Timeout != nil && *b.Timeout >= 0 && *b.Timeout < openWait.Seconds() {
		wait = time.Duration(*b.Timeout * float64(time.Second))
	}
	ctx, cancel := context.WithTimeout(a.r.Context(), wait+30*time.Second)
	defer cancel()
	secs := int(wait.Seconds())
	argv := OpenCommand(a.d.User, b.Path, b.WindowName, secs)
	candidates := argv[6:]
	res, err := a.run(ctx, backend.ExecRequest{Path: argv[0], Args: argv[1:]})
	switch {
	case err != nil:
		a.text(http.StatusInternalServerError, "Failed to open "+b.Path+". Error: "+err.Error())
	case res.ExitCode == 4:
		a.text(http.StatusNotFound, "Application/file not found: "+b.Path)
	case res.ExitCode == 5:
		a.text(http.StatusInternalServerError, fmt.Sprintf("Failed to find window for %q within %d seconds.", candidates, secs))
	case res.ExitCode != 0:
		a.text(http.StatusInternalServerError, "Failed to open "+b.Path+". Error: "+guestMessage(res))
	default:
		a.text(http.StatusOK, "File opened and window activated successfully")
	}
}

type windowBody struct {
	WindowName string `json:"window_name"`
	Strict     bool   `json:"strict"`
	ByClass    bool   `json:"by_class"`
}

// wmctrl runs wmctrl's action (a: activate, c: close) on the window a
// request names, as OSWorld does (-x by class, -F strictly).
func (a *call) wmctrl(action byte, done string) {
	var b windowBody
	if !a.body(&b) {
		return
	}
	if b.WindowName == "" {
		a.text(http.StatusBadRequest, "window_name required")
		return
	}
	flag := "-"
	if b.ByClass {
		flag += "x"
	}
	if b.Strict {
		flag += "F"
	}
	ctx, cancel := context.WithTimeout(a.r.Context(), 30*time.Second)
	defer cancel()
	if _, err := a.run(ctx, backend.ExecRequest{Path: "wmctrl", Args: []string{flag + string(action), b.WindowName}}); err != nil {
		a.text(http.StatusInternalServerError, err.Error())
		return
	}
	a.text(http.StatusOK, done)
}

func (a *call) activateWindow() { a.wmctrl('a', "Window activated successfully") }
func (a *call) closeWindow()    { a.wmctrl('c', "Window closed successfully.") }

func (a *call) runPython() {
	var b struct {
		Code string `json:"code"`
	}
	if !a.body(&b) {
		return
	}
	if b.Code == "" {
		a.failed(http.StatusBadRequest, "Code not supplied!")
		return
	}
	ctx, cancel := context.WithTimeout(a.r.Context(), pythonTimeout)
	defer cancel()
	// The code comes on standard input: no file to clean up, nothing of it
	// in an argument list.
	res, err := a.run(ctx, backend.ExecRequest{Path: "/usr/bin/python3", Args: []string{"-"}, Stdin: []byte(b.Code)})
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		a.json(http.StatusInternalServerError, map[string]any{"status": "error", "message": "Execution timeout: Code took too long to execute", "error": "TimeoutExpired", "need_more": false, "output": nil})
		return
	}
	if err != nil {
		a.json(http.StatusInternalServerError, map[string]any{"status": "error", "message": "Execution error: " + err.Error(), "error": err.Error(), "need_more": false, "output": nil})
		return
	}
	out, errOut := text(res.Stdout), text(res.Stderr)
	msg := out
	if errOut != "" {
		if out != "" {
			msg += "\n"
		}
		msg += errOut
	}
	status := "success"
	if res.ExitCode != 0 {
		status = "error"
		if errOut == "" {
			errOut = fmt.Sprintf("Process exited with code %d", res.ExitCode)
			if msg != "" {
				msg += "\n"
			}
			msg += errOut
		}
	}
	a.json(http.StatusOK, map[string]any{"status": status, "message": msg, "need_more": false, "output": out, "error": errOut, "return_code": res.ExitCode})
}

// bashScript runs the script on its standard input with bash from
// directory $1 (the home when empty), stderr merged into stdout; without
// that directory it says noDir on stderr.
const bashScript = `cd -- "${1:-$HOME}" 2>/dev/null || { echo "` + noDir + `" >&2; exit 3; }
f=$(mktemp /tmp/hvkube-script-XXXXXX.sh) || exit 1
cat > "$f"
/bin/bash "$f" </dev/null 2>&1
rc=$?
rm -f -- "$f"
exit $rc`

const noDir = "hvkube: no working directory"

func (a *call) runBashScript() {
	var b struct {
		Script     string   `json:"script"`
		Timeout    *float64 `json:"timeout"`
		WorkingDir string   `json:"working_dir"`
	}
	if !a.body(&b) {
		return
	}
	fail := func(code int, msg string) {
		a.json(code, map[string]any{"status": "error", "output": msg, "error": "", "returncode": -1})
	}
	if b.Script == "" {
		fail(http.StatusBadRequest, "Script not supplied!")
		return
	}
	wait := seconds(b.Timeout, 100)
	ctx, cancel := context.WithTimeout(a.r.Context(), wait)
	defer cancel()
	dir := a.expand(b.WorkingDir)
	res, err := a.run(ctx, backend.ExecRequest{Path: "/bin/sh", Args: []string{"-c", bashScript, "sh", dir}, Stdin: []byte(b.Script)})
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		fail(http.StatusInternalServerError, fmt.Sprintf("Script execution timed out after %g seconds", wait.Seconds()))
	case err != nil:
		fail(http.StatusInternalServerError, "Failed to execute script: "+err.Error())
	case res.ExitCode == 3 && strings.TrimSpace(string(res.Stderr)) == noDir:
		fail(http.StatusBadRequest, "Working directory does not exist: "+dir)
	default:
		status := "success"
		if res.ExitCode != 0 {
			status = "error"
		}
		a.json(http.StatusOK, map[string]any{"status": status, "output": text(res.Stdout), "error": "", "returncode": res.ExitCode})
	}
}

// text is guest output as a JSON string: invalid UTF-8 replaced, as
// Python's text mode would fail on it.
func text(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }

// guestMessage is what a failed guest program said.
func guestMessage(res backend.ExecResult) string {
	msg := strings.TrimSpace(text(res.Stderr))
	if msg == "" {
		msg = strings.TrimSpace(text(res.Stdout))
	}
	if msg == "" {
		msg = fmt.Sprintf("exit %d", res.ExitCode)
	}
	if len(msg) > 2000 {
		msg = msg[:2000] + "…"
	}
	return msg
}
