package osworld

// Windows Agent Arena (WAA) runs a variant of OSWorld's Flask server in
// its Windows VMs: the same routes where they overlap, with Windows
// answers, and routes of its own (/probe, /obs_winagent, /setup/close_all,
// /setup/create_file, existence checks that answer 200 or 400, …). This
// file serves that variant for Windows guests, with WAA's request and
// answer formats, so that WAA's PythonController and SetupController work
// against an hvkube sandbox.
//
// Every guest operation is a constant PowerShell script run with
// powershell.exe, its values passed as arguments on standard input
// (internal/powershell), never pasted into the script. The guest's Runner
// runs programs as an administrator outside the desktop user's session:
// scripts that work on files do so there (guest.RunScript), on the files
// of the logged-on user; what needs the desktop (programs the user sees,
// windows, the screen's metrics, the recycle bin, the wallpaper) runs in
// the user's session (guest.InSession). WAA's server runs as that user, in
// that session: programs started for the desktop are started from the
// session through WMI (Win32_Process), so that they outlive the script.
//
// Routes that need WAA's own server-side objects or helpers (its Computer
// object, pywinauto, its File Explorer and Clock checks) answer 501 with
// the reason.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/hvkube/hvkube/internal/guest"
	"github.com/hvkube/hvkube/internal/powershell"
)

// winRoute is a route of WAA's server: its method and its handler.
type winRoute struct {
	method string
	serve  func(*call)
}

var (
	winRoutes map[string]winRoute
	// WindowsRoutes are the paths Serve answers for a Windows guest:
	// WAA's server's routes (src/win-arena-container/vm/setup/server),
	// some of them with 501 (see windows.go).
	WindowsRoutes []string
)

func init() {
	get := func(h func(*call)) winRoute { return winRoute{http.MethodGet, h} }
	post := func(h func(*call)) winRoute { return winRoute{http.MethodPost, h} }
	unserved := func(why string) winRoute {
		return post(func(a *call) { a.failed(http.StatusNotImplemented, why) })
	}
	const (
		waaHelpers  = "WAA's server answers it with its own UI Automation and File Explorer helpers (uiautomation_utils, fileexplorer_utils), which hvkube does not have"
		waaComputer = "/update_computer and /execute_windows drive WAA's server-side Computer object (its code_block action space), which hvkube does not have: use the pyautogui or computer_13 action space (/execute)"
	)
	winRoutes = map[string]winRoute{
		"/probe":                  get((*call).winProbe),
		"/screenshot":             get((*call).screenshot),
		"/terminal":               get((*call).winTerminal),
		"/obs_winagent":           get((*call).winObservation),
		"/accessibility":          get((*call).winAccessibility),
		"/platform":               get((*call).winPlatform),
		"/cursor_position":        get((*call).winCursor),
		"/execute":                post((*call).winExecute),
		"/setup/execute":          post((*call).winExecute),
		"/setup/launch":           post((*call).winLaunch),
		"/screen_size":            post((*call).winScreenSize),
		"/window_size":            post((*call).winWindowSize),
		"/desktop_path":           post(func(a *call) { a.winKnownFolder("Desktop", "desktop_path", http.StatusNotFound) }),
		"/documents_path":         post(func(a *call) { a.winKnownFolder("Documents", "documents_path", http.StatusBadRequest) }),
		"/setup/create_folder":    post((*call).winCreateFolder),
		"/setup/create_file":      post((*call).winCreateFile),
		"/setup/recycle":          post((*call).winRecycle),
		"/folder_exists":          post(func(a *call) { a.winExists("folder_name", "Folder", true) }),
		"/file_exists":            post(func(a *call) { a.winExists("file_name", "File", false) }),
		"/wallpaper":              post((*call).winWallpaper),
		"/list_directory":         post((*call).winListDirectory),
		"/file":                   post((*call).winFile),
		"/setup/upload":           post((*call).winUpload),
		"/setup/change_wallpaper": post((*call).winChangeWallpaper),
		"/setup/download_file":    post((*call).winDownloadFile),
		"/setup/open_file":        post((*call).winOpenFile),
		"/setup/activate_window":  post(func(a *call) { a.winWindow(winActivate) }),
		"/setup/close_window":     post(func(a *call) { a.winWindow(winClose) }),
		"/setup/close_all":        post((*call).winCloseAll),
		"/setup/clear_task_files": post((*call).winClearTaskFiles),
		"/update_computer":        unserved(waaComputer),
		"/execute_windows":        unserved(waaComputer),
		"/shutdown":               unserved("the sandbox's lifecycle is hvkube's: stop or delete the sandbox with hvkube"),
		"/start_recording":        unserved("screen recording is not served by this API: record the attempt with hvkube instead (an Agent's recording, docs/agents.md)"),
		"/end_recording":          unserved("screen recording is not served by this API: record the attempt with hvkube instead (an Agent's recording, docs/agents.md)"),
		"/save_state":             unserved("snapshots are hvkube's: a sandbox goes back to its template's clean snapshot with hvkube reset"),
		"/revert_to_snapshot": post(func(a *call) {
			a.json(http.StatusNotImplemented, map[string]string{"error": "Restore snapshot no implemented"})
		}),
		"/is_details_view":                   unserved(waaHelpers),
		"/are_files_sorted_by_modified_time": unserved(waaHelpers),
		"/is_directory_read_only_for_user":   unserved(waaHelpers),
		"/are_all_images_tagged":             unserved(waaHelpers),
		"/library_folders":                   unserved(waaHelpers),
		"/check_if_timer_started":            unserved(waaHelpers),
		"/check_if_world_clock_exists":       unserved(waaHelpers),
	}
	for r := range winRoutes {
		WindowsRoutes = append(WindowsRoutes, r)
	}
	sort.Strings(WindowsRoutes)
}

// serveWindows answers one request of WAA's guest API.
func serveWindows(a *call, route string) {
	rt, ok := winRoutes[route]
	switch {
	case !ok:
		a.text(http.StatusNotFound, "no route "+route+" in Windows Agent Arena's guest API")
		return
	case a.r.Method != rt.method && !(rt.method == http.MethodGet && a.r.Method == http.MethodHead):
		a.w.Header().Set("Allow", rt.method)
		a.text(http.StatusMethodNotAllowed, a.r.Method+" "+route+": use "+rt.method)
		return
	}
	rt.serve(a)
}

// Bounds of WAA's routes.
const (
	// winExecWait bounds the session run of an /execute command: the
	// command's own 120 s and the session's start and end.
	winExecWait = ExecTimeout + 30*time.Second
	// winFileWait bounds a file read or written through a script.
	winFileWait = 5 * time.Minute
	// winListWait bounds /list_directory.
	winListWait = 2 * time.Minute
)

var (
	// winOpenWait is how long /setup/open_file waits after opening, as
	// WAA's server does (5 s) for the application to come up.
	winOpenWait = 5 * time.Second
	// winDownloadTries is how many times /setup/download_file tries.
	winDownloadTries = 3
)

// winHumanInput is WAA's Human object's answer when no question was asked,
// which is always the case here: hvkube has no human in the loop.
const winHumanInput = "Question: No question asked yet\nAnswer: No answer given yet"

// script runs s outside the desktop user's session.
func (a *call) script(ctx context.Context, s powershell.Script, args powershell.Args, out any) error {
	return guest.RunScript(ctx, a.g, s, args, out)
}

// session runs s in the desktop user's session, for at most timeout (the
// guest's default when 0).
func (a *call) session(ctx context.Context, timeout time.Duration, s powershell.Script, args powershell.Args, out any) error {
	return guest.InSession(ctx, a.g, timeout, s, args, out)
}

// within is the request's context bounded by d.
func (a *call) within(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(a.r.Context(), d)
}

// winProbe answers WAA's readiness probe once the desktop is up (a user
// logged on, the shell running); 503 before.
func (a *call) winProbe() {
	ctx, cancel := a.within(time.Minute)
	defer cancel()
	if err := (guest.WindowsOS{}).Ready(ctx, a.g); err != nil {
		a.json(http.StatusServiceUnavailable, map[string]string{"status": "error", "message": err.Error()})
		return
	}
	a.json(http.StatusOK, map[string]string{"status": "Probe successful", "message": "Service is operational"})
}

// winTerminal answers as WAA's server does on Windows: it reads a
// terminal's text from GNOME's accessibility tree only.
func (a *call) winTerminal() {
	a.text(http.StatusInternalServerError, "Currently not implemented for platform Windows.")
}

func (a *call) winPlatform() { a.text(http.StatusOK, "Windows") }

// winCursor answers [x, y], the pointer's position in the user's session.
// (WAA's own server fails on this route: its view returns a tuple Flask
// cannot send; OSWorld's clients expect the pair.)
func (a *call) winCursor() {
	ctx, cancel := a.within(time.Minute)
	defer cancel()
	x, y, err := (guest.WindowsOS{}).Cursor(ctx, a.g)
	if err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	a.json(http.StatusOK, []int{x, y})
}

// winAccessibility checks the backend as WAA does, then answers 501: WAA
// builds the tree with pywinauto's wrappers, whose XML hvkube cannot
// reproduce without them.
func (a *call) winAccessibility() {
	switch a.r.URL.Query().Get("backend") {
	case "", "win32", "uia":
	default:
		a.text(http.StatusBadRequest, "Invalid backend specified")
		return
	}
	a.failed(http.StatusNotImplemented, "WAA's accessibility tree is pywinauto's (win32 or uia wrappers, their class names and states), which Windows guests of hvkube do not have")
}

// winWindowSize: WAA's server reads window sizes from X11, which a Windows
// guest has not.
func (a *call) winWindowSize() {
	if !a.form(maxJSON) {
		return
	}
	if _, ok := a.r.PostForm["app_class_name"]; !ok {
		a.json(http.StatusBadRequest, map[string]string{"error": "app_class_name is required"})
		return
	}
	a.failed(http.StatusNotImplemented, "WAA's server reads window sizes from X11, which Windows guests do not have")
}

func (a *call) winScreenSize() {
	ctx, cancel := a.within(time.Minute)
	defer cancel()
	var size struct {
		Width  int `json:"width"`
		Height int `json:"height"`
	}
	if err := a.session(ctx, 0, winScreenSizeScript, nil, &size); err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	a.json(http.StatusOK, map[string]int{"width": size.Width, "height": size.Height})
}

// winCommandOf is WAA's {"command", "shell"}: words, a list (a string
// without shell is split as shlex.split does), or line, a string for the
// shell.
func winCommandOf(raw json.RawMessage, shell bool) (words []string, line string, isLine bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, "", false, errors.New("command: required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if shell {
			return nil, s, true, nil
		}
		if words, err = splitWords(s); err != nil {
			return nil, "", false, fmt.Errorf("command: %w", err)
		}
	} else if json.Unmarshal(raw, &words) != nil {
		return nil, "", false, errors.New("command: want a list of strings or a string")
	}
	if len(words) == 0 && !shell {
		return nil, "", false, errors.New("command: empty")
	}
	return append([]string{}, words...), "", false, nil
}

// truthy is Python's truth of a JSON value (WAA reads "shell" so).
func truthy(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	switch v := v.(type) {
	case bool:
		return v
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	}
	return false
}

// Command lines are built here, as Python's subprocess builds them on
// Windows, and reach the guest as pieces: the session's script joins them
// with the user's profile folder, which is where a word beginning ~/
// begins (os.path.expanduser's ~), and which only the session knows.

// quoteWinArg is one word of subprocess.list2cmdline: quoted when it is
// empty or holds a blank (or when force), backslashes doubled before a
// quote and, in a quoted word, at its end.
func quoteWinArg(s string, force bool) string {
	quote := force || s == "" || strings.ContainsAny(s, " \t")
	var b strings.Builder
	if quote {
		b.WriteByte('"')
	}
	slashes := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			slashes++
			continue
		case '"':
			b.WriteString(strings.Repeat(`\`, 2*slashes+1))
		default:
			b.WriteString(strings.Repeat(`\`, slashes))
		}
		slashes = 0
		b.WriteByte(s[i])
	}
	b.WriteString(strings.Repeat(`\`, slashes))
	if quote {
		b.WriteString(strings.Repeat(`\`, slashes))
		b.WriteByte('"')
	}
	return b.String()
}

// winCommandLine is words joined as list2cmdline joins them, in pieces to
// join with the profile folder. A word beginning ~/ is quoted whatever it
// holds: the folder's name may hold blanks.
func winCommandLine(words []string) []string {
	pieces := []string{""}
	for i, w := range words {
		if i > 0 {
			pieces[len(pieces)-1] += " "
		}
		if !strings.HasPrefix(w, "~/") {
			pieces[len(pieces)-1] += quoteWinArg(w, false)
			continue
		}
		pieces[len(pieces)-1] += `"`
		pieces = append(pieces, quoteWinArg(w[1:], true)[1:])
	}
	return pieces
}

// winProgram is a program's path in pieces to join with the profile
// folder.
func winProgram(w string) []string {
	if strings.HasPrefix(w, "~/") {
		return []string{"", w[1:]}
	}
	return []string{w}
}

// winShellLine is cmd.exe's arguments for a command run with the shell:
// /c "line", as subprocess adds them.
func winShellLine(words []string, line string, isLine bool) []string {
	pieces := []string{line}
	if !isLine {
		pieces = winCommandLine(words)
	}
	pieces[0] = `/c "` + pieces[0]
	pieces[len(pieces)-1] += `"`
	return pieces
}

// winExecResult is what the exec script reports of a finished command.
type winExecResult struct {
	ReturnCode int    `json:"returncode"`
	Output     string `json:"output"`
	Error      string `json:"error"`
}

// winExecArgs are the exec script's arguments for a command.
func winExecArgs(words []string, line string, isLine, shell bool) powershell.Args {
	args := powershell.Args{"Shell": shell, "Program": []string{}, "TimeoutSeconds": int(ExecTimeout / time.Second)}
	if shell {
		args["Arguments"] = winShellLine(words, line, isLine)
	} else {
		args["Program"], args["Arguments"] = winProgram(words[0]), winCommandLine(words[1:])
	}
	return args
}

// winExecute runs a command in the user's session as WAA's server does
// (subprocess.run, 120 s): ~/ at the start of a list's word is the user's
// profile folder; with shell, cmd.exe /c runs it.
func (a *call) winExecute() {
	var b struct {
		Command json.RawMessage `json:"command"`
		Shell   json.RawMessage `json:"shell"`
	}
	if !a.body(&b) {
		return
	}
	shell := truthy(b.Shell)
	words, line, isLine, err := winCommandOf(b.Command, shell)
	if err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	ctx, cancel := a.within(winExecWait + time.Minute)
	defer cancel()
	var res winExecResult
	err = a.session(ctx, winExecWait, winExecScript, winExecArgs(words, line, isLine, shell), &res)
	var perr *powershell.Error
	switch {
	case errors.As(err, &perr) && perr.Category == "OperationTimeout":
		shown := line
		if !isLine {
			shown = pyReprList(words)
		}
		a.failed(http.StatusInternalServerError, fmt.Sprintf("Command '%s' timed out after %d seconds", shown, int(ExecTimeout.Seconds())))
	case errors.As(err, &perr):
		a.failed(http.StatusInternalServerError, perr.Message)
	case err != nil:
		a.failed(http.StatusInternalServerError, err.Error())
	default:
		a.json(http.StatusOK, map[string]any{"status": "success", "output": universalNewlines(res.Output), "error": universalNewlines(res.Error), "returncode": res.ReturnCode})
	}
}

// universalNewlines is Python's text mode reading a program's output:
// \r\n and \r become \n.
func universalNewlines(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(text([]byte(s)), "\r\n", "\n"), "\r", "\n")
}

// winLaunch starts a command as WAA's server does: always through the
// shell (cmd.exe /c), detached, google-chrome named chrome; the answer
// names the command as Python prints it.
func (a *call) winLaunch() {
	raw, err := io.ReadAll(io.LimitReader(a.r.Body, maxJSON+1))
	var b struct {
		Command json.RawMessage `json:"command"`
	}
	if err != nil || len(raw) > maxJSON || json.Unmarshal(raw, &b) != nil {
		a.json(http.StatusBadRequest, map[string]string{"error": "the request body is not the JSON object this route takes"})
		return
	}
	words, line, isLine, err := winCommandOf(b.Command, true)
	fail := func(msg string) {
		a.json(http.StatusInternalServerError, map[string]any{"status": "error", "message": msg, "shell": "True", "command": b.Command, "data": json.RawMessage(raw)})
	}
	if err != nil {
		fail(err.Error())
		return
	}
	for i, w := range words {
		if w == "google-chrome" {
			words[i] = "chrome"
			break
		}
	}
	pieces := []string{line}
	if !isLine {
		pieces = winCommandLine(words)
	}
	ctx, cancel := a.within(time.Minute)
	defer cancel()
	var home string
	if err := a.session(ctx, 0, winLaunchScript, powershell.Args{"Line": pieces}, &home); err != nil {
		fail(err.Error())
		return
	}
	shown := line
	if !isLine {
		expanded := make([]string, len(words))
		for i, w := range words {
			expanded[i] = w
			if strings.HasPrefix(w, "~/") {
				expanded[i] = home + w[1:]
			}
		}
		shown = pyReprList(expanded)
	}
	a.text(http.StatusOK, shown+" launched successfully")
}

// winForeground is the foreground window as the session script reports
// it, with the screen's size and the titles of the applications'
// windows.
type winForeground struct {
	Title   string   `json:"title"`
	Rect    [4]int   `json:"rect"`
	Width   int      `json:"width"`
	Height  int      `json:"height"`
	Windows []string `json:"windows"`
}

// winObservation answers WAA's /obs_winagent: the foreground window's
// image (cut from the hypervisor's screenshot), title and rectangle (the
// whole screen, titled Desktop, when no window has the focus), the open
// applications' window titles, and WAA's clipboard and human input, which
// hvkube has not: null and the no-question text.
func (a *call) winObservation() {
	ctx, cancel := a.within(time.Minute)
	defer cancel()
	var fg winForeground
	if err := a.session(ctx, 0, winForegroundScript, nil, &fg); err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	title, rect := fg.Title, fg.Rect
	if title == "" || title == "Program Manager" {
		title, rect = "Desktop", [4]int{0, 0, fg.Width, fg.Height}
	}
	screen, err := a.g.Screenshot(ctx)
	if err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	img, err := windowImage(screen, rect)
	if err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	a.json(http.StatusOK, map[string]any{
		"image": base64.StdEncoding.EncodeToString(img), "window_title": title, "rect": rect,
		"window_names_str": strings.Join(fg.Windows, "\n"), "computer_clipboard": nil,
		"human_input": winHumanInput, "status": "success",
	})
}

// maxWindowSide bounds a side of the image /obs_winagent cuts.
const maxWindowSide = 1 << 14

// windowImage is the part of screen (a PNG) inside rect (left, top, right,
// bottom), black where rect leaves the screen, as PIL's
// ImageGrab.grab(bbox) gives it, as a PNG.
func windowImage(screen []byte, rect [4]int) ([]byte, error) {
	w, h := rect[2]-rect[0], rect[3]-rect[1]
	if w <= 0 || h <= 0 || w > maxWindowSide || h > maxWindowSide {
		return nil, fmt.Errorf("the window's rectangle %v has no area to grab", rect)
	}
	src, err := png.Decode(bytes.NewReader(screen))
	if err != nil {
		return nil, fmt.Errorf("the screenshot: %w", err)
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(dst, dst.Bounds(), image.NewUniform(color.Black), image.Point{}, draw.Src)
	off := image.Pt(rect[0], rect[1])
	r := src.Bounds().Sub(off).Intersect(dst.Bounds())
	draw.Draw(dst, r, src, r.Min.Add(off), draw.Src)
	var b bytes.Buffer
	if err := png.Encode(&b, dst); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// winKnownFolder answers /desktop_path and /documents_path: the folder in
// the user's profile when it exists, else code with WAA's error.
func (a *call) winKnownFolder(folder, key string, code int) {
	ctx, cancel := a.within(time.Minute)
	defer cancel()
	var p string
	if err := a.script(ctx, winKnownFolderScript, powershell.Args{"Folder": folder}, &p); err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	if p == "" {
		a.json(code, map[string]string{"error": "Unsupported operating system or " + strings.ToLower(folder) + " path not found"})
		return
	}
	a.json(http.StatusOK, map[string]string{key: p})
}

// pathBody is a body with a "path", nil when the request has none.
type pathBody struct {
	Path *string `json:"path"`
}

func (a *call) winCreateFolder() {
	var b pathBody
	if !a.body(&b) {
		return
	}
	if b.Path == nil {
		a.json(http.StatusBadRequest, map[string]string{"error": "path required"})
		return
	}
	p := *b.Path
	fail := func() {
		a.json(http.StatusBadRequest, map[string]string{"status": "error", "message": "Failed to create " + p + "."})
	}
	if p == "" { // os.makedirs("") fails
		fail()
		return
	}
	ctx, cancel := a.within(time.Minute)
	defer cancel()
	var state string
	if err := a.script(ctx, winCreateFolderScript, powershell.Args{"Path": p}, &state); err != nil {
		fail()
		return
	}
	msg := p + " created."
	if state == "exists" {
		msg = p + " already exists."
	}
	a.json(http.StatusOK, map[string]string{"status": "success", "message": msg})
}

// winPathState is a file script's answer: what it found at path (ok, or
// why not) and what it read.
type winPathState struct {
	State string `json:"state"`
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	Data  []byte `json:"data"`
	Error string `json:"error"`
}

// winCreateFile writes content as WAA's server does (Python's text mode:
// line feeds become CR LF, in the system's ANSI code page, failing on a
// character it lacks), making the folder.
func (a *call) winCreateFile() {
	var b struct {
		pathBody
		Content *string `json:"content"`
	}
	if !a.body(&b) {
		return
	}
	if b.Path == nil {
		a.json(http.StatusBadRequest, map[string]string{"error": "path required"})
		return
	}
	content := ""
	if b.Content != nil {
		content = *b.Content
	}
	ctx, cancel := a.within(winFileWait)
	defer cancel()
	var st winPathState
	var err error
	if *b.Path == "" { // Path("") is the working directory
		st.State = "directory"
	} else {
		err = a.script(ctx, winCreateFileScript, powershell.Args{"Path": *b.Path, "Content": content}, &st)
	}
	switch {
	case err != nil:
		a.json(http.StatusBadRequest, map[string]string{"status": "error", "message": "Failed to create " + *b.Path + "."})
	case st.State == "directory":
		a.json(http.StatusBadRequest, map[string]string{"status": "error", "message": "path is not a file"})
	case st.State != "created":
		a.json(http.StatusBadRequest, map[string]string{"status": "error", "message": "Failed to create " + st.Path + "."})
	default:
		a.json(http.StatusOK, map[string]string{"status": "success", "message": st.Path + " created."})
	}
}

// winRecycle moves a file or folder to the user's recycle bin. Wildcards
// are refused: the shell's file operation would expand them.
func (a *call) winRecycle() {
	var b pathBody
	if !a.body(&b) {
		return
	}
	if b.Path == nil {
		a.json(http.StatusBadRequest, map[string]string{"error": "Missing 'path' parameter"})
		return
	}
	p := *b.Path
	fail := func() {
		a.json(http.StatusBadRequest, map[string]string{"status": "error", "message": "Failed to recycle " + p})
	}
	if p == "" || strings.ContainsAny(p, "*?\x00") {
		fail()
		return
	}
	ctx, cancel := a.within(time.Minute)
	defer cancel()
	if err := a.session(ctx, 0, winRecycleScript, powershell.Args{"Path": p}, nil); err != nil {
		fail()
		return
	}
	a.json(http.StatusOK, map[string]string{"status": "success", "message": p + " recycled"})
}

// winExists answers /folder_exists and /file_exists: 200 when the name
// exists in the path as that kind, 400 when not.
func (a *call) winExists(nameKey, kind string, dir bool) {
	var b map[string]*string
	if !a.body(&b) {
		return
	}
	if b[nameKey] == nil {
		a.json(http.StatusBadRequest, map[string]string{"error": nameKey + " required"})
		return
	}
	if b["path"] == nil {
		a.json(http.StatusBadRequest, map[string]string{"error": "path required"})
		return
	}
	name, p := *b[nameKey], *b["path"]
	ctx, cancel := a.within(time.Minute)
	defer cancel()
	var ok bool
	if err := a.script(ctx, winExistsScript, powershell.Args{"Path": p, "Name": name, "Directory": dir}, &ok); err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	if !ok {
		a.json(http.StatusBadRequest, map[string]string{"status": "error", "message": kind + " " + name + " does not exist in " + p + "."})
		return
	}
	a.json(http.StatusOK, map[string]string{"status": "success", "message": kind + " " + name + " exists in " + p + "."})
}

// winWallpaper sends the user's wallpaper file. WAA's server answers its
// failures through its catch-all handler: 500 with the HTTP error's text.
func (a *call) winWallpaper() {
	ctx, cancel := a.within(winFileWait)
	defer cancel()
	var p string
	if err := a.session(ctx, 0, winWallpaperGetScript, nil, &p); err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	if p == "" {
		a.failed(http.StatusInternalServerError, "404 Not Found: Wallpaper file not found")
		return
	}
	var st winPathState
	err := a.script(ctx, winReadFileScript, powershell.Args{"Path": p, "Max": int64(guest.MaxFile)}, &st)
	if err != nil || st.State != "ok" {
		a.failed(http.StatusInternalServerError, "500 Internal Server Error: Unable to serve the wallpaper file")
		return
	}
	a.w.Header().Set("Content-Type", "image/png")
	a.w.Header().Set("Content-Length", strconv.Itoa(len(st.Data)))
	a.w.Write(st.Data)
}

// winTreeEntry is an entry of the tree script's list: its parent's index
// (-1 for the root), name, whether it is a directory, and the error
// listing it met.
type winTreeEntry struct {
	Parent int     `json:"p"`
	Name   string  `json:"n"`
	Dir    bool    `json:"d"`
	Error  *string `json:"e"`
}

// winNode is a node of WAA's directory tree: a directory has children, a
// file none, and a directory that could not be listed is only its error.
type winNode struct {
	entry    winTreeEntry
	children []*winNode
}

func (n *winNode) MarshalJSON() ([]byte, error) {
	switch {
	case n.entry.Error != nil:
		return json.Marshal(map[string]string{"error": *n.entry.Error})
	case !n.entry.Dir:
		return json.Marshal(struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}{"file", n.entry.Name})
	}
	return json.Marshal(struct {
		Type     string     `json:"type"`
		Name     string     `json:"name"`
		Children []*winNode `json:"children"`
	}{"directory", n.entry.Name, append([]*winNode{}, n.children...)})
}

// winTree builds WAA's tree of the script's entries (parents before their
// children); the root, entry 0, is named name.
func winTree(name string, entries []winTreeEntry) *winNode {
	if len(entries) == 0 {
		return &winNode{entry: winTreeEntry{Parent: -1, Name: name, Dir: true}}
	}
	nodes := make([]*winNode, len(entries))
	for i, e := range entries {
		nodes[i] = &winNode{entry: e}
		if i > 0 && e.Parent >= 0 && e.Parent < i {
			nodes[e.Parent].children = append(nodes[e.Parent].children, nodes[i])
		}
	}
	nodes[0].entry.Name, nodes[0].entry.Dir = name, true
	return nodes[0]
}

func (a *call) winListDirectory() {
	var b pathBody
	if !a.body(&b) {
		return
	}
	if b.Path == nil {
		a.json(http.StatusBadRequest, map[string]string{"error": "Missing 'path' parameter"})
		return
	}
	ctx, cancel := a.within(winListWait)
	defer cancel()
	var out struct {
		Directory bool           `json:"directory"`
		Entries   []winTreeEntry `json:"entries"`
	}
	if err := a.script(ctx, winTreeScript, powershell.Args{"Path": *b.Path, "Max": maxTreeEntries}, &out); err != nil {
		a.json(http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	if !out.Directory {
		a.json(http.StatusBadRequest, map[string]string{"error": "The provided path is not a directory"})
		return
	}
	a.json(http.StatusOK, map[string]any{"directory_tree": winTree(ntBasename(*b.Path), out.Entries)})
}

// winFile sends a file of the guest (form file_path: ~ and environment
// variables are the user's, a relative path is in the user's profile
// folder).
func (a *call) winFile() {
	if !a.form(maxJSON) {
		return
	}
	p := a.r.PostForm.Get("file_path")
	if p == "" {
		a.json(http.StatusBadRequest, map[string]string{"error": "file_path is required"})
		return
	}
	ctx, cancel := a.within(winFileWait)
	defer cancel()
	var st winPathState
	err := a.script(ctx, winReadFileScript, powershell.Args{"Path": p, "Max": int64(guest.MaxFile)}, &st)
	switch {
	case err != nil:
		a.failed(http.StatusInternalServerError, err.Error())
	case st.State == "missing":
		a.json(http.StatusNotFound, map[string]string{"error": "File not found"})
	case st.State == "directory":
		a.failed(http.StatusInternalServerError, "[Errno 13] Permission denied: "+pyRepr(st.Path))
	case st.State == "large":
		a.json(http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("Failed to serve file: %s: %d bytes, over %d: %v", st.Path, st.Size, guest.MaxFile, guest.ErrTooLarge)})
	default:
		a.w.Header().Set("Content-Type", "application/octet-stream")
		a.w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": ntBasename(st.Path)}))
		a.w.Header().Set("Content-Length", strconv.Itoa(len(st.Data)))
		a.w.Write(st.Data)
	}
}

// winUpload writes an uploaded file as WAA's server does: into an
// existing folder (a missing one fails, as Python's open does).
func (a *call) winUpload() {
	p, data, ok, err := a.uploaded()
	if !ok {
		return
	}
	switch {
	case err != nil:
		a.failed(http.StatusInternalServerError, err.Error())
		return
	case len(data) > guest.MaxFile:
		a.json(http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("Failed to upload file: over %d bytes: %v", guest.MaxFile, guest.ErrTooLarge)})
		return
	}
	ctx, cancel := a.within(winFileWait)
	defer cancel()
	var st winPathState
	err = a.script(ctx, winWriteFileScript, powershell.Args{"Path": p, "Data": data}, &st)
	switch {
	case err != nil:
		a.failed(http.StatusInternalServerError, err.Error())
	case st.State == "missing":
		a.failed(http.StatusInternalServerError, "[Errno 2] No such file or directory: "+pyRepr(st.Path))
	case st.State == "directory":
		a.failed(http.StatusInternalServerError, "[Errno 13] Permission denied: "+pyRepr(st.Path))
	default:
		a.text(http.StatusOK, "File Uploaded")
	}
}

// winResolved is a path as WAA's server reads it (expanded: shown) and
// as the guest finds it (path, in the user's profile folder when
// relative).
type winResolved struct {
	Path   string `json:"path"`
	Shown  string `json:"shown"`
	Exists bool   `json:"exists"`
}

// resolve expands and finds a path a request gives; on failure it
// answers with fail.
func (a *call) resolve(ctx context.Context, p string, fail func(string)) (winResolved, bool) {
	var r winResolved
	if err := a.script(ctx, winResolveScript, powershell.Args{"Path": p}, &r); err != nil {
		fail(err.Error())
		return r, false
	}
	r.Shown = pyWinPath(r.Shown)
	return r, true
}

func (a *call) winChangeWallpaper() {
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
	ctx, cancel := a.within(time.Minute)
	defer cancel()
	fail := func(msg string) { a.text(http.StatusInternalServerError, "Failed to change wallpaper. Error: "+msg) }
	r, ok := a.resolve(ctx, b.Path, fail)
	switch {
	case !ok:
		return
	case !r.Exists:
		a.text(http.StatusNotFound, "File not found: "+r.Shown)
		return
	}
	if err := a.session(ctx, 0, winWallpaperSetScript, powershell.Args{"Path": r.Path}, nil); err != nil {
		fail(err.Error())
		return
	}
	a.text(http.StatusOK, "Wallpaper changed successfully")
}

// winDownloadFile fetches a URL in the guest (over the sandbox's own
// network and egress policy) into a file, making its folder; three tries.
func (a *call) winDownloadFile() {
	b, ok := a.download()
	if !ok {
		return
	}
	ctx, cancel := a.within(6 * time.Minute)
	defer cancel()
	var last error
	for i := 0; i < winDownloadTries && ctx.Err() == nil; i++ {
		var size int64
		if last = a.script(ctx, winDownloadScript, powershell.Args{"Url": b.URL, "Path": b.Path}, &size); last == nil {
			a.text(http.StatusOK, "File downloaded successfully")
			return
		}
	}
	msg := "no try"
	if last != nil {
		msg = last.Error()
	}
	a.text(http.StatusInternalServerError, "Failed to download "+b.URL+". No retries left. Error: "+msg)
}

// winOpenFile opens a file or folder with its default application in the
// user's session (os.startfile), then waits as WAA's server does.
func (a *call) winOpenFile() {
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
	ctx, cancel := a.within(time.Minute + winOpenWait)
	defer cancel()
	shown := b.Path
	fail := func(msg string) { a.text(http.StatusInternalServerError, "Failed to open "+shown+". Error: "+msg) }
	r, ok := a.resolve(ctx, b.Path, fail)
	switch {
	case !ok:
		return
	case !r.Exists:
		a.text(http.StatusNotFound, "File not found: "+r.Shown)
		return
	}
	shown = r.Shown
	if err := a.session(ctx, 0, winOpenScript, powershell.Args{"Path": r.Path}, nil); err != nil {
		fail(err.Error())
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(winOpenWait):
	}
	a.text(http.StatusOK, "File opened successfully")
}

// Window actions.
const (
	winActivate = "activate"
	winClose    = "close"
)

// winWindow activates or closes a window by title, as WAA's server does
// with pygetwindow: visible top-level windows whose title holds the name
// in any case; strict, the first whose title is the name exactly. (WAA's
// own strict match compares a title with a window, which never matches;
// this one compares titles.)
func (a *call) winWindow(action string) {
	var b windowBody
	if !a.body(&b) {
		return
	}
	if b.WindowName == "" {
		a.text(http.StatusBadRequest, "window_name required")
		return
	}
	if b.ByClass {
		msg := "Get window by class name is not supported on Windows currently."
		if action == winActivate {
			msg = "Get window by class name is currently not supported on Windows."
		}
		a.text(http.StatusInternalServerError, msg)
		return
	}
	ctx, cancel := a.within(time.Minute)
	defer cancel()
	var found int
	s := winActivateScript
	if action == winClose {
		s = winCloseScript
	}
	if err := a.session(ctx, 0, s, powershell.Args{"Name": b.WindowName, "Strict": b.Strict}, &found); err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	switch {
	case found == 0:
		a.text(http.StatusNotFound, "Window "+b.WindowName+" not found (empty results)")
	case found < 0:
		a.text(http.StatusNotFound, "Window "+b.WindowName+" not found (strict mode).")
	case action == winActivate:
		a.text(http.StatusOK, "Window activated successfully")
	default:
		a.text(http.StatusOK, "Window closed successfully.")
	}
}

// winCloseAll closes every visible titled window but the desktop's
// (Program Manager) and an administrator's PowerShell console, as WAA's
// server does.
func (a *call) winCloseAll() {
	ctx, cancel := a.within(time.Minute)
	defer cancel()
	if err := a.session(ctx, 0, winCloseAllScript, nil, nil); err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	a.text(http.StatusOK, "All windows closed successfully.")
}

// winClearTaskFiles deletes the files of the user's Downloads folder
// (WAA's is its user's, C:\Users\Docker\Downloads) but desktop.ini and
// names beginning with a dot (which glob's * leaves), and says what it
// did as WAA's server does.
func (a *call) winClearTaskFiles() {
	ctx, cancel := a.within(winFileWait)
	defer cancel()
	var out struct {
		Dir     string   `json:"dir"`
		Missing bool     `json:"missing"`
		Removed []string `json:"removed"`
		Failed  []string `json:"failed"`
	}
	if err := a.script(ctx, winClearScript, nil, &out); err != nil {
		a.failed(http.StatusInternalServerError, err.Error())
		return
	}
	dir := pyRepr(out.Dir)
	var msg string
	switch {
	case out.Missing:
		a.failed(http.StatusInternalServerError, "[WinError 3] The system cannot find the path specified: "+dir)
		return
	case len(out.Failed) > 0 && len(out.Removed) > 0:
		msg = fmt.Sprintf("Failed to remove (%s) but sucessfully cleared (%s) from %s.", pyReprList(out.Failed), pyReprList(out.Removed), dir)
	case len(out.Failed) > 0:
		msg = fmt.Sprintf("Failed to remove (%s) from %s.", pyReprList(out.Failed), dir)
	case len(out.Removed) > 0:
		msg = fmt.Sprintf("All task files (%s) cleared successfully from %s.", pyReprList(out.Removed), dir)
	default:
		msg = "No task files to clear from " + dir + "."
	}
	a.text(http.StatusOK, msg)
}

// pyRepr is Python's repr of a string, as WAA's answers print paths.
func pyRepr(s string) string {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\' || r == rune(q):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// pyReprList is Python's repr of a list of strings.
func pyReprList(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = pyRepr(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// ntBasename is Python's ntpath.basename: what follows the last / or \
// (or the drive's colon).
func ntBasename(p string) string {
	if len(p) >= 2 && p[1] == ':' {
		p = p[2:]
	}
	return p[strings.LastIndexAny(p, `/\`)+1:]
}

// pyWinPath is str(pathlib.Path(p)) on Windows: separators as \, repeated
// ones and . parts dropped, no trailing separator but the root's.
func pyWinPath(p string) string {
	p = strings.ReplaceAll(p, "/", `\`)
	var prefix string
	switch {
	case strings.HasPrefix(p, `\\`):
		prefix, p = `\\`, p[2:]
	case len(p) >= 2 && p[1] == ':':
		prefix, p = p[:2], p[2:]
	}
	if strings.HasPrefix(p, `\`) {
		prefix += `\`
	}
	var parts []string
	for _, s := range strings.Split(p, `\`) {
		if s != "" && s != "." {
			parts = append(parts, s)
		}
	}
	if prefix == "" && len(parts) == 0 {
		return "."
	}
	return prefix + strings.Join(parts, `\`)
}

// Scripts run in a Windows guest for WAA's routes. Those run in the
// user's session (guest.InSession) go through cmd.exe there and must stay
// short (TestWindowsSessionScriptsFit).
var (
	// winUserPrelude finds the logged-on desktop user (its name and
	// profile folder) for scripts that run outside the user's session,
	// and expands and resolves paths as WAA's server, running as that
	// user, does: ~ is the profile folder; %NAME%, $NAME and ${NAME} the
	// user's variables (those that derive from the profile) or the
	// machine's, and unknown ones stay as written; a relative path is in
	// the profile folder.
	winUserPrelude = `function Get-DesktopUser {
  $account = (Get-CimInstance -ClassName Win32_ComputerSystem).UserName
  if (-not $account) { throw 'no user is logged on to the desktop' }
  $sid = (New-Object System.Security.Principal.NTAccount($account)).Translate([System.Security.Principal.SecurityIdentifier]).Value
  $found = @(Get-CimInstance -ClassName Win32_UserProfile | Where-Object { $_.SID -eq $sid })
  if ($found.Count -eq 0) { throw "the desktop user $account has no profile folder" }
  [pscustomobject]@{ Name = ($account -split '\\')[-1]; Home = [string]$found[0].LocalPath }
}
function Expand-DesktopPath([string]$Path, $User) {
  $userHome = $User.Home
  if ($Path -eq '~' -or $Path -match '^~[\\/]') { $Path = $userHome + $Path.Substring(1) }
  $vars = @{
    USERPROFILE = $userHome; USERNAME = $User.Name
    HOMEDRIVE = $userHome.Substring(0, 2); HOMEPATH = $userHome.Substring(2)
    APPDATA = [IO.Path]::Combine($userHome, 'AppData\Roaming'); LOCALAPPDATA = [IO.Path]::Combine($userHome, 'AppData\Local')
    TEMP = [IO.Path]::Combine($userHome, 'AppData\Local\Temp'); TMP = [IO.Path]::Combine($userHome, 'AppData\Local\Temp')
  }
  $expand = {
    param($m)
    if ($m.Value -eq '%%') { return '%' }
    if ($m.Value -eq '$$') { return '$' }
    $name = $m.Groups[1].Value + $m.Groups[2].Value + $m.Groups[3].Value
    if ($vars.ContainsKey($name)) { return $vars[$name] }
    $value = [Environment]::GetEnvironmentVariable($name)
    if ($null -eq $value) { $m.Value } else { $value }
  }
  [regex]::Replace($Path, '%%|\$\$|%([^%]+)%|\$\{([^}]+)\}|\$([A-Za-z0-9_-]+)', [Text.RegularExpressions.MatchEvaluator]$expand)
}
function Resolve-DesktopPath([string]$Path, $User) {
  if ([IO.Path]::IsPathRooted($Path)) { $Path } else { [IO.Path]::Combine($User.Home, $Path) }
}
`

	winKnownFolderScript = powershell.Script{Name: "waa-known-folder", Text: `param([string]$Folder)
` + winUserPrelude + `$p = [IO.Path]::Combine((Get-DesktopUser).Home, $Folder)
if (Test-Path -LiteralPath $p) { $p } else { '' }
`}

	winResolveScript = powershell.Script{Name: "waa-resolve", Text: `param([string]$Path)
` + winUserPrelude + `$user = Get-DesktopUser
$shown = Expand-DesktopPath $Path $user
$p = [IO.Path]::GetFullPath((Resolve-DesktopPath $shown $user))
[pscustomobject]@{ path = $p; shown = $shown; exists = ([IO.File]::Exists($p) -or [IO.Directory]::Exists($p)) }
`}

	winReadFileScript = powershell.Script{Name: "waa-read-file", Text: `param([string]$Path, [long]$Max)
` + winUserPrelude + `$user = Get-DesktopUser
$p = Resolve-DesktopPath (Expand-DesktopPath $Path $user) $user
if ([IO.Directory]::Exists($p)) { return [pscustomobject]@{ state = 'directory'; path = $p } }
if (-not [IO.File]::Exists($p)) { return [pscustomobject]@{ state = 'missing'; path = $p } }
$size = ([IO.FileInfo]::new($p)).Length
if ($size -gt $Max) { return [pscustomobject]@{ state = 'large'; path = $p; size = $size } }
[pscustomobject]@{ state = 'ok'; path = $p; data = [Convert]::ToBase64String([IO.File]::ReadAllBytes($p)) }
`}

	winWriteFileScript = powershell.Script{Name: "waa-write-file", Text: `param([string]$Path, [string]$Data)
` + winUserPrelude + `$user = Get-DesktopUser
$p = Resolve-DesktopPath (Expand-DesktopPath $Path $user) $user
if ([IO.Directory]::Exists($p)) { return [pscustomobject]@{ state = 'directory'; path = $p } }
$dir = [IO.Path]::GetDirectoryName($p)
if ($dir -and -not [IO.Directory]::Exists($dir)) { return [pscustomobject]@{ state = 'missing'; path = $p } }
[IO.File]::WriteAllBytes($p, [Convert]::FromBase64String($Data))
[pscustomobject]@{ state = 'ok'; path = $p }
`}

	winCreateFolderScript = powershell.Script{Name: "waa-create-folder", Text: `param([string]$Path)
` + winUserPrelude + `$p = Resolve-DesktopPath $Path (Get-DesktopUser)
if ([IO.File]::Exists($p) -or [IO.Directory]::Exists($p)) { return 'exists' }
[void][IO.Directory]::CreateDirectory($p)
'created'
`}

	// Python's text mode on Windows: LF written as CR LF, in the ANSI
	// code page, failing on a character the code page lacks.
	winCreateFileScript = powershell.Script{Name: "waa-create-file", Text: `param([string]$Path, [string]$Content)
` + winUserPrelude + `$p = [IO.Path]::GetFullPath((Resolve-DesktopPath $Path (Get-DesktopUser)))
if ([IO.Directory]::Exists($p)) { return [pscustomobject]@{ state = 'directory'; path = $p } }
try {
  [void][IO.Directory]::CreateDirectory([IO.Path]::GetDirectoryName($p))
  $ansi = [Text.Encoding]::GetEncoding([Text.Encoding]::Default.CodePage, [Text.EncoderFallback]::ExceptionFallback, [Text.DecoderFallback]::ReplacementFallback)
  [IO.File]::WriteAllText($p, $Content.Replace([string][char]10, [string][char]13 + [char]10), $ansi)
  [pscustomobject]@{ state = 'created'; path = $p }
} catch {
  [pscustomobject]@{ state = 'failed'; path = $p; error = [string]$_.Exception.Message }
}
`}

	winExistsScript = powershell.Script{Name: "waa-exists", Text: `param([string]$Path, [string]$Name, [bool]$Directory)
` + winUserPrelude + `try { $p = Resolve-DesktopPath ([IO.Path]::Combine($Path, $Name)) (Get-DesktopUser) } catch { return $false }
if ($Directory) { [IO.Directory]::Exists($p) } else { [IO.File]::Exists($p) }
`}

	// winTreeScript lists directory Path below it, breadth first, at most
	// Max entries: each its parent's index, name, whether a directory
	// (following links, as os.path.isdir does) and the error listing it
	// met. Entry 0 is the directory itself.
	winTreeScript = powershell.Script{Name: "waa-list-directory", Text: `param([string]$Path, [int]$Max)
` + winUserPrelude + `try { $root = Resolve-DesktopPath $Path (Get-DesktopUser) } catch { $root = '' }
if (-not $root -or -not [IO.Directory]::Exists($root)) { return [pscustomobject]@{ directory = $false; entries = @() } }
$entries = New-Object System.Collections.Generic.List[object]
$entries.Add([pscustomobject]@{ p = -1; n = ''; d = $true; e = $null })
$todo = New-Object System.Collections.Generic.Queue[object]
$todo.Enqueue(@(0, $root))
while ($todo.Count -gt 0 -and $entries.Count -lt $Max) {
  $parent, $dir = $todo.Dequeue()
  try { $items = @(([IO.DirectoryInfo]::new($dir)).EnumerateFileSystemInfos()) } catch { $entries[$parent].e = [string]$_.Exception.GetBaseException().Message; continue }
  foreach ($item in $items) {
    if ($entries.Count -ge $Max) { break }
    $isDir = $item -is [IO.DirectoryInfo]
    $entries.Add([pscustomobject]@{ p = $parent; n = [string]$item.Name; d = $isDir; e = $null })
    if ($isDir) { $todo.Enqueue(@(($entries.Count - 1), $item.FullName)) }
  }
}
[pscustomobject]@{ directory = $true; entries = $entries.ToArray() }
`}

	winDownloadScript = powershell.Script{Name: "waa-download-file", Text: `param([string]$Url, [string]$Path)
` + winUserPrelude + `$user = Get-DesktopUser
$p = [IO.Path]::GetFullPath((Resolve-DesktopPath (Expand-DesktopPath $Path $user) $user))
[void][IO.Directory]::CreateDirectory([IO.Path]::GetDirectoryName($p))
[Net.ServicePointManager]::SecurityProtocol = [Net.ServicePointManager]::SecurityProtocol -bor [Net.SecurityProtocolType]::Tls12
$client = New-Object Net.WebClient
try {
  $client.DownloadFile($Url, $p)
} catch {
  Remove-Item -LiteralPath $p -Force -ErrorAction SilentlyContinue
  throw $_.Exception.GetBaseException().Message
} finally {
  $client.Dispose()
}
([IO.FileInfo]::new($p)).Length
`}

	// winClearScript deletes the files in the user's Downloads folder
	// (glob's *: names beginning with a dot are left) but desktop.ini;
	// a folder there fails, as os.remove does.
	winClearScript = powershell.Script{Name: "waa-clear-task-files", Text: `param()
` + winUserPrelude + `$dir = [IO.Path]::Combine((Get-DesktopUser).Home, 'Downloads')
if (-not [IO.Directory]::Exists($dir)) { return [pscustomobject]@{ dir = $dir; missing = $true; removed = @(); failed = @() } }
$removed = New-Object System.Collections.Generic.List[string]
$failed = New-Object System.Collections.Generic.List[string]
foreach ($name in @([IO.Directory]::GetFileSystemEntries($dir) | ForEach-Object { [IO.Path]::GetFileName($_) })) {
  if ($name.StartsWith('.')) { continue }
  $f = $dir + '\' + $name
  if ($f -ceq ($dir + '\desktop.ini')) { continue }
  try { [IO.File]::Delete($f); $removed.Add($f) } catch { $failed.Add($f) }
}
[pscustomobject]@{ dir = $dir; missing = $false; removed = $removed.ToArray(); failed = $failed.ToArray() }
`}

	// winExecScript runs a command (in the user's session) and waits at
	// most TimeoutSeconds, as subprocess.run does: Program (or with Shell
	// cmd.exe) with Arguments, both in pieces joined with the profile
	// folder. Its standard handles are made not inheritable first, so
	// that a program the command leaves running does not hold the
	// session's files.
	winExecScript = powershell.Script{Name: "waa-exec", Text: `param([bool]$Shell, [string[]]$Program, [string[]]$Arguments, [int]$TimeoutSeconds)
Add-Type -Namespace H -Name K -MemberDefinition '[DllImport("kernel32")] public static extern IntPtr GetStdHandle(int n); [DllImport("kernel32")] public static extern bool SetHandleInformation(IntPtr h, int m, int f);'
foreach ($n in -10, -11, -12) { [void][H.K]::SetHandleInformation([H.K]::GetStdHandle($n), 1, 0) }
$i = New-Object Diagnostics.ProcessStartInfo
if ($Shell) { $i.FileName = $env:ComSpec } else { $i.FileName = $Program -join $env:USERPROFILE }
$i.Arguments = $Arguments -join $env:USERPROFILE
$i.UseShellExecute = $false
$i.RedirectStandardInput = $true
$i.RedirectStandardOutput = $true
$i.RedirectStandardError = $true
$i.StandardOutputEncoding = [Text.Encoding]::Default
$i.StandardErrorEncoding = [Text.Encoding]::Default
try { $p = [Diagnostics.Process]::Start($i) } catch { $e = $_.Exception.GetBaseException(); throw ('[WinError {0}] {1}' -f $e.NativeErrorCode, $e.Message) }
$p.StandardInput.Close()
$out = $p.StandardOutput.ReadToEndAsync()
$err = $p.StandardError.ReadToEndAsync()
if (-not $p.WaitForExit($TimeoutSeconds * 1000)) { $p.Kill(); Write-Error -Category OperationTimeout -Message 'the command timed out' }
[pscustomobject]@{ returncode = $p.ExitCode; output = $out.Result; error = $err.Result }
`}

	// winLaunchScript starts cmd.exe /c with Line (pieces joined with the
	// profile folder), hidden, through WMI (Win32_Process), so that what
	// it starts outlives the session's script; it answers the folder.
	winLaunchScript = powershell.Script{Name: "waa-launch", Text: `param([string[]]$Line)
$s = New-CimInstance -CimClass (Get-CimClass -ClassName Win32_ProcessStartup) -ClientOnly -Property @{ ShowWindow = [uint16]0 }
$command = '"' + $env:ComSpec + '" /c "' + ($Line -join $env:USERPROFILE) + '"'
$r = Invoke-CimMethod -ClassName Win32_Process -MethodName Create -Arguments @{ CommandLine = $command; CurrentDirectory = $env:USERPROFILE; ProcessStartupInformation = $s }
if ($r.ReturnValue -ne 0) { throw ('Win32_Process.Create returned ' + $r.ReturnValue) }
$env:USERPROFILE
`}

	// winOpenScript opens Path with its default application (the shell's
	// open, os.startfile) from a hidden PowerShell started through WMI,
	// which gets the path in its environment, never in its command.
	winOpenScript = powershell.Script{Name: "waa-open-file", Text: `param([string]$Path)
$vars = @{}
foreach ($e in [Environment]::GetEnvironmentVariables().GetEnumerator()) { $vars[[string]$e.Key] = [string]$e.Value }
$vars['HVKUBE_OPEN_PATH'] = $Path
$block = [string[]]@($vars.GetEnumerator() | ForEach-Object { $_.Key + '=' + $_.Value })
$s = New-CimInstance -CimClass (Get-CimClass -ClassName Win32_ProcessStartup) -ClientOnly -Property @{ ShowWindow = [uint16]0; EnvironmentVariables = $block }
$r = Invoke-CimMethod -ClassName Win32_Process -MethodName Create -Arguments @{ CommandLine = 'powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -Command "[void][Diagnostics.Process]::Start($env:HVKUBE_OPEN_PATH)"'; ProcessStartupInformation = $s }
if ($r.ReturnValue -ne 0) { throw ('Win32_Process.Create returned ' + $r.ReturnValue) }
`}

	winScreenSizeScript = powershell.Script{Name: "waa-screen-size", Text: `param()
Add-Type -Namespace W -Name M -MemberDefinition '[DllImport("user32.dll")] public static extern bool SetProcessDPIAware(); [DllImport("user32.dll")] public static extern int GetSystemMetrics(int i);'
[void][W.M]::SetProcessDPIAware()
[pscustomobject]@{ width = [W.M]::GetSystemMetrics(0); height = [W.M]::GetSystemMetrics(1) }
`}

	// winForegroundScript reports the foreground window's title and
	// rectangle (left, top, right, bottom, in pixels), the screen's size
	// and the titles of the applications' main windows.
	winForegroundScript = powershell.Script{Name: "waa-foreground", Text: `param()
Add-Type -Namespace W -Name F -MemberDefinition '[DllImport("user32.dll")] public static extern bool SetProcessDPIAware(); [DllImport("user32.dll")] public static extern IntPtr GetForegroundWindow(); [DllImport("user32.dll")] public static extern bool GetWindowRect(IntPtr h, int[] r); [DllImport("user32.dll", CharSet = CharSet.Unicode)] public static extern int GetWindowText(IntPtr h, System.Text.StringBuilder s, int n); [DllImport("user32.dll")] public static extern int GetSystemMetrics(int i);'
[void][W.F]::SetProcessDPIAware()
$h = [W.F]::GetForegroundWindow()
$t = New-Object System.Text.StringBuilder 1024
[void][W.F]::GetWindowText($h, $t, 1024)
$r = New-Object int[] 4
[void][W.F]::GetWindowRect($h, $r)
$names = @(Get-Process | Where-Object { $_.MainWindowTitle } | ForEach-Object { [string]$_.MainWindowTitle })
[pscustomobject]@{ title = $t.ToString(); rect = $r; width = [W.F]::GetSystemMetrics(0); height = [W.F]::GetSystemMetrics(1); windows = $names }
`}

	// winWindowsCode lists the visible top-level windows (as pygetwindow
	// does: EnumWindows, IsWindowVisible) with their titles, for the
	// window scripts' Add-Type; they add their own functions before it.
	winWindowsCode = `public class Win { public IntPtr H; public string T; }
delegate bool P(IntPtr h, IntPtr l);
[DllImport("user32")] static extern bool EnumWindows(P p, IntPtr l);
[DllImport("user32")] static extern bool IsWindowVisible(IntPtr h);
[DllImport("user32", CharSet = CharSet.Unicode)] static extern int GetWindowText(IntPtr h, System.Text.StringBuilder s, int n);
public static Win[] All() {
  var r = new System.Collections.Generic.List<Win>();
  EnumWindows((h, l) => { if (IsWindowVisible(h)) { var s = new System.Text.StringBuilder(1024); GetWindowText(h, s, 1024); r.Add(new Win { H = h, T = s.ToString() }); } return true; }, IntPtr.Zero);
  return r.ToArray();
}
'@
`
	// winPickWindow picks the window a request names: of $found, the
	// windows whose title holds $Name in any case, the first ($h), or with
	// $Strict the first titled $Name exactly. Without one the script
	// answers minus the number found.
	winPickWindow = `$found = @([W.E]::All() | Where-Object { $_.T.IndexOf($Name, [StringComparison]::OrdinalIgnoreCase) -ge 0 })
$pick = @($found | Where-Object { -not $Strict -or $_.T -ceq $Name })
if ($pick.Count -eq 0) { return -$found.Count }
$h = $pick[0].H
`
	winPostClose = `[DllImport("user32")] public static extern bool PostMessage(IntPtr h, int m, IntPtr w, IntPtr l);
`

	// winActivateScript activates the window winPickWindow picks: brings
	// it to the foreground or, when it is minimized or Windows keeps the
	// foreground elsewhere, minimizes and restores it (which activates
	// it). It answers the number found.
	winActivateScript = powershell.Script{Name: "waa-activate-window", Text: `param([string]$Name, [bool]$Strict)
Add-Type -Namespace W -Name E -MemberDefinition @'
[DllImport("user32")] static extern bool IsIconic(IntPtr h);
[DllImport("user32")] static extern bool ShowWindow(IntPtr h, int c);
[DllImport("user32")] static extern bool SetForegroundWindow(IntPtr h);
public static void Activate(IntPtr h) { if (IsIconic(h) || !SetForegroundWindow(h)) { ShowWindow(h, 6); ShowWindow(h, 9); } }
` + winWindowsCode + winPickWindow + `[W.E]::Activate($h)
$found.Count
`}

	// winCloseScript closes (WM_CLOSE) the window winPickWindow picks and
	// answers the number found.
	winCloseScript = powershell.Script{Name: "waa-close-window", Text: `param([string]$Name, [bool]$Strict)
Add-Type -Namespace W -Name E -MemberDefinition @'
` + winPostClose + winWindowsCode + winPickWindow + `[void][W.E]::PostMessage($h, 16, [IntPtr]::Zero, [IntPtr]::Zero)
$found.Count
`}

	// winCloseAllScript closes every visible titled window but the
	// desktop's (Program Manager) and an administrator's PowerShell
	// console.
	winCloseAllScript = powershell.Script{Name: "waa-close-all", Text: `param()
Add-Type -Namespace W -Name E -MemberDefinition @'
` + winPostClose + winWindowsCode + `foreach ($w in [W.E]::All()) {
  if ($w.T -and $w.T -ne 'Program Manager' -and $w.T -ne 'Administrator: C:\Windows\System32\WindowsPowerShell\v1.0\powershell.exe') { [void][W.E]::PostMessage($w.H, 16, [IntPtr]::Zero, [IntPtr]::Zero) }
}
`}

	winWallpaperGetScript = powershell.Script{Name: "waa-wallpaper-get", Text: `param()
[string](Get-ItemProperty -Path 'HKCU:\Control Panel\Desktop' -Name Wallpaper -ErrorAction SilentlyContinue).Wallpaper
`}

	winWallpaperSetScript = powershell.Script{Name: "waa-wallpaper-set", Text: `param([string]$Path)
Add-Type -Namespace W -Name P -MemberDefinition '[DllImport("user32.dll", CharSet = CharSet.Unicode)] public static extern bool SystemParametersInfo(int a, int b, string c, int d);'
[void][W.P]::SystemParametersInfo(20, 0, $Path, 3)
`}

	// winRecycleScript moves Path (in the user's profile folder when
	// relative) to the recycle bin with the shell's file operation, with
	// no dialog, as send2trash does.
	winRecycleScript = powershell.Script{Name: "waa-recycle", Text: `param([string]$Path)
Add-Type -Namespace W -Name R -MemberDefinition '[StructLayout(LayoutKind.Sequential, CharSet = CharSet.Unicode)] public struct Op { public IntPtr h; public uint f; public string a; public string b; public ushort g; public int x; public IntPtr m; public string t; } [DllImport("shell32.dll", CharSet = CharSet.Unicode)] public static extern int SHFileOperation(ref Op o);'
$p = [IO.Path]::GetFullPath([IO.Path]::Combine($env:USERPROFILE, $Path))
if (-not ([IO.File]::Exists($p) -or [IO.Directory]::Exists($p))) { throw "$p does not exist" }
$o = New-Object W.R+Op
$o.f = 3; $o.a = $p + [char]0; $o.g = 0x454
$rc = [W.R]::SHFileOperation([ref]$o)
if ($rc -ne 0 -or $o.x -ne 0) { throw ('SHFileOperation returned ' + $rc) }
`}
)
