package osworld

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"

	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/powershell"
	"github.com/hvkube/hvkube/internal/powershell/pstest"
)

const goldenDir = "testdata/windows"

// guestGoldens are the guest package's golden scripts the WAA routes run
// through it: the session's wrapper, the desktop's readiness and the
// pointer.
var guestGoldens = []string{"guest-in-session", "guest-ready", "guest-cursor"}

// winScripts are the scripts of windows.go, with the arguments their
// golden files keep.
var winScripts = []struct {
	s    powershell.Script
	args powershell.Args
}{
	{winKnownFolderScript, powershell.Args{"Folder": "Desktop"}},
	{winResolveScript, powershell.Args{"Path": `~\Documents\report.docx`}},
	{winReadFileScript, powershell.Args{"Path": `%USERPROFILE%\Desktop\notes.txt`, "Max": int64(16 << 20)}},
	{winWriteFileScript, powershell.Args{"Path": `C:\Users\Docker\Desktop\notes.txt`, "Data": []byte("hello")}},
	{winCreateFolderScript, powershell.Args{"Path": `C:\Users\Docker\Desktop\Projects`}},
	{winCreateFileScript, powershell.Args{"Path": `C:\Users\Docker\Desktop\todo.txt`, "Content": "one\ntwo"}},
	{winExistsScript, powershell.Args{"Path": `C:\Users\Docker\Desktop`, "Name": "Projects", "Directory": true}},
	{winTreeScript, powershell.Args{"Path": `C:\Users\Docker\Desktop`, "Max": 20000}},
	{winDownloadScript, powershell.Args{"Url": "https://example.com/a.pdf", "Path": `C:\Users\Docker\Downloads\a.pdf`}},
	{winClearScript, nil},
	{winExecScript, powershell.Args{"Shell": false, "Program": []string{"python"}, "Arguments": []string{`-c "import pyautogui; pyautogui.click(10, 20)"`}, "TimeoutSeconds": 120}},
	{winLaunchScript, powershell.Args{"Line": []string{"chrome --remote-debugging-port=1337"}}},
	{winOpenScript, powershell.Args{"Path": `C:\Users\Docker\Desktop\report.docx`}},
	{winScreenSizeScript, nil},
	{winForegroundScript, nil},
	{winActivateScript, powershell.Args{"Name": "Notepad", "Strict": false}},
	{winCloseScript, powershell.Args{"Name": "Notepad", "Strict": false}},
	{winCloseAllScript, nil},
	{winWallpaperGetScript, nil},
	{winWallpaperSetScript, powershell.Args{"Path": `C:\Users\Docker\Pictures\sky.png`}},
	{winRecycleScript, powershell.Args{"Path": `C:\Users\Docker\Desktop\old.txt`}},
}

// TestWindowsGolden keeps every script WAA's routes run, and example
// arguments, in testdata/windows (go test -update rewrites them). The
// route tests below find the scripts that ran by these files.
func TestWindowsGolden(t *testing.T) {
	names := map[string]bool{}
	for _, c := range winScripts {
		if names[c.s.Name] {
			t.Errorf("two scripts are named %s", c.s.Name)
		}
		names[c.s.Name] = true
		pstest.Golden(t, goldenDir, c.s.Name, c.s, c.args)
	}
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*.ps1"))
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".ps1"); !names[name] {
			t.Errorf("%s: no script of that name", f)
		}
	}
}

// maxSessionEncoded bounds a session script's encoded command: the
// session's wrapper puts it on cmd.exe's command line, which holds at
// most 8191 characters, with some 260 more of its own.
const maxSessionEncoded = 8191 - 300

// TestWindowsSessionScriptsFit: every script run in the user's session
// fits cmd.exe's command line.
func TestWindowsSessionScriptsFit(t *testing.T) {
	for _, s := range []powershell.Script{winExecScript, winLaunchScript, winOpenScript, winScreenSizeScript, winForegroundScript,
		winActivateScript, winCloseScript, winCloseAllScript, winWallpaperGetScript, winWallpaperSetScript, winRecycleScript} {
		if n := len(powershell.Encode(powershell.Wrap(s))); n > maxSessionEncoded {
			t.Errorf("%s: %d characters encoded, over %d", s.Name, n, maxSessionEncoded)
		}
	}
}

// goldenScripts are the scripts the golden files hold, by text.
func goldenScripts(t testing.TB) map[string]string {
	t.Helper()
	byText := map[string]string{}
	read := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v", err)
		}
		byText[strings.ReplaceAll(string(b), "\r\n", "\n")] = strings.TrimSuffix(filepath.Base(path), ".ps1")
	}
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*.ps1"))
	for _, f := range files {
		read(f)
	}
	for _, name := range guestGoldens {
		read(filepath.Join("..", "guest", goldenDir, name+".ps1"))
	}
	return byText
}

// fakeRun is a script the fake guest was asked to run: its name (that of
// the golden file holding its text), whether it ran in the user's
// session, its arguments (as the script reads them, from JSON) and the
// command line that ran it.
type fakeRun struct {
	name    string
	session bool
	args    map[string]any
	script  powershell.Script
	// outer are the session wrapper's arguments, for a script run in
	// the session.
	outer map[string]any
}

// fakeAnswer is how the fake guest answers a script: its JSON output, or
// a failure with a message and an error category.
type fakeAnswer struct {
	out      string
	fail     string
	category string
}

// fakeGuest is a Windows guest for tests: it runs nothing. It finds the
// script each request runs (by its text, among the golden files), records
// it, checks that its command line is the script's own whatever the
// arguments, and answers from answers by script name (null when none);
// its screen is screen.
type fakeGuest struct {
	t       testing.TB
	scripts map[string]string
	answers map[string]fakeAnswer
	screen  []byte

	mu   sync.Mutex
	runs []fakeRun
}

func newFakeGuest(t testing.TB, answers map[string]fakeAnswer) *fakeGuest {
	return &fakeGuest{t: t, scripts: goldenScripts(t), answers: answers, screen: testScreen()}
}

// wrapped is the wrapper's text around every script.
var wrapped = strings.Split(powershell.Wrap(powershell.Script{Text: "\x00"}), "\x00")

// decodeCommand is the script text of an -EncodedCommand.
func decodeCommand(enc string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(b)%2 != 0 {
		return "", fmt.Errorf("not an encoded command: %v", err)
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
	}
	text := string(utf16.Decode(u))
	if !strings.HasPrefix(text, wrapped[0]) || !strings.HasSuffix(text, wrapped[1]) {
		return "", fmt.Errorf("the command is not a wrapped script")
	}
	return strings.TrimSuffix(strings.TrimPrefix(text, wrapped[0]), wrapped[1]), nil
}

// decodeArgs reads a script's arguments from its standard input.
func decodeArgs(stdin []byte) (map[string]any, error) {
	js, err := base64.StdEncoding.DecodeString(string(stdin))
	if err != nil {
		return nil, err
	}
	var m map[string]any
	err = json.Unmarshal(js, &m)
	return m, err
}

// identify finds the script an encoded command runs and checks that the
// command is that script's, whatever its arguments.
func (g *fakeGuest) identify(enc string) (powershell.Script, error) {
	text, err := decodeCommand(enc)
	if err != nil {
		return powershell.Script{}, err
	}
	name, ok := g.scripts[text]
	if !ok {
		return powershell.Script{}, fmt.Errorf("a script no golden file holds ran:\n%s", text)
	}
	s := powershell.Script{Name: name, Text: text}
	argv, _, err := powershell.Command(s, nil)
	if err != nil || argv[len(argv)-1] != enc {
		return s, fmt.Errorf("%s: the command line is not the script's own (%v)", name, err)
	}
	return s, nil
}

func (g *fakeGuest) Exec(_ context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fail := func(err error) (backend.ExecResult, error) {
		g.t.Errorf("fake guest: %v", err)
		return backend.ExecResult{}, err
	}
	if req.Path != "powershell.exe" || len(req.Args) == 0 {
		return fail(fmt.Errorf("ran %s %q, not a script", req.Path, req.Args))
	}
	s, err := g.identify(req.Args[len(req.Args)-1])
	if err != nil {
		return fail(err)
	}
	if want, _, _ := powershell.Command(s, nil); !slices.Equal(req.Args, want) {
		return fail(fmt.Errorf("%s ran with the command line %q", s.Name, req.Args))
	}
	args, err := decodeArgs(req.Stdin)
	if err != nil {
		return fail(fmt.Errorf("%s: arguments: %v", s.Name, err))
	}
	run := fakeRun{name: s.Name, args: args, script: s}
	if s.Name == "guest-in-session" {
		command, _ := args["Command"].(string)
		inner, _ := args["ArgsBase64"].(string)
		if run.script, err = g.identify(command); err != nil {
			return fail(err)
		}
		if run.args, err = decodeArgs([]byte(inner)); err != nil {
			return fail(fmt.Errorf("%s: arguments: %v", run.script.Name, err))
		}
		run.name, run.session, run.outer = run.script.Name, true, args
	}
	g.runs = append(g.runs, run)
	ans, ok := g.answers[run.name]
	out, stderr, code := ans.out, "", 0
	if !ok || out == "" {
		out = "null"
	}
	if ans.fail != "" {
		line, _ := json.Marshal(map[string]string{"message": ans.fail, "category": ans.category, "errorId": "x"})
		out, stderr, code = "", "\r\n"+string(line)+"\r\n", 1
	}
	if !run.session {
		return backend.ExecResult{ExitCode: code, Stdout: []byte(out), Stderr: []byte(stderr)}, nil
	}
	js, _ := json.Marshal(map[string]string{"out": out, "err": stderr})
	return backend.ExecResult{Stdout: js}, nil
}

func (g *fakeGuest) Screenshot(context.Context) ([]byte, error) { return g.screen, nil }

func (g *fakeGuest) recorded() []fakeRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.runs)
}

// testScreen is an 8×6 screen: red left of x=4, blue from it.
func testScreen() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 8, 6))
	for y := 0; y < 6; y++ {
		for x := 0; x < 8; x++ {
			c := color.RGBA{255, 0, 0, 255}
			if x >= 4 {
				c = color.RGBA{0, 0, 255, 255}
			}
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	png.Encode(&b, img)
	return b.Bytes()
}

// request is an HTTP request to a WAA route.
type request struct {
	method string
	route  string
	ctype  string
	body   string
}

func jsonReq(route, body string) request {
	return request{http.MethodPost, route, "application/json", body}
}

func formReq(route string, form url.Values) request {
	return request{http.MethodPost, route, "application/x-www-form-urlencoded", form.Encode()}
}

// uploadReq is a multipart upload of data to path, as SetupController
// sends it.
func uploadReq(path, data string) request {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	w.WriteField("file_path", path)
	f, _ := w.CreateFormFile("file_data", "x.bin")
	io.WriteString(f, data)
	w.Close()
	return request{http.MethodPost, "/setup/upload", w.FormDataContentType(), b.String()}
}

// serve sends req to a Windows desktop on g.
func serve(g Guest, req request) *httptest.ResponseRecorder {
	r := httptest.NewRequest(req.method, "/api/v1/sandboxes/desk/osworld"+req.route, strings.NewReader(req.body))
	if req.ctype != "" {
		r.Header.Set("Content-Type", req.ctype)
	}
	w := httptest.NewRecorder()
	route, _, _ := strings.Cut(req.route, "?")
	Serve(w, r, g, Desktop{User: "agent", OS: "windows"}, route)
	return w
}

// ran is a script a case expects to run: its name, whether in the
// session, and the arguments it gets (all of them).
type ran struct {
	name    string
	session bool
	args    map[string]any
}

const (
	ctJSON = "application/json"
	ctText = "text/html; charset=utf-8"
)

// jsonOf is v as the API writes it.
func jsonOf(v any) string {
	var b bytes.Buffer
	json.NewEncoder(&b).Encode(v)
	return b.String()
}

// noOpenWait makes /setup/open_file answer at once for a test.
func noOpenWait(t testing.TB) {
	saved := winOpenWait
	winOpenWait = 0
	t.Cleanup(func() { winOpenWait = saved })
}

func TestWindowsRoutes(t *testing.T) {
	noOpenWait(t)
	home := `C:\Users\Docker`
	cases := []struct {
		name    string
		req     request
		answers map[string]fakeAnswer
		runs    []ran
		code    int
		ctype   string
		body    string
	}{
		// Readiness, platform, terminal, pointer.
		{name: "probe", req: request{method: "GET", route: "/probe"},
			runs: []ran{{name: "guest-ready", args: map[string]any{}}},
			code: 200, ctype: ctJSON, body: jsonOf(map[string]string{"status": "Probe successful", "message": "Service is operational"})},
		{name: "probe before the desktop is up", req: request{method: "GET", route: "/probe"},
			answers: map[string]fakeAnswer{"guest-ready": {fail: "no user is logged on to the desktop"}},
			runs:    []ran{{name: "guest-ready", args: map[string]any{}}},
			code:    503, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": "guest-ready: no user is logged on to the desktop"})},
		{name: "platform", req: request{method: "GET", route: "/platform"}, code: 200, ctype: ctText, body: "Windows"},
		{name: "platform with HEAD", req: request{method: "HEAD", route: "/platform"}, code: 200, ctype: ctText, body: "Windows"},
		{name: "terminal", req: request{method: "GET", route: "/terminal"}, code: 500, ctype: ctText, body: "Currently not implemented for platform Windows."},
		{name: "cursor", req: request{method: "GET", route: "/cursor_position"},
			answers: map[string]fakeAnswer{"guest-cursor": {out: `{"x":12,"y":34}`}},
			runs:    []ran{{name: "guest-cursor", session: true, args: map[string]any{}}},
			code:    200, ctype: ctJSON, body: "[12,34]\n"},

		// Screen.
		{name: "screen size", req: jsonReq("/screen_size", ""),
			answers: map[string]fakeAnswer{"waa-screen-size": {out: `{"width":1920,"height":1080}`}},
			runs:    []ran{{name: "waa-screen-size", session: true, args: map[string]any{}}},
			code:    200, ctype: ctJSON, body: jsonOf(map[string]int{"width": 1920, "height": 1080})},
		{name: "window size: X11 only", req: formReq("/window_size", url.Values{"app_class_name": {"notepad"}}),
			code: 501, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": "WAA's server reads window sizes from X11, which Windows guests do not have"})},
		{name: "window size without a class", req: formReq("/window_size", url.Values{}),
			code: 400, ctype: ctJSON, body: jsonOf(map[string]string{"error": "app_class_name is required"})},
		{name: "accessibility: invalid backend", req: request{method: "GET", route: "/accessibility?backend=atspi"},
			code: 400, ctype: ctText, body: "Invalid backend specified"},

		// Commands.
		{name: "execute a list", req: jsonReq("/execute", `{"command": ["python", "-c", "import pyautogui; pyautogui.click(10, 20)"], "shell": false}`),
			answers: map[string]fakeAnswer{"waa-exec": {out: `{"returncode":0,"output":"ok\r\n","error":""}`}},
			runs: []ran{{name: "waa-exec", session: true, args: map[string]any{"Shell": false, "Program": []any{"python"},
				"Arguments": []any{`-c "import pyautogui; pyautogui.click(10, 20)"`}, "TimeoutSeconds": 120.0}}},
			code: 200, ctype: ctJSON, body: jsonOf(map[string]any{"status": "success", "output": "ok\n", "error": "", "returncode": 0})},
		{name: "execute a string split as shlex does, ~/ the profile", req: jsonReq("/setup/execute", `{"command": "notepad.exe '~/my notes.txt' ~/b"}`),
			answers: map[string]fakeAnswer{"waa-exec": {out: `{"returncode":3,"output":"","error":"boom\r"}`}},
			runs: []ran{{name: "waa-exec", session: true, args: map[string]any{"Shell": false, "Program": []any{"notepad.exe"},
				"Arguments": []any{`"`, `/my notes.txt" "`, `/b"`}, "TimeoutSeconds": 120.0}}},
			code: 200, ctype: ctJSON, body: jsonOf(map[string]any{"status": "success", "output": "", "error": "boom\n", "returncode": 3})},
		{name: "execute with the shell", req: jsonReq("/execute", `{"command": "echo %USERNAME% & dir", "shell": true}`),
			answers: map[string]fakeAnswer{"waa-exec": {out: `{"returncode":0,"output":"docker\r\n","error":""}`}},
			runs: []ran{{name: "waa-exec", session: true, args: map[string]any{"Shell": true, "Program": []any{},
				"Arguments": []any{`/c "echo %USERNAME% & dir"`}, "TimeoutSeconds": 120.0}}},
			code: 200, ctype: ctJSON, body: jsonOf(map[string]any{"status": "success", "output": "docker\n", "error": "", "returncode": 0})},
		{name: "execute: shell as Python reads it", req: jsonReq("/execute", `{"command": ["dir", "~/x"], "shell": "false"}`),
			runs: []ran{{name: "waa-exec", session: true, args: map[string]any{"Shell": true, "Program": []any{},
				"Arguments": []any{`/c "dir "`, `/x""`}, "TimeoutSeconds": 120.0}}},
			code: 200, ctype: ctJSON, body: jsonOf(map[string]any{"status": "success", "output": "", "error": "", "returncode": 0})},
		{name: "execute a missing program", req: jsonReq("/execute", `{"command": ["nosuch.exe"]}`),
			answers: map[string]fakeAnswer{"waa-exec": {fail: "[WinError 2] The system cannot find the file specified"}},
			runs:    []ran{{name: "waa-exec", session: true, args: map[string]any{"Shell": false, "Program": []any{"nosuch.exe"}, "Arguments": []any{""}, "TimeoutSeconds": 120.0}}},
			code:    500, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": "[WinError 2] The system cannot find the file specified"})},
		{name: "execute times out", req: jsonReq("/execute", `{"command": ["ping", "-t", "x"]}`),
			answers: map[string]fakeAnswer{"waa-exec": {fail: "the command timed out", category: "OperationTimeout"}},
			runs:    []ran{{name: "waa-exec", session: true, args: map[string]any{"Shell": false, "Program": []any{"ping"}, "Arguments": []any{"-t x"}, "TimeoutSeconds": 120.0}}},
			code:    500, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": "Command '['ping', '-t', 'x']' timed out after 120 seconds"})},
		{name: "execute without a command", req: jsonReq("/execute", `{"shell": false}`),
			code: 500, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": "command: required"})},
		{name: "execute: not JSON", req: jsonReq("/execute", `command=ls`),
			code: 400, ctype: ctJSON, body: jsonOf(map[string]string{"error": "the request body is not the JSON object this route takes: invalid character 'c' looking for beginning of value"})},
		{name: "launch a list: shell, google-chrome is chrome", req: jsonReq("/setup/launch", `{"command": ["google-chrome", "--remote-debugging-port=1337", "~/page.html"]}`),
			answers: map[string]fakeAnswer{"waa-launch": {out: `"C:\\Users\\Docker"`}},
			runs:    []ran{{name: "waa-launch", session: true, args: map[string]any{"Line": []any{`chrome --remote-debugging-port=1337 "`, `/page.html"`}}}},
			code:    200, ctype: ctText, body: `['chrome', '--remote-debugging-port=1337', 'C:\\Users\\Docker/page.html'] launched successfully`},
		{name: "launch a string", req: jsonReq("/setup/launch", `{"command": "start ms-settings:", "shell": false}`),
			answers: map[string]fakeAnswer{"waa-launch": {out: `"C:\\Users\\Docker"`}},
			runs:    []ran{{name: "waa-launch", session: true, args: map[string]any{"Line": []any{"start ms-settings:"}}}},
			code:    200, ctype: ctText, body: "start ms-settings: launched successfully"},
		{name: "launch fails", req: jsonReq("/setup/launch", `{"command": ["x"]}`),
			answers: map[string]fakeAnswer{"waa-launch": {fail: "Win32_Process.Create returned 9"}},
			runs:    []ran{{name: "waa-launch", session: true, args: map[string]any{"Line": []any{"x"}}}},
			code:    500, ctype: ctJSON, body: `{"command":["x"],"data":{"command":["x"]},"message":"waa-launch: Win32_Process.Create returned 9","shell":"True","status":"error"}` + "\n"},

		// Known folders and existence checks.
		{name: "desktop path", req: jsonReq("/desktop_path", ""),
			answers: map[string]fakeAnswer{"waa-known-folder": {out: `"C:\\Users\\Docker\\Desktop"`}},
			runs:    []ran{{name: "waa-known-folder", args: map[string]any{"Folder": "Desktop"}}},
			code:    200, ctype: ctJSON, body: jsonOf(map[string]string{"desktop_path": home + `\Desktop`})},
		{name: "no desktop", req: jsonReq("/desktop_path", ""),
			answers: map[string]fakeAnswer{"waa-known-folder": {out: `""`}},
			runs:    []ran{{name: "waa-known-folder", args: map[string]any{"Folder": "Desktop"}}},
			code:    404, ctype: ctJSON, body: jsonOf(map[string]string{"error": "Unsupported operating system or desktop path not found"})},
		{name: "no documents", req: jsonReq("/documents_path", ""),
			answers: map[string]fakeAnswer{"waa-known-folder": {out: `""`}},
			runs:    []ran{{name: "waa-known-folder", args: map[string]any{"Folder": "Documents"}}},
			code:    400, ctype: ctJSON, body: jsonOf(map[string]string{"error": "Unsupported operating system or documents path not found"})},
		{name: "folder exists", req: jsonReq("/folder_exists", `{"folder_name": "Projects", "path": "C:\\Users\\Docker\\Desktop"}`),
			answers: map[string]fakeAnswer{"waa-exists": {out: "true"}},
			runs:    []ran{{name: "waa-exists", args: map[string]any{"Path": home + `\Desktop`, "Name": "Projects", "Directory": true}}},
			code:    200, ctype: ctJSON, body: jsonOf(map[string]string{"status": "success", "message": `Folder Projects exists in C:\Users\Docker\Desktop.`})},
		{name: "file does not exist", req: jsonReq("/file_exists", `{"file_name": "a.txt", "path": "C:\\x"}`),
			answers: map[string]fakeAnswer{"waa-exists": {out: "false"}},
			runs:    []ran{{name: "waa-exists", args: map[string]any{"Path": `C:\x`, "Name": "a.txt", "Directory": false}}},
			code:    400, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": `File a.txt does not exist in C:\x.`})},
		{name: "folder exists without a name", req: jsonReq("/folder_exists", `{"path": "C:\\x"}`),
			code: 400, ctype: ctJSON, body: jsonOf(map[string]string{"error": "folder_name required"})},
		{name: "file exists without a path", req: jsonReq("/file_exists", `{"file_name": "a"}`),
			code: 400, ctype: ctJSON, body: jsonOf(map[string]string{"error": "path required"})},

		// Folders and files.
		{name: "create a folder", req: jsonReq("/setup/create_folder", `{"path": "C:\\Users\\Docker\\Desktop\\Projects"}`),
			answers: map[string]fakeAnswer{"waa-create-folder": {out: `"created"`}},
			runs:    []ran{{name: "waa-create-folder", args: map[string]any{"Path": home + `\Desktop\Projects`}}},
			code:    200, ctype: ctJSON, body: jsonOf(map[string]string{"status": "success", "message": home + `\Desktop\Projects created.`})},
		{name: "create a folder that exists", req: jsonReq("/setup/create_folder", `{"path": "C:\\x"}`),
			answers: map[string]fakeAnswer{"waa-create-folder": {out: `"exists"`}},
			runs:    []ran{{name: "waa-create-folder", args: map[string]any{"Path": `C:\x`}}},
			code:    200, ctype: ctJSON, body: jsonOf(map[string]string{"status": "success", "message": `C:\x already exists.`})},
		{name: "create a folder fails", req: jsonReq("/setup/create_folder", `{"path": "Z:\\x"}`),
			answers: map[string]fakeAnswer{"waa-create-folder": {fail: "Could not find a part of the path"}},
			runs:    []ran{{name: "waa-create-folder", args: map[string]any{"Path": `Z:\x`}}},
			code:    400, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": `Failed to create Z:\x.`})},
		{name: "create a folder without a path", req: jsonReq("/setup/create_folder", `{}`),
			code: 400, ctype: ctJSON, body: jsonOf(map[string]string{"error": "path required"})},
		{name: "create a file", req: jsonReq("/setup/create_file", `{"path": "C:\\Users\\Docker\\Desktop\\todo.txt", "content": "a\nb"}`),
			answers: map[string]fakeAnswer{"waa-create-file": {out: `{"state":"created","path":"C:\\Users\\Docker\\Desktop\\todo.txt"}`}},
			runs:    []ran{{name: "waa-create-file", args: map[string]any{"Path": home + `\Desktop\todo.txt`, "Content": "a\nb"}}},
			code:    200, ctype: ctJSON, body: jsonOf(map[string]string{"status": "success", "message": home + `\Desktop\todo.txt created.`})},
		{name: "create a folder at no path", req: jsonReq("/setup/create_folder", `{"path": ""}`),
			code: 400, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": "Failed to create ."})},
		{name: "create a file at no path", req: jsonReq("/setup/create_file", `{"path": ""}`),
			code: 400, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": "path is not a file"})},
		{name: "create a file over a folder", req: jsonReq("/setup/create_file", `{"path": "C:\\x"}`),
			answers: map[string]fakeAnswer{"waa-create-file": {out: `{"state":"directory","path":"C:\\x"}`}},
			runs:    []ran{{name: "waa-create-file", args: map[string]any{"Path": `C:\x`, "Content": ""}}},
			code:    400, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": "path is not a file"})},
		{name: "create a file fails", req: jsonReq("/setup/create_file", `{"path": "C:\\x.txt", "content": "😀"}`),
			answers: map[string]fakeAnswer{"waa-create-file": {out: `{"state":"failed","path":"C:\\x.txt","error":"Unable to translate Unicode character"}`}},
			runs:    []ran{{name: "waa-create-file", args: map[string]any{"Path": `C:\x.txt`, "Content": "😀"}}},
			code:    400, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": `Failed to create C:\x.txt.`})},
		{name: "recycle", req: jsonReq("/setup/recycle", `{"path": "C:\\Users\\Docker\\Desktop\\old.txt"}`),
			runs: []ran{{name: "waa-recycle", session: true, args: map[string]any{"Path": home + `\Desktop\old.txt`}}},
			code: 200, ctype: ctJSON, body: jsonOf(map[string]string{"status": "success", "message": home + `\Desktop\old.txt recycled`})},
		{name: "recycle fails", req: jsonReq("/setup/recycle", `{"path": "C:\\nothing"}`),
			answers: map[string]fakeAnswer{"waa-recycle": {fail: `C:\nothing does not exist`}},
			runs:    []ran{{name: "waa-recycle", session: true, args: map[string]any{"Path": `C:\nothing`}}},
			code:    400, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": `Failed to recycle C:\nothing`})},
		{name: "recycle a wildcard", req: jsonReq("/setup/recycle", `{"path": "C:\\Users\\*"}`),
			code: 400, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": `Failed to recycle C:\Users\*`})},
		{name: "recycle without a path", req: jsonReq("/setup/recycle", `{}`),
			code: 400, ctype: ctJSON, body: jsonOf(map[string]string{"error": "Missing 'path' parameter"})},
		{name: "list a directory", req: jsonReq("/list_directory", `{"path": "C:\\Users\\Docker\\Desktop\\"}`),
			answers: map[string]fakeAnswer{"waa-list-directory": {out: `{"directory":true,"entries":[{"p":-1,"n":"","d":true,"e":null},{"p":0,"n":"sub","d":true,"e":null},{"p":0,"n":"a.txt","d":false,"e":null},{"p":0,"n":"locked","d":true,"e":"Access to the path is denied."},{"p":1,"n":"b.txt","d":false,"e":null}]}`}},
			runs:    []ran{{name: "waa-list-directory", args: map[string]any{"Path": home + `\Desktop\`, "Max": 20000.0}}},
			code:    200, ctype: ctJSON, body: `{"directory_tree":{"type":"directory","name":"","children":[{"type":"directory","name":"sub","children":[{"type":"file","name":"b.txt"}]},{"type":"file","name":"a.txt"},{"error":"Access to the path is denied."}]}}` + "\n"},
		{name: "list a file", req: jsonReq("/list_directory", `{"path": "C:\\a.txt"}`),
			answers: map[string]fakeAnswer{"waa-list-directory": {out: `{"directory":false,"entries":[]}`}},
			runs:    []ran{{name: "waa-list-directory", args: map[string]any{"Path": `C:\a.txt`, "Max": 20000.0}}},
			code:    400, ctype: ctJSON, body: jsonOf(map[string]string{"error": "The provided path is not a directory"})},
		{name: "list without a path", req: jsonReq("/list_directory", `{}`),
			code: 400, ctype: ctJSON, body: jsonOf(map[string]string{"error": "Missing 'path' parameter"})},
		{name: "file", req: formReq("/file", url.Values{"file_path": {`~\notes.txt`}}),
			answers: map[string]fakeAnswer{"waa-read-file": {out: `{"state":"ok","path":"C:\\Users\\Docker\\notes.txt","data":"aGVsbG8="}`}},
			runs:    []ran{{name: "waa-read-file", args: map[string]any{"Path": `~\notes.txt`, "Max": float64(16 << 20)}}},
			code:    200, ctype: "application/octet-stream", body: "hello"},
		{name: "file missing", req: formReq("/file", url.Values{"file_path": {`C:\none`}}),
			answers: map[string]fakeAnswer{"waa-read-file": {out: `{"state":"missing","path":"C:\\none"}`}},
			runs:    []ran{{name: "waa-read-file", args: map[string]any{"Path": `C:\none`, "Max": float64(16 << 20)}}},
			code:    404, ctype: ctJSON, body: jsonOf(map[string]string{"error": "File not found"})},
		{name: "file is a folder", req: formReq("/file", url.Values{"file_path": {`C:\Users`}}),
			answers: map[string]fakeAnswer{"waa-read-file": {out: `{"state":"directory","path":"C:\\Users"}`}},
			runs:    []ran{{name: "waa-read-file", args: map[string]any{"Path": `C:\Users`, "Max": float64(16 << 20)}}},
			code:    500, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": `[Errno 13] Permission denied: 'C:\\Users'`})},
		{name: "file too large", req: formReq("/file", url.Values{"file_path": {`C:\big`}}),
			answers: map[string]fakeAnswer{"waa-read-file": {out: `{"state":"large","path":"C:\\big","size":99999999}`}},
			runs:    []ran{{name: "waa-read-file", args: map[string]any{"Path": `C:\big`, "Max": float64(16 << 20)}}},
			code:    413, ctype: ctJSON, body: jsonOf(map[string]string{"error": `Failed to serve file: C:\big: 99999999 bytes, over 16777216: file too large`})},
		{name: "file without a path", req: formReq("/file", url.Values{}),
			code: 400, ctype: ctJSON, body: jsonOf(map[string]string{"error": "file_path is required"})},
		{name: "upload", req: uploadReq(`C:\Users\Docker\Desktop\x.bin`, "data"),
			answers: map[string]fakeAnswer{"waa-write-file": {out: `{"state":"ok","path":"C:\\Users\\Docker\\Desktop\\x.bin"}`}},
			runs:    []ran{{name: "waa-write-file", args: map[string]any{"Path": home + `\Desktop\x.bin`, "Data": "ZGF0YQ=="}}},
			code:    200, ctype: ctText, body: "File Uploaded"},
		{name: "upload into a missing folder", req: uploadReq(`C:\no\x.bin`, "data"),
			answers: map[string]fakeAnswer{"waa-write-file": {out: `{"state":"missing","path":"C:\\no\\x.bin"}`}},
			runs:    []ran{{name: "waa-write-file", args: map[string]any{"Path": `C:\no\x.bin`, "Data": "ZGF0YQ=="}}},
			code:    500, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": `[Errno 2] No such file or directory: 'C:\\no\\x.bin'`})},
		{name: "upload without a file", req: formReq("/setup/upload", url.Values{"file_path": {`C:\x`}}),
			code: 400, ctype: ctJSON, body: jsonOf(map[string]string{"error": "file_path and file_data are required"})},
		{name: "download", req: jsonReq("/setup/download_file", `{"url": "https://example.com/a.pdf", "path": "~\\Downloads\\a.pdf"}`),
			answers: map[string]fakeAnswer{"waa-download-file": {out: "1234"}},
			runs:    []ran{{name: "waa-download-file", args: map[string]any{"Url": "https://example.com/a.pdf", "Path": `~\Downloads\a.pdf`}}},
			code:    200, ctype: ctText, body: "File downloaded successfully"},
		{name: "download fails three times", req: jsonReq("/setup/download_file", `{"url": "http://example.com/x", "path": "C:\\x"}`),
			answers: map[string]fakeAnswer{"waa-download-file": {fail: "The remote server returned an error: (404) Not Found."}},
			runs: []ran{
				{name: "waa-download-file", args: map[string]any{"Url": "http://example.com/x", "Path": `C:\x`}},
				{name: "waa-download-file", args: map[string]any{"Url": "http://example.com/x", "Path": `C:\x`}},
				{name: "waa-download-file", args: map[string]any{"Url": "http://example.com/x", "Path": `C:\x`}},
			},
			code: 500, ctype: ctText, body: "Failed to download http://example.com/x. No retries left. Error: waa-download-file: The remote server returned an error: (404) Not Found."},
		{name: "download a file URL", req: jsonReq("/setup/download_file", `{"url": "file:///C:/Windows/win.ini", "path": "C:\\x"}`),
			code: 400, ctype: ctText, body: `url: "file:///C:/Windows/win.ini" is not an http or https URL`},
		{name: "download without a path", req: jsonReq("/setup/download_file", `{"url": "http://example.com/x"}`),
			code: 400, ctype: ctText, body: "Path or URL not supplied!"},
		{name: "clear task files", req: jsonReq("/setup/clear_task_files", `{}`),
			answers: map[string]fakeAnswer{"waa-clear-task-files": {out: `{"dir":"C:\\Users\\Docker\\Downloads","missing":false,"removed":["C:\\Users\\Docker\\Downloads\\a.pdf"],"failed":["C:\\Users\\Docker\\Downloads\\sub"]}`}},
			runs:    []ran{{name: "waa-clear-task-files", args: map[string]any{}}},
			code:    200, ctype: ctText, body: `Failed to remove (['C:\\Users\\Docker\\Downloads\\sub']) but sucessfully cleared (['C:\\Users\\Docker\\Downloads\\a.pdf']) from 'C:\\Users\\Docker\\Downloads'.`},
		{name: "clear no task files", req: jsonReq("/setup/clear_task_files", `{}`),
			answers: map[string]fakeAnswer{"waa-clear-task-files": {out: `{"dir":"C:\\Users\\Docker\\Downloads","missing":false,"removed":[],"failed":[]}`}},
			runs:    []ran{{name: "waa-clear-task-files", args: map[string]any{}}},
			code:    200, ctype: ctText, body: `No task files to clear from 'C:\\Users\\Docker\\Downloads'.`},
		{name: "clear task files without Downloads", req: jsonReq("/setup/clear_task_files", `{}`),
			answers: map[string]fakeAnswer{"waa-clear-task-files": {out: `{"dir":"C:\\Users\\Docker\\Downloads","missing":true,"removed":[],"failed":[]}`}},
			runs:    []ran{{name: "waa-clear-task-files", args: map[string]any{}}},
			code:    500, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": `[WinError 3] The system cannot find the path specified: 'C:\\Users\\Docker\\Downloads'`})},

		// Opening files, wallpapers.
		{name: "open a file", req: jsonReq("/setup/open_file", `{"path": "~/Desktop/report.docx"}`),
			answers: map[string]fakeAnswer{"waa-resolve": {out: `{"path":"C:\\Users\\Docker\\Desktop\\report.docx","shown":"C:\\Users\\Docker/Desktop/report.docx","exists":true}`}},
			runs: []ran{
				{name: "waa-resolve", args: map[string]any{"Path": "~/Desktop/report.docx"}},
				{name: "waa-open-file", session: true, args: map[string]any{"Path": home + `\Desktop\report.docx`}},
			},
			code: 200, ctype: ctText, body: "File opened successfully"},
		{name: "open a missing file", req: jsonReq("/setup/open_file", `{"path": "C:/x//y/"}`),
			answers: map[string]fakeAnswer{"waa-resolve": {out: `{"path":"C:\\x\\y","shown":"C:/x//y/","exists":false}`}},
			runs:    []ran{{name: "waa-resolve", args: map[string]any{"Path": "C:/x//y/"}}},
			code:    404, ctype: ctText, body: `File not found: C:\x\y`},
		{name: "open fails", req: jsonReq("/setup/open_file", `{"path": "C:\\a.xyz"}`),
			answers: map[string]fakeAnswer{
				"waa-resolve":   {out: `{"path":"C:\\a.xyz","shown":"C:\\a.xyz","exists":true}`},
				"waa-open-file": {fail: "Win32_Process.Create returned 2"},
			},
			runs: []ran{
				{name: "waa-resolve", args: map[string]any{"Path": `C:\a.xyz`}},
				{name: "waa-open-file", session: true, args: map[string]any{"Path": `C:\a.xyz`}},
			},
			code: 500, ctype: ctText, body: `Failed to open C:\a.xyz. Error: waa-open-file: Win32_Process.Create returned 2`},
		{name: "open without a path", req: jsonReq("/setup/open_file", `{}`), code: 400, ctype: ctText, body: "Path not supplied!"},
		{name: "change the wallpaper", req: jsonReq("/setup/change_wallpaper", `{"path": "%USERPROFILE%\\Pictures\\sky.png"}`),
			answers: map[string]fakeAnswer{"waa-resolve": {out: `{"path":"C:\\Users\\Docker\\Pictures\\sky.png","shown":"C:\\Users\\Docker\\Pictures\\sky.png","exists":true}`}},
			runs: []ran{
				{name: "waa-resolve", args: map[string]any{"Path": `%USERPROFILE%\Pictures\sky.png`}},
				{name: "waa-wallpaper-set", session: true, args: map[string]any{"Path": home + `\Pictures\sky.png`}},
			},
			code: 200, ctype: ctText, body: "Wallpaper changed successfully"},
		{name: "change the wallpaper to a missing file", req: jsonReq("/setup/change_wallpaper", `{"path": "C:\\none.png"}`),
			answers: map[string]fakeAnswer{"waa-resolve": {out: `{"path":"C:\\none.png","shown":"C:\\none.png","exists":false}`}},
			runs:    []ran{{name: "waa-resolve", args: map[string]any{"Path": `C:\none.png`}}},
			code:    404, ctype: ctText, body: `File not found: C:\none.png`},
		{name: "wallpaper", req: jsonReq("/wallpaper", ""),
			answers: map[string]fakeAnswer{
				"waa-wallpaper-get": {out: `"C:\\Windows\\Web\\img0.jpg"`},
				"waa-read-file":     {out: `{"state":"ok","path":"C:\\Windows\\Web\\img0.jpg","data":"aW1n"}`},
			},
			runs: []ran{
				{name: "waa-wallpaper-get", session: true, args: map[string]any{}},
				{name: "waa-read-file", args: map[string]any{"Path": `C:\Windows\Web\img0.jpg`, "Max": float64(16 << 20)}},
			},
			code: 200, ctype: "image/png", body: "img"},
		{name: "no wallpaper", req: jsonReq("/wallpaper", ""),
			answers: map[string]fakeAnswer{"waa-wallpaper-get": {out: `""`}},
			runs:    []ran{{name: "waa-wallpaper-get", session: true, args: map[string]any{}}},
			code:    500, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": "404 Not Found: Wallpaper file not found"})},

		// Windows.
		{name: "activate a window", req: jsonReq("/setup/activate_window", `{"window_name": "Notepad"}`),
			answers: map[string]fakeAnswer{"waa-activate-window": {out: "2"}},
			runs:    []ran{{name: "waa-activate-window", session: true, args: map[string]any{"Name": "Notepad", "Strict": false}}},
			code:    200, ctype: ctText, body: "Window activated successfully"},
		{name: "activate a missing window", req: jsonReq("/setup/activate_window", `{"window_name": "Nothing"}`),
			answers: map[string]fakeAnswer{"waa-activate-window": {out: "0"}},
			runs:    []ran{{name: "waa-activate-window", session: true, args: map[string]any{"Name": "Nothing", "Strict": false}}},
			code:    404, ctype: ctText, body: "Window Nothing not found (empty results)"},
		{name: "close a window strictly", req: jsonReq("/setup/close_window", `{"window_name": "notepad", "strict": true}`),
			answers: map[string]fakeAnswer{"waa-close-window": {out: "-1"}},
			runs:    []ran{{name: "waa-close-window", session: true, args: map[string]any{"Name": "notepad", "Strict": true}}},
			code:    404, ctype: ctText, body: "Window notepad not found (strict mode)."},
		{name: "close a window", req: jsonReq("/setup/close_window", `{"window_name": "Untitled - Notepad"}`),
			answers: map[string]fakeAnswer{"waa-close-window": {out: "1"}},
			runs:    []ran{{name: "waa-close-window", session: true, args: map[string]any{"Name": "Untitled - Notepad", "Strict": false}}},
			code:    200, ctype: ctText, body: "Window closed successfully."},
		{name: "activate by class", req: jsonReq("/setup/activate_window", `{"window_name": "x", "by_class": true}`),
			code: 500, ctype: ctText, body: "Get window by class name is currently not supported on Windows."},
		{name: "close by class", req: jsonReq("/setup/close_window", `{"window_name": "x", "by_class": true}`),
			code: 500, ctype: ctText, body: "Get window by class name is not supported on Windows currently."},
		{name: "activate without a name", req: jsonReq("/setup/activate_window", `{}`), code: 400, ctype: ctText, body: "window_name required"},
		{name: "close all", req: jsonReq("/setup/close_all", `{}`),
			runs: []ran{{name: "waa-close-all", session: true, args: map[string]any{}}},
			code: 200, ctype: ctText, body: "All windows closed successfully."},
		{name: "close all fails", req: jsonReq("/setup/close_all", `{}`),
			answers: map[string]fakeAnswer{"waa-close-all": {fail: "no user is logged on to the desktop"}},
			runs:    []ran{{name: "waa-close-all", session: true, args: map[string]any{}}},
			code:    500, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": "waa-close-all: no user is logged on to the desktop"})},

		// Not served, not routes, wrong methods.
		{name: "execute_windows", req: jsonReq("/execute_windows", `{"command": "computer.mouse.move(1, 2)"}`),
			code: 501, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": "/update_computer and /execute_windows drive WAA's server-side Computer object (its code_block action space), which hvkube does not have: use the pyautogui or computer_13 action space (/execute)"})},
		{name: "revert to snapshot, as WAA answers it", req: jsonReq("/revert_to_snapshot", ""),
			code: 501, ctype: ctJSON, body: jsonOf(map[string]string{"error": "Restore snapshot no implemented"})},
		{name: "a File Explorer check", req: jsonReq("/is_details_view", `{"path": "C:\\"}`),
			code: 501, ctype: ctJSON, body: jsonOf(map[string]string{"status": "error", "message": "WAA's server answers it with its own UI Automation and File Explorer helpers (uiautomation_utils, fileexplorer_utils), which hvkube does not have"})},
		{name: "an OSWorld route WAA has not", req: jsonReq("/run_python", `{"code": "print(1)"}`),
			code: 404, ctype: ctText, body: "no route /run_python in Windows Agent Arena's guest API"},
		{name: "GET a POST route", req: request{method: "GET", route: "/execute"},
			code: 405, ctype: ctText, body: "GET /execute: use POST"},
		{name: "POST a GET route", req: jsonReq("/probe", ""),
			code: 405, ctype: ctText, body: "POST /probe: use GET"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newFakeGuest(t, c.answers)
			w := serve(g, c.req)
			checkRuns(t, g.recorded(), c.runs)
			checkAnswer(t, w, c.code, c.ctype, c.body)
		})
	}
}

// checkRuns compares the scripts that ran with those a case expects.
func checkRuns(t *testing.T, got []fakeRun, want []ran) {
	t.Helper()
	if len(got) != len(want) {
		names := make([]string, len(got))
		for i, r := range got {
			names[i] = r.name
		}
		t.Fatalf("ran %q, want %d scripts", names, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.name != w.name || g.session != w.session {
			t.Errorf("script %d: %s (in the session: %v), want %s (%v)", i, g.name, g.session, w.name, w.session)
		}
		if !reflect.DeepEqual(g.args, w.args) {
			t.Errorf("%s: arguments\n%#v\nwant\n%#v", g.name, g.args, w.args)
		}
	}
}

// checkAnswer compares an HTTP answer.
func checkAnswer(t *testing.T, w *httptest.ResponseRecorder, code int, ctype, body string) {
	t.Helper()
	if w.Code != code {
		t.Errorf("status %d, want %d (%s)", w.Code, code, w.Body)
	}
	if got := w.Header().Get("Content-Type"); got != ctype {
		t.Errorf("content type %q, want %q", got, ctype)
	}
	if w.Body.String() != body {
		t.Errorf("body\n%q\nwant\n%q", w.Body.String(), body)
	}
}

// TestWindowsSessionTimeouts: an /execute command has 120 s and the
// session 30 s more; other session scripts the guest's 30 s.
func TestWindowsSessionTimeouts(t *testing.T) {
	for _, c := range []struct {
		req  request
		want float64
	}{
		{jsonReq("/execute", `{"command": ["x"]}`), 150},
		{jsonReq("/setup/launch", `{"command": ["x"]}`), 30},
		{jsonReq("/setup/close_all", ""), 30},
	} {
		g := newFakeGuest(t, nil)
		serve(g, c.req)
		runs := g.recorded()
		if len(runs) != 1 || !runs[0].session || runs[0].outer["TimeoutSeconds"] != c.want {
			t.Errorf("%s: %+v, want the session's %v s", c.req.route, runs, c.want)
		}
	}
}

func TestWindowsAccessibilityNotServed(t *testing.T) {
	for _, q := range []string{"", "?backend=win32", "?backend=uia"} {
		w := serve(newFakeGuest(t, nil), request{method: "GET", route: "/accessibility" + q})
		if w.Code != http.StatusNotImplemented || !strings.Contains(w.Body.String(), "pywinauto") {
			t.Errorf("accessibility%s: %d %s", q, w.Code, w.Body)
		}
	}
}

func TestWindowsScreenshot(t *testing.T) {
	g := newFakeGuest(t, nil)
	w := serve(g, request{method: "GET", route: "/screenshot"})
	if w.Code != 200 || w.Header().Get("Content-Type") != "image/png" || !bytes.Equal(w.Body.Bytes(), g.screen) {
		t.Fatalf("screenshot: %d %s", w.Code, w.Header())
	}
	if runs := g.recorded(); len(runs) != 0 {
		t.Errorf("the screenshot ran %v in the guest", runs)
	}
}

func TestWindowsObservation(t *testing.T) {
	cases := []struct {
		name       string
		foreground string
		title      string
		rect       [4]int
		left, size image.Point // where the screen's colours start, the image's size
	}{
		{name: "a window", foreground: `{"title":"Notepad","rect":[2,1,6,4],"width":8,"height":6,"windows":["Notepad","Settings"]}`,
			title: "Notepad", rect: [4]int{2, 1, 6, 4}, size: image.Pt(4, 3)},
		{name: "a maximized window past the screen's edges", foreground: `{"title":"Edge","rect":[-1,-1,9,7],"width":8,"height":6,"windows":["Edge"]}`,
			title: "Edge", rect: [4]int{-1, -1, 9, 7}, size: image.Pt(10, 8)},
		{name: "the desktop", foreground: `{"title":"Program Manager","rect":[0,0,8,6],"width":8,"height":6,"windows":[]}`,
			title: "Desktop", rect: [4]int{0, 0, 8, 6}, size: image.Pt(8, 6)},
		{name: "no foreground window", foreground: `{"title":"","rect":[0,0,0,0],"width":8,"height":6,"windows":[]}`,
			title: "Desktop", rect: [4]int{0, 0, 8, 6}, size: image.Pt(8, 6)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newFakeGuest(t, map[string]fakeAnswer{"waa-foreground": {out: c.foreground}})
			w := serve(g, request{method: "GET", route: "/obs_winagent"})
			checkRuns(t, g.recorded(), []ran{{name: "waa-foreground", session: true, args: map[string]any{}}})
			if w.Code != 200 || w.Header().Get("Content-Type") != ctJSON {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			var got struct {
				Image     []byte  `json:"image"`
				Title     string  `json:"window_title"`
				Rect      [4]int  `json:"rect"`
				Names     string  `json:"window_names_str"`
				Clipboard *string `json:"computer_clipboard"`
				Human     string  `json:"human_input"`
				Status    string  `json:"status"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			var fg winForeground
			json.Unmarshal([]byte(c.foreground), &fg)
			if got.Title != c.title || got.Rect != c.rect || got.Names != strings.Join(fg.Windows, "\n") || got.Clipboard != nil ||
				got.Human != "Question: No question asked yet\nAnswer: No answer given yet" || got.Status != "success" {
				t.Errorf("observation %+v", got)
			}
			img, err := png.Decode(bytes.NewReader(got.Image))
			if err != nil {
				t.Fatal(err)
			}
			if img.Bounds().Size() != c.size {
				t.Fatalf("image %v, want %v", img.Bounds().Size(), c.size)
			}
			// Each pixel is the screen's at the same place, black off it.
			for y := 0; y < c.size.Y; y++ {
				for x := 0; x < c.size.X; x++ {
					sx, sy := x+c.rect[0], y+c.rect[1]
					want := color.RGBA{0, 0, 0, 255}
					switch {
					case sx < 0 || sy < 0 || sx >= 8 || sy >= 6:
					case sx < 4:
						want = color.RGBA{255, 0, 0, 255}
					default:
						want = color.RGBA{0, 0, 255, 255}
					}
					if got := color.RGBAModel.Convert(img.At(x, y)); got != want {
						t.Fatalf("pixel %d,%d: %v, want %v", x, y, got, want)
					}
				}
			}
		})
	}
	t.Run("the session fails", func(t *testing.T) {
		g := newFakeGuest(t, map[string]fakeAnswer{"waa-foreground": {fail: "no user is logged on to the desktop"}})
		w := serve(g, request{method: "GET", route: "/obs_winagent"})
		checkAnswer(t, w, 500, ctJSON, jsonOf(map[string]string{"status": "error", "message": "waa-foreground: no user is logged on to the desktop"}))
	})
	t.Run("a window with no area", func(t *testing.T) {
		g := newFakeGuest(t, map[string]fakeAnswer{"waa-foreground": {out: `{"title":"Minimized","rect":[-32000,-32000,-32000,-32000],"width":8,"height":6}`}})
		w := serve(g, request{method: "GET", route: "/obs_winagent"})
		checkAnswer(t, w, 500, ctJSON, jsonOf(map[string]string{"status": "error", "message": "the window's rectangle [-32000 -32000 -32000 -32000] has no area to grab"}))
	})
}

// hostile are values that would change a script were they pasted into it.
var hostile = []string{
	`it's "quoted"`,
	"$(Remove-Item -Recurse C:\\)",
	"`$env:PATH` ``",
	"'); iex('calc",
	"a; b & c | d",
	"line\nbreak\r\n}\n{",
	"nul\x00byte",
	"%USERPROFILE% $HOME ${x}",
	"\u2018smart\u2019 \u201cquotes\u201d",
}

// TestWindowsHostileValues: paths, names, contents and commands reach the
// guest only as argument values, intact; the command line is the
// script's own (the fake guest checks that for every request).
func TestWindowsHostileValues(t *testing.T) {
	noOpenWait(t)
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	for _, v := range hostile {
		cases := []struct {
			req     request
			answers map[string]fakeAnswer
			key     string // the argument that carries v
			want    any
		}{
			{req: jsonReq("/setup/create_folder", js(map[string]string{"path": v})), key: "Path", want: v},
			{req: jsonReq("/setup/create_file", js(map[string]string{"path": `C:\x`, "content": v})), key: "Content", want: v},
			{req: jsonReq("/list_directory", js(map[string]string{"path": v})), key: "Path", want: v},
			{req: jsonReq("/folder_exists", js(map[string]string{"folder_name": v, "path": v})), key: "Name", want: v},
			{req: formReq("/file", url.Values{"file_path": {v}}), key: "Path", want: v},
			{req: uploadReq(v, v), key: "Path", want: v},
			{req: jsonReq("/setup/download_file", js(map[string]string{"url": "https://example.com/?q=" + url.QueryEscape(v), "path": v})), answers: map[string]fakeAnswer{"waa-download-file": {out: "1"}}, key: "Path", want: v},
			{req: jsonReq("/setup/open_file", js(map[string]string{"path": v})), key: "Path", want: v},
			{req: jsonReq("/setup/change_wallpaper", js(map[string]string{"path": v})), key: "Path", want: v},
			{req: jsonReq("/setup/activate_window", js(map[string]string{"window_name": v})), answers: map[string]fakeAnswer{"waa-activate-window": {out: "1"}}, key: "Name", want: v},
			{req: jsonReq("/setup/close_window", js(map[string]any{"window_name": v, "strict": true})), answers: map[string]fakeAnswer{"waa-close-window": {out: "1"}}, key: "Name", want: v},
			{req: jsonReq("/execute", js(map[string]any{"command": []string{v, v, "~/" + v}})), key: "Arguments", want: winCommandLine([]string{v, "~/" + v})},
			{req: jsonReq("/execute", js(map[string]any{"command": v, "shell": true})), key: "Arguments", want: []string{`/c "` + v + `"`}},
			{req: jsonReq("/setup/launch", js(map[string]any{"command": []string{v, "~/" + v}})), key: "Line", want: winCommandLine([]string{v, "~/" + v})},
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s %q", c.req.route, v), func(t *testing.T) {
				g := newFakeGuest(t, c.answers)
				w := serve(g, c.req)
				runs := g.recorded()
				if len(runs) == 0 {
					t.Fatalf("ran nothing: %d %s", w.Code, w.Body)
				}
				carried := false
				for _, r := range runs {
					args := powershell.Args(r.args)
					pstest.CheckArgsInert(t, r.script, args)
					got, ok := r.args[c.key]
					if !ok {
						continue
					}
					want, _ := json.Marshal(c.want)
					if again, _ := json.Marshal(got); bytes.Equal(again, want) {
						carried = true
					}
				}
				if !carried {
					t.Errorf("no script got %s = %q: %+v", c.key, c.want, runs)
				}
			})
		}
	}
}

// FuzzWindowsValuesNeverChangeScripts: whatever a request's values hold,
// every script runs with its own command line (the fake guest fails the
// test otherwise) and gets the values as arguments.
func FuzzWindowsValuesNeverChangeScripts(f *testing.F) {
	for _, v := range hostile {
		f.Add(v)
	}
	noOpenWait(f)
	f.Fuzz(func(t *testing.T, v string) {
		body, _ := json.Marshal(map[string]any{"path": v, "window_name": v, "command": []string{"x", v}, "content": v})
		for _, route := range []string{"/setup/create_file", "/setup/open_file", "/setup/activate_window", "/execute", "/setup/launch", "/list_directory"} {
			g := newFakeGuest(t, nil)
			serve(g, jsonReq(route, string(body)))
			for _, r := range g.recorded() {
				pstest.CheckArgsInert(t, r.script, powershell.Args(r.args))
			}
		}
	})
}

func TestWindowsLinuxUnchanged(t *testing.T) {
	for _, c := range []struct {
		os, want string
	}{{"linux", "Linux"}, {"", "Linux"}, {"windows", "Windows"}} {
		r := httptest.NewRequest("GET", "/platform", nil)
		w := httptest.NewRecorder()
		Serve(w, r, newFakeGuest(t, nil), Desktop{User: "agent", OS: c.os}, "/platform")
		if w.Body.String() != c.want {
			t.Errorf("OS %q: platform %q, want %q", c.os, w.Body, c.want)
		}
	}
	// The Linux routes keep theirs: /run_python is OSWorld's, /probe WAA's.
	r := httptest.NewRequest("GET", "/probe", nil)
	w := httptest.NewRecorder()
	Serve(w, r, newFakeGuest(t, nil), Desktop{User: "agent", OS: "linux"}, "/probe")
	if w.Code != http.StatusNotFound {
		t.Errorf("linux /probe: %d", w.Code)
	}
	if !slices.Contains(WindowsRoutes, "/obs_winagent") || slices.Contains(WindowsRoutes, "/run_python") || !slices.IsSorted(WindowsRoutes) {
		t.Errorf("WindowsRoutes %q", WindowsRoutes)
	}
}

// TestQuoteWinArg: words joined as Python's subprocess.list2cmdline joins
// them (its own examples and more).
func TestQuoteWinArg(t *testing.T) {
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"a b c", "d", "e"}, `"a b c" d e`},
		{[]string{`ab"c`, `\`, "d"}, `ab\"c \ d`},
		{[]string{`ab"c`, ` \`, "d"}, `ab\"c " \\" d`},
		{[]string{`a\\\b`, `de fg`, "h"}, `a\\\b "de fg" h`},
		{[]string{`a\"b`, "c", "d"}, `a\\\"b c d`},
		{[]string{`a\\b c`, "d", "e"}, `"a\\b c" d e`},
		{[]string{`a\\b\ c`, "d", "e"}, `"a\\b\ c" d e`},
		{[]string{"ab", ""}, `ab ""`},
		{[]string{"tab\there", `trail\`}, "\"tab\there\" trail\\"},
		{[]string{`C:\Program Files\x\`}, `"C:\Program Files\x\\"`},
		{nil, ""},
	} {
		if got := winCommandLine(c.words); len(got) != 1 || got[0] != c.want {
			t.Errorf("%q: %q, want %q", c.words, got, c.want)
		}
	}
	// A word beginning ~/ is the profile folder's: quoted, in pieces.
	if got := winCommandLine([]string{"a", `~/x y\`, "b"}); !slices.Equal(got, []string{`a "`, `/x y\\" b`}) {
		t.Errorf("~/ word: %q", got)
	}
	if got := strings.Join(winCommandLine([]string{"~/", `~\x`}), `C:\Users\A B`); got != `"C:\Users\A B/" ~\x` {
		t.Errorf("~/ joined: %q", got)
	}
	if got := winProgram("~/bin/tool.exe"); !slices.Equal(got, []string{"", "/bin/tool.exe"}) {
		t.Errorf("program %q", got)
	}
	if got := winShellLine(nil, `echo "hi"`, true); !slices.Equal(got, []string{`/c "echo "hi""`}) {
		t.Errorf("shell line %q", got)
	}
}

func TestWinCommandOf(t *testing.T) {
	for _, c := range []struct {
		raw    string
		shell  bool
		words  []string
		line   string
		isLine bool
		err    bool
	}{
		{raw: `["a", "b c"]`, words: []string{"a", "b c"}},
		{raw: `"a 'b c'"`, words: []string{"a", "b c"}},
		{raw: `"a 'b c'"`, shell: true, line: "a 'b c'", isLine: true},
		{raw: `["a"]`, shell: true, words: []string{"a"}},
		{raw: `[]`, shell: true, words: []string{}},
		{raw: `[]`, err: true},
		{raw: `""`, err: true},
		{raw: `null`, err: true},
		{raw: `7`, err: true},
		{raw: `"'open"`, err: true},
	} {
		words, line, isLine, err := winCommandOf(json.RawMessage(c.raw), c.shell)
		if (err != nil) != c.err || (!c.err && (!slices.Equal(words, c.words) || line != c.line || isLine != c.isLine)) {
			t.Errorf("%s shell %v: %q %q %v %v", c.raw, c.shell, words, line, isLine, err)
		}
	}
	for raw, want := range map[string]bool{`true`: true, `false`: false, `"false"`: true, `""`: false, `0`: false, `1`: true, `[]`: false, `null`: false, ``: false} {
		if truthy(json.RawMessage(raw)) != want {
			t.Errorf("truthy(%s) != %v", raw, want)
		}
	}
}

func TestPyRepr(t *testing.T) {
	for in, want := range map[string]string{
		`C:\Users\Docker`: `'C:\\Users\\Docker'`,
		"it's":            `"it's"`,
		`it's "q"`:        `'it\'s "q"'`,
		"a\nb\tc\rd":      `'a\nb\tc\rd'`,
		"nul\x00\x7f":     `'nul\x00\x7f'`,
		"é ✓ \u200b":      `'é ✓ \u200b'`,
		"\U000e0001":      `'\U000e0001'`,
		"":                `''`,
	} {
		if got := pyRepr(in); got != want {
			t.Errorf("pyRepr(%q) = %s, want %s", in, got, want)
		}
	}
	if got := pyReprList([]string{"a", `b\c`}); got != `['a', 'b\\c']` {
		t.Errorf("list %s", got)
	}
	if got := pyReprList(nil); got != "[]" {
		t.Errorf("empty list %s", got)
	}
}

func TestWindowsPaths(t *testing.T) {
	for in, want := range map[string]string{
		`C:\Users\x\`: "", `C:\Users\x`: "x", "C:/a/b.txt": "b.txt", "C:": "", "C:foo": "foo", "rel": "rel", `\\srv\share\f`: "f",
	} {
		if got := ntBasename(in); got != want {
			t.Errorf("ntBasename(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"C:/a//b/./c/": `C:\a\b\c`, `C:\`: `C:\`, "C:": "C:", "": ".", "a/./b": `a\b`, `\\srv\share\x`: `\\srv\share\x`, `C:\Users\D/x`: `C:\Users\D\x`, "/x": `\x`,
	} {
		if got := pyWinPath(in); got != want {
			t.Errorf("pyWinPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWinTree(t *testing.T) {
	b, _ := json.Marshal(winTree("root", nil))
	if string(b) != `{"type":"directory","name":"root","children":[]}` {
		t.Errorf("empty tree %s", b)
	}
	denied := "denied"
	b, _ = json.Marshal(winTree("root", []winTreeEntry{{Parent: -1, Dir: true, Error: &denied}}))
	if string(b) != `{"error":"denied"}` {
		t.Errorf("unlistable root %s", b)
	}
}
