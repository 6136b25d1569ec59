//go:build linux

package server

import (
	"bytes"
	"encoding/json"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// osworldCall is one request of OSWorld's clients to its guest API.
type osworldCall struct {
	method, route string
	json          string     // a JSON body
	form          url.Values // an urlencoded form
	upload        []byte     // a multipart upload of file_data with form's fields
}

// send sends c to the sandbox's OSWorld API with token (none: "") and
// returns the status, the content type and the body.
func (c osworldCall) send(t *testing.T, base, sandbox, token string) (int, string, []byte) {
	t.Helper()
	var body io.Reader
	ct := ""
	switch {
	case c.upload != nil:
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		for k, vs := range c.form {
			for _, v := range vs {
				mw.WriteField(k, v)
			}
		}
		fw, _ := mw.CreateFormFile("file_data", "upload.bin")
		fw.Write(c.upload)
		mw.Close()
		body, ct = &b, mw.FormDataContentType()
	case c.form != nil:
		body, ct = strings.NewReader(c.form.Encode()), "application/x-www-form-urlencoded"
	case c.json != "":
		body, ct = strings.NewReader(c.json), "application/json"
	}
	req, _ := http.NewRequest(c.method, base+"/api/v1/sandboxes/"+sandbox+"/osworld"+c.route, body)
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 5 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.route, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// osworld returns a function that sends a request of OSWorld's clients to
// sandbox's guest API with the server's token, fails the test unless it
// answers wantCode, and returns the body.
func (d *qemuDesk) osworld(sandbox string) func(t *testing.T, c osworldCall, wantCode int) []byte {
	return func(t *testing.T, c osworldCall, wantCode int) []byte {
		t.Helper()
		code, _, body := c.send(t, d.url, sandbox, "admin")
		if code != wantCode {
			t.Fatalf("%s %s: %d %s, want %d", c.method, c.route, code, body, wantCode)
		}
		return body
	}
}

// TestOSWorldGuestAPIOnQEMU replays the requests of OSWorld's
// PythonController and SetupController (desktop_env/controllers) against
// the guest API of a real linux-desktop clone, in the formats OSWorld's
// guest server answers them: a screenshot is a PNG of the screen's size,
// pyautogui code moves the pointer, commands run as the desktop's user
// with their exit codes, files go up and come back byte for byte, an
// application is launched, activated and closed by its window's name.
func TestOSWorldGuestAPIOnQEMU(t *testing.T) {
	d := startQEMUDesk(t)
	do := d.osworld("desk")
	execute := func(t *testing.T, body string) map[string]any {
		t.Helper()
		var out map[string]any
		if err := json.Unmarshal(do(t, osworldCall{method: "POST", route: "/execute", json: body}, 200), &out); err != nil {
			t.Fatal(err)
		}
		if out["status"] != "success" {
			t.Fatalf("execute %s: %v", body, out)
		}
		return out
	}

	t.Run("Screenshot", func(t *testing.T) {
		code, ct, body := osworldCall{method: "GET", route: "/screenshot"}.send(t, d.url, "desk", "admin")
		if code != 200 || ct != "image/png" {
			t.Fatalf("GET /screenshot: %d %s", code, ct)
		}
		img, err := png.Decode(bytes.NewReader(body))
		if err != nil || img.Bounds().Dx() != 1280 || img.Bounds().Dy() != 800 {
			t.Fatalf("the screenshot is no 1280x800 PNG: %v %v", err, img)
		}
		var size map[string]int
		json.Unmarshal(do(t, osworldCall{method: "POST", route: "/screen_size"}, 200), &size)
		if size["width"] != 1280 || size["height"] != 800 {
			t.Errorf("/screen_size: %v", size)
		}
		if got := string(do(t, osworldCall{method: "GET", route: "/platform"}, 200)); got != "Linux" {
			t.Errorf("/platform: %q", got)
		}
	})

	t.Run("PyAutoGUI", func(t *testing.T) {
		// PythonController.execute_python_command, as execute_action
		// sends an agent's pyautogui code.
		prefix := "import pyautogui; import time; pyautogui.FAILSAFE = False; "
		cmd, _ := json.Marshal(map[string]any{"command": []string{"python", "-c", prefix + "pyautogui.moveTo(321, 234)"}, "shell": false})
		execute(t, string(cmd))
		var pos []int
		json.Unmarshal(do(t, osworldCall{method: "GET", route: "/cursor_position"}, 200), &pos)
		if len(pos) != 2 || pos[0] != 321 || pos[1] != 234 {
			t.Errorf("/cursor_position after moveTo(321, 234): %v", pos)
		}
		// get_vm_platform asks Python.
		cmd, _ = json.Marshal(map[string]any{"command": []string{"python", "-c", prefix + "import platform; print(platform.system())"}, "shell": false})
		if out := execute(t, string(cmd)); out["output"] != "Linux\n" {
			t.Errorf("platform through python: %v", out)
		}
	})

	t.Run("Execute", func(t *testing.T) {
		out := execute(t, `{"command": "echo $HOME $(id -un); exit 3", "shell": true}`)
		if out["output"] != "/home/agent agent\n" || out["returncode"] != 3.0 {
			t.Errorf("a shell command: %v", out)
		}
		// shell as Python reads it: OSWorld's own tasks send "true".
		if out := execute(t, `{"command": "echo a && echo b", "shell": "true"}`); out["output"] != "a\nb\n" {
			t.Errorf(`a shell command with "shell": "true": %v`, out)
		}
		// A string without shell is split as shlex does; ~/ is the home.
		if out := execute(t, `{"command": "printf '%s|' 'a b' c ~/x"}`); out["output"] != "a b|c|/home/agent/x|" {
			t.Errorf("a split command: %v", out)
		}
		var fail map[string]any
		json.Unmarshal(do(t, osworldCall{method: "POST", route: "/execute", json: `{"command": ["no-such-program"]}`}, 500), &fail)
		if fail["status"] != "error" || !strings.Contains(fail["message"].(string), "No such file or directory") {
			t.Errorf("a missing program: %v", fail)
		}
		var py map[string]any
		json.Unmarshal(do(t, osworldCall{method: "POST", route: "/run_python", json: `{"code": "import sys\nprint(6*7)\nsys.exit(2)"}`}, 200), &py)
		if py["output"] != "42\n" || py["return_code"] != 2.0 || py["status"] != "error" {
			t.Errorf("/run_python: %v", py)
		}
		var sh map[string]any
		json.Unmarshal(do(t, osworldCall{method: "POST", route: "/run_bash_script", json: `{"script": "pwd; echo oops >&2; exit 4", "working_dir": "/tmp"}`}, 200), &sh)
		if sh["output"] != "/tmp\noops\n" || sh["returncode"] != 4.0 {
			t.Errorf("/run_bash_script: %v", sh)
		}
		do(t, osworldCall{method: "POST", route: "/run_bash_script", json: `{"script": "true", "working_dir": "/no/such/dir"}`}, 400)
		var term map[string]any
		json.Unmarshal(do(t, osworldCall{method: "GET", route: "/terminal"}, 200), &term)
		if term["status"] != "success" {
			t.Errorf("/terminal: %v", term)
		}
	})

	t.Run("Files", func(t *testing.T) {
		data := []byte("osworld\x00\xff bytes\n")
		got := do(t, osworldCall{method: "POST", route: "/setup/upload", form: url.Values{"file_path": {"~/tasks/in.bin"}}, upload: data}, 200)
		if string(got) != "File Uploaded: 16 bytes" {
			t.Errorf("/setup/upload: %q", got)
		}
		if back := do(t, osworldCall{method: "POST", route: "/file", form: url.Values{"file_path": {"/home/agent/tasks/in.bin"}}}, 200); !bytes.Equal(back, data) {
			t.Errorf("/file gave back %q, want %q", back, data)
		}
		if out := execute(t, `{"command": ["stat", "-c", "%U", "/home/agent/tasks/in.bin", "/home/agent/tasks"]}`); out["output"] != "agent\nagent\n" {
			t.Errorf("the uploaded file and its new directory belong to %v, want the desktop user", out["output"])
		}
		var missing map[string]string
		json.Unmarshal(do(t, osworldCall{method: "POST", route: "/file", form: url.Values{"file_path": {"/home/agent/none.txt"}}}, 404), &missing)
		if missing["error"] != "File not found" {
			t.Errorf("a missing file: %v", missing)
		}
		var tree struct {
			DirectoryTree struct {
				Type, Name string
				Children   []struct {
					Type, Name string
					Children   []struct{ Type, Name string }
				}
			} `json:"directory_tree"`
		}
		json.Unmarshal(do(t, osworldCall{method: "POST", route: "/list_directory", json: `{"path": "/home/agent/tasks"}`}, 200), &tree)
		if tree.DirectoryTree.Name != "tasks" || len(tree.DirectoryTree.Children) != 1 || tree.DirectoryTree.Children[0].Name != "in.bin" || tree.DirectoryTree.Children[0].Type != "file" {
			t.Errorf("/list_directory: %+v", tree)
		}
		do(t, osworldCall{method: "POST", route: "/list_directory", json: `{"path": "/home/agent/tasks/in.bin"}`}, 400)
	})

	t.Run("Windows", func(t *testing.T) {
		// A terminal whose title stays (no shell in it sets its own).
		got := do(t, osworldCall{method: "POST", route: "/setup/launch", json: `{"command": ["xterm", "-T", "osworld-launched", "-e", "sleep", "600"]}`}, 200)
		if string(got) != "xterm -T osworld-launched -e sleep 600 launched successfully" {
			t.Errorf("/setup/launch: %q", got)
		}
		listed := func() string {
			return execute(t, `{"command": ["wmctrl", "-l"]}`)["output"].(string)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(listed(), "osworld-launched") {
			if time.Now().After(deadline) {
				t.Fatalf("the launched xterm has no window: %s", listed())
			}
			time.Sleep(time.Second)
		}
		do(t, osworldCall{method: "POST", route: "/setup/activate_window", json: `{"window_name": "osworld-launched"}`}, 200)
		if out := execute(t, `{"command": "xdotool getactivewindow getwindowname", "shell": true}`); out["output"] != "osworld-launched\n" {
			t.Errorf("the active window after activate_window: %v", out["output"])
		}
		var size map[string]int
		json.Unmarshal(do(t, osworldCall{method: "POST", route: "/window_size", form: url.Values{"app_class_name": {"XTerm"}}}, 200), &size)
		if size["width"] < 100 || size["height"] < 50 {
			t.Errorf("/window_size of XTerm: %v", size)
		}
		do(t, osworldCall{method: "POST", route: "/setup/close_window", json: `{"window_name": "osworld-launched", "strict": true}`}, 200)
		for deadline := time.Now().Add(time.Minute); strings.Contains(listed(), "osworld-launched"); time.Sleep(time.Second) {
			if time.Now().After(deadline) {
				t.Fatalf("close_window left the window: %s", listed())
			}
		}
		// open_file opens a program by name and waits for its window.
		req, _ := http.NewRequest("PUT", d.url+"/api/v1/sandboxes/desk/files?path=/usr/local/bin/osworld-window", strings.NewReader("#!/bin/sh\nexec xterm -T osworld-window -e sleep 600\n"))
		req.Header.Set("Authorization", "Bearer admin")
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("PUT the program: %v %v", resp, err)
		}
		resp.Body.Close()
		var res ExecResponse
		d.call(t, "POST", "/api/v1/sandboxes/desk/exec", `{"command": "chmod", "args": ["755", "/usr/local/bin/osworld-window"]}`, &res)
		do(t, osworldCall{method: "POST", route: "/setup/open_file", json: `{"path": "osworld-window", "timeout_seconds": 120}`}, 200)
		if out := execute(t, `{"command": "xdotool getactivewindow getwindowname", "shell": true}`); out["output"] != "osworld-window\n" {
			t.Errorf("the active window after open_file: %v", out["output"])
		}
		do(t, osworldCall{method: "POST", route: "/setup/open_file", json: `{"path": "/no/such/file.txt"}`}, 404)
	})

	t.Run("GuestFilesAPI", func(t *testing.T) {
		data := bytes.Repeat([]byte{0, 1, 2, 0xfe, 0xff}, 200000) // 1 MB, not text
		req, _ := http.NewRequest("PUT", d.url+"/api/v1/sandboxes/desk/files?path=/home/agent/data/blob.bin", bytes.NewReader(data))
		req.Header.Set("Authorization", "Bearer admin")
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"size":1000000`) {
			t.Fatalf("PUT files: %d %s", resp.StatusCode, b)
		}
		req, _ = http.NewRequest("GET", d.url+"/api/v1/sandboxes/desk/files?path=/home/agent/data/blob.bin", nil)
		req.Header.Set("Authorization", "Bearer admin")
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(b, data) {
			t.Fatalf("GET files: %d, %d bytes back of %d", resp.StatusCode, len(b), len(data))
		}
		if out := execute(t, `{"command": ["stat", "-c", "%U", "/home/agent/data/blob.bin"]}`); out["output"] != "agent\n" {
			t.Errorf("a file written under the home belongs to %v", out["output"])
		}
		for _, c := range []struct {
			method, path string
			code         int
		}{
			{"GET", "/home/agent/data/none", 404},
			{"GET", "/home/agent/data", 404}, // a directory
			{"GET", "relative/path", 400},
			{"GET", "/home/agent/../../etc/shadow", 400},
			{"PUT", "", 400},
		} {
			req, _ := http.NewRequest(c.method, d.url+"/api/v1/sandboxes/desk/files?path="+url.QueryEscape(c.path), strings.NewReader("x"))
			req.Header.Set("Authorization", "Bearer admin")
			req.Header.Set("Content-Type", "application/octet-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code || (c.code == 400 && !strings.Contains(string(b), `"field":"path"`)) {
				t.Errorf("%s files?path=%q: %d %s, want %d", c.method, c.path, resp.StatusCode, b, c.code)
			}
		}
		// The linux-desktop image has no accessibility helper: 501.
		code, _, body := osworldCall{method: "GET", route: "/accessibility"}.send(t, d.url, "desk", "admin")
		if code != 500 || !strings.Contains(string(body), "no accessibility helper") {
			t.Errorf("/accessibility on linux-desktop: %d %s", code, body)
		}
		req, _ = http.NewRequest("GET", d.url+"/api/v1/sandboxes/desk/accessibility", nil)
		req.Header.Set("Authorization", "Bearer admin")
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 501 {
			t.Errorf("GET accessibility on linux-desktop: %d, want 501", resp.StatusCode)
		}
	})

	t.Run("Attacker", func(t *testing.T) {
		// No token; a page's form (Origin); a form that says it comes
		// from another site; text/plain: all refused, nothing run.
		marker := "/tmp/osworld-attacker"
		cmd := url.Values{"file_path": {marker}}
		if code, _, _ := (osworldCall{method: "POST", route: "/execute", json: `{"command": ["touch", "` + marker + `"]}`}).send(t, d.url, "desk", ""); code != 401 {
			t.Errorf("no token: %d, want 401", code)
		}
		for _, h := range []map[string]string{
			{"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"},
			{"Sec-Fetch-Site": "cross-site", "Content-Type": "application/x-www-form-urlencoded"},
			{"Content-Type": "text/plain"},
		} {
			req, _ := http.NewRequest("POST", d.url+"/api/v1/sandboxes/desk/osworld/file", strings.NewReader(cmd.Encode()))
			req.Header.Set("Authorization", "Bearer admin")
			for k, v := range h {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 403 && resp.StatusCode != 415 {
				t.Errorf("a form with %v: %d, want 403 or 415", h, resp.StatusCode)
			}
		}
		// A route of no such name, and a sandbox that does not exist.
		do(t, osworldCall{method: "POST", route: "/no_such_route", json: `{}`}, 404)
		if code, _, _ := (osworldCall{method: "GET", route: "/screenshot"}).send(t, d.url, "nobody", "admin"); code != 404 {
			t.Errorf("an unknown sandbox: %d, want 404", code)
		}
		if out := execute(t, `{"command": ["test", "-e", "`+marker+`"]}`); out["returncode"] != 1.0 {
			t.Errorf("a refused request left %s behind", marker)
		}
	})
}
