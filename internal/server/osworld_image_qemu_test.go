//go:build linux

package server

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// TestOSWorldImageOnQEMU: a clone of the osworld image is OSWorld's
// environment, as OSWorld's tasks drive it through its guest API: the
// user `user` in its home with sudo and the session's bus, GNOME's
// settings (the background follows them), relative uploads, GNOME
// Terminal's text, a recording of the screen, a spreadsheet opened in
// LibreOffice Calc, edited, saved and converted as tasks' checks do and in the
// accessibility tree, Google Chrome with DevTools relayed as tasks start
// it, and VLC's web interface with its password.
func TestOSWorldImageOnQEMU(t *testing.T) {
	tpl := &api.Template{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindTemplate}}
	tpl.Metadata.Name = "osworld"
	tpl.Spec.QEMU = &api.QEMUImage{Image: "osworld"}
	tpl.Spec.Guest.User = "user"
	tpl.Spec.Resources.MemoryMB = 2048
	tpl.Spec.Display.Resolution = "1920x1080"
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "ow"
	sb.Spec.TemplateRef = "osworld"
	d := startOnQEMU(t, tpl, sb, 15*time.Minute)

	do := d.osworld("ow")
	// shell runs a shell command as OSWorld's tasks do, and returns its
	// output.
	shell := func(t *testing.T, command string) string {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"command": command, "shell": true})
		var out struct{ Status, Output, Error string }
		json.Unmarshal(do(t, osworldCall{method: "POST", route: "/execute", json: string(b)}, 200), &out)
		if out.Status != "success" {
			t.Fatalf("execute %q: %+v", command, out)
		}
		return out.Output
	}
	launch := func(t *testing.T, command ...string) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"command": command})
		do(t, osworldCall{method: "POST", route: "/setup/launch", json: string(b)}, 200)
	}
	// until waits for what OSWorld's tasks wait for, under emulation.
	until := func(t *testing.T, what string, wait time.Duration, f func() (bool, string)) {
		t.Helper()
		var last string
		for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
			var ok bool
			if ok, last = f(); ok {
				return
			}
		}
		t.Fatalf("%s: not within %s (last: %s)", what, wait, last)
	}

	t.Run("Account", func(t *testing.T) {
		got := shell(t, `pwd; id -un; id -Gn; echo "$SHELL $DBUS_SESSION_BUS_ADDRESS"; echo password | sudo -S id -u 2>/dev/null; xdg-settings get default-web-browser; python -c "import pyautogui, Xlib.display, PIL, lxml, requests; print(pyautogui.size())"; test -O ~/.local/share && test -f ~/.config/GIMP/2.10/gimprc && echo home-is-the-users`)
		want := []string{"/home/user", "user", "sudo", "/bin/bash unix:path=/run/user/1000/bus", "\n0\n", "google-chrome.desktop", "Size(width=1920, height=1080)", "home-is-the-users"}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("the environment lacks %q:\n%s", w, got)
			}
		}
		var size map[string]int
		json.Unmarshal(do(t, osworldCall{method: "POST", route: "/screen_size"}, 200), &size)
		if size["width"] != 1920 || size["height"] != 1080 {
			t.Errorf("/screen_size: %v, want 1920x1080", size)
		}
		// The time zone, as an os task sets it and its check reads it
		// (no systemd: the image's timedatectl).
		got = shell(t, "timedatectl set-timezone Africa/Abidjan 2>&1; echo password | sudo -S timedatectl set-timezone ../../../etc/shadow 2>&1 | tail -1; readlink /etc/localtime; echo password | sudo -S timedatectl set-timezone Africa/Abidjan 2>/dev/null && timedatectl status | sed -n 4p; echo password | sudo -S timedatectl set-timezone Etc/UTC 2>/dev/null")
		if want := "Time zone: Africa/Abidjan (GMT, +0000)\n"; !strings.HasSuffix(got, want) || !strings.Contains(got, "Access denied") ||
			!strings.Contains(got, "Invalid or not installed time zone '../../../etc/shadow'\n/usr/share/zoneinfo/Etc/UTC\n") {
			t.Errorf("timedatectl as the user, a path as the zone, then through sudo: %q, want the user and the path refused and then %q", got, want)
		}
		// A relative upload is in the home, as tasks' setup.sh is.
		do(t, osworldCall{method: "POST", route: "/setup/upload", form: url.Values{"file_path": {"setup.sh"}}, upload: []byte("echo ran in $(pwd)\n")}, 200)
		if got := shell(t, "bash setup.sh"); got != "ran in /home/user\n" {
			t.Errorf("bash setup.sh: %q", got)
		}
	})

	t.Run("Wallpaper", func(t *testing.T) {
		body := do(t, osworldCall{method: "POST", route: "/wallpaper"}, 200)
		if img, err := png.Decode(bytes.NewReader(body)); err != nil || img.Bounds().Dx() != 1920 {
			t.Fatalf("/wallpaper: not the 1920-wide default picture: %v", err)
		}
		// OSWorld's change_wallpaper with a picture of one colour: the
		// setting changes, /wallpaper answers it, and the screen shows it.
		do(t, osworldCall{method: "POST", route: "/setup/upload", form: url.Values{"file_path": {"/home/user/Pictures/red.png"}}, upload: solidPNG(t, 64, 36, color.RGBA{200, 20, 20, 255})}, 200)
		do(t, osworldCall{method: "POST", route: "/setup/change_wallpaper", json: `{"path": "~/Pictures/red.png"}`}, 200)
		if got := shell(t, "gsettings get org.gnome.desktop.background picture-uri"); !strings.Contains(got, "file:///home/user/Pictures/red.png") {
			t.Errorf("picture-uri %q", got)
		}
		if img, err := png.Decode(bytes.NewReader(do(t, osworldCall{method: "POST", route: "/wallpaper"}, 200))); err != nil || img.Bounds().Dx() != 64 {
			t.Errorf("/wallpaper after the change: %v", err)
		}
		until(t, "the background is the new picture", 60*time.Second, func() (bool, string) {
			img, err := png.Decode(bytes.NewReader(do(t, osworldCall{method: "GET", route: "/screenshot"}, 200)))
			if err != nil {
				return false, err.Error()
			}
			r, g, b, _ := img.At(960, 500).RGBA()
			return r>>8 > 150 && g>>8 < 80 && b>>8 < 80, fmt.Sprintf("pixel %d %d %d", r>>8, g>>8, b>>8)
		})
		do(t, osworldCall{method: "POST", route: "/setup/change_wallpaper", json: `{"path": "/no/such.png"}`}, 404)
	})

	t.Run("Recording", func(t *testing.T) {
		do(t, osworldCall{method: "POST", route: "/start_recording"}, 200)
		do(t, osworldCall{method: "POST", route: "/start_recording"}, 400)
		time.Sleep(2 * time.Second)
		mp4 := do(t, osworldCall{method: "POST", route: "/end_recording"}, 200)
		if len(mp4) < 12 || string(mp4[4:8]) != "ftyp" {
			t.Fatalf("/end_recording: %d bytes that are no MP4", len(mp4))
		}
		do(t, osworldCall{method: "POST", route: "/end_recording"}, 400)
	})

	t.Run("Terminal", func(t *testing.T) {
		// As tasks open one: Ctrl+Alt+T; its text comes from the
		// accessibility tree.
		key := `{"command": ["python", "-c", "import pyautogui; pyautogui.hotkey('ctrl', 'alt', 't')"], "shell": false}`
		do(t, osworldCall{method: "POST", route: "/execute", json: key}, 200)
		until(t, "GNOME Terminal's window", 3*time.Minute, func() (bool, string) {
			out := shell(t, "wmctrl -lx")
			return strings.Contains(out, "gnome-terminal"), out
		})
		until(t, "the terminal's text", 3*time.Minute, func() (bool, string) {
			typed := `{"command": ["python", "-c", "import pyautogui; pyautogui.write('echo hvkube-$((6*7))\\n')"], "shell": false}`
			do(t, osworldCall{method: "POST", route: "/execute", json: typed}, 200)
			time.Sleep(3 * time.Second)
			var out struct {
				Output *string `json:"output"`
			}
			json.Unmarshal(do(t, osworldCall{method: "GET", route: "/terminal"}, 200), &out)
			if out.Output == nil {
				return false, "null"
			}
			return strings.Contains(*out.Output, "hvkube-42"), *out.Output
		})
	})

	t.Run("Calc", func(t *testing.T) {
		do(t, osworldCall{method: "POST", route: "/setup/upload", form: url.Values{"file_path": {"/home/user/Desktop/sales.xlsx"}}, upload: xlsx(t, []string{"Region", "Sales"}, []string{"North", "42"})}, 200)
		do(t, osworldCall{method: "POST", route: "/setup/open_file", json: `{"path": "/home/user/Desktop/sales.xlsx"}`}, 200)
		do(t, osworldCall{method: "POST", route: "/setup/activate_window", json: `{"window_name": "sales.xlsx - LibreOffice Calc", "strict": true}`}, 200)
		if got := shell(t, "wmctrl -l"); !strings.Contains(got, "sales.xlsx - LibreOffice Calc") {
			t.Fatalf("no window titled as OSWorld's tasks expect:\n%s", got)
		}
		// An edit saved as tasks' checks save it (Ctrl+S in Microsoft's
		// format): no dialog asks whether to keep the format, which would
		// hold the save and the conversion after it.
		edit := `{"command": ["python", "-c", "import pyautogui; pyautogui.hotkey('ctrl', 'Home'); pyautogui.write('Zone\\n'); pyautogui.hotkey('ctrl', 's')"], "shell": false}`
		// Calc's window shows before its sheet takes keys (under
		// emulation): the edit is made again until the file holds it.
		until(t, "the edit saved", 3*time.Minute, func() (bool, string) {
			do(t, osworldCall{method: "POST", route: "/execute", json: edit}, 200)
			time.Sleep(15 * time.Second)
			out := shell(t, "unzip -p /home/user/Desktop/sales.xlsx xl/sharedStrings.xml; wmctrl -l")
			return strings.Contains(out, ">Zone<"), out
		})
		// As tasks' checks convert it, with Calc running: one CSV a sheet.
		// (Calc may still be saving an edit made twice: convert again
		// until the file is there.)
		until(t, "the saved edit converted", 4*time.Minute, func() (bool, string) {
			shell(t, `libreoffice --convert-to "csv:Text - txt - csv (StarCalc):44,34,UTF-8,,,,false,true,true,false,false,1" --outdir /home/user /home/user/Desktop/sales.xlsx`)
			got := shell(t, "cat /home/user/sales-Sheet1.csv")
			return got == "Zone,Sales\nNorth,42\n", fmt.Sprintf("sales-Sheet1.csv: %q", got)
		})
		// LibreOffice makes its accessible objects when first asked (the
		// first reads may find the application with no window yet); the
		// terminal left open above must not hide it.
		until(t, "Calc's window of the file in the accessibility tree", 4*time.Minute, func() (bool, string) {
			var tree struct{ AT string }
			json.Unmarshal(do(t, osworldCall{method: "GET", route: "/accessibility"}, 200), &tree)
			return strings.Contains(tree.AT, `<application name="soffice"`) && strings.Contains(tree.AT, "sales.xlsx - LibreOffice Calc"),
				fmt.Sprintf("%d bytes, applications %q", len(tree.AT), applications.FindAllString(tree.AT, -1))
		})
		shell(t, "pkill soffice; true")
	})

	t.Run("Chrome", func(t *testing.T) {
		launch(t, "google-chrome", "--remote-debugging-port=1337")
		launch(t, "socat", "tcp-listen:9222,fork", "tcp:localhost:1337")
		until(t, "DevTools through the port forward", 5*time.Minute, func() (bool, string) {
			code, body := d.get(t, "/api/v1/sandboxes/ow/ports/9222/json/version", nil)
			return code == 200 && strings.Contains(body, `"Browser"`), fmt.Sprint(code, " ", body)
		})
		until(t, "a window titled as Google Chrome's", 2*time.Minute, func() (bool, string) {
			out := shell(t, "wmctrl -lx")
			return strings.Contains(out, "Google-chrome") && strings.Contains(out, " - Google Chrome"), out
		})
		// Chromium builds its tree when first asked, slowly under
		// emulation: the first reads may end before they reach it.
		until(t, "Google Chrome in the accessibility tree", 5*time.Minute, func() (bool, string) {
			var tree struct{ AT string }
			json.Unmarshal(do(t, osworldCall{method: "GET", route: "/accessibility"}, 200), &tree)
			return strings.Contains(tree.AT, `<application name="Google Chrome"`),
				fmt.Sprintf("%d bytes, applications %q", len(tree.AT), applications.FindAllString(tree.AT, -1))
		})
		shell(t, "pkill -f chromium; pkill socat; true")
	})

	t.Run("VLC", func(t *testing.T) {
		launch(t, "vlc", "--no-audio")
		status := "/api/v1/sandboxes/ow/ports/8080/requests/status.xml"
		until(t, "VLC's web interface", 3*time.Minute, func() (bool, string) {
			code, body := d.get(t, status, nil)
			return code == 401, fmt.Sprint(code, " ", body)
		})
		basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(":password"))
		code, body := d.get(t, status, map[string]string{GuestAuthorizationHeader: basic})
		if code != 200 || !strings.Contains(body, "<root>") {
			t.Fatalf("status.xml with VLC's password: %d %s", code, body)
		}
	})
}

// applications finds the application nodes of an accessibility tree.
var applications = regexp.MustCompile(`<application name="[^"]*"`)

// get sends a GET with the server's token and extra headers; the status
// and the body.
func (d *qemuDesk) get(t *testing.T, path string, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", d.url+path, nil)
	req.Header.Set("Authorization", "Bearer admin")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

func solidPNG(t *testing.T, w, h int, c color.Color) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// xlsx is a workbook of one sheet with the rows given (inline strings,
// numbers where a cell parses as one): the few parts a spreadsheet needs.
func xlsx(t *testing.T, rows ...[]string) []byte {
	t.Helper()
	var sheet strings.Builder
	for i, row := range rows {
		fmt.Fprintf(&sheet, `<row r="%d">`, i+1)
		for j, v := range row {
			ref := fmt.Sprintf("%c%d", 'A'+j, i+1)
			if _, err := fmt.Sscanf(v, "%f", new(float64)); err == nil {
				fmt.Fprintf(&sheet, `<c r="%s"><v>%s</v></c>`, ref, v)
			} else {
				fmt.Fprintf(&sheet, `<c r="%s" t="inlineStr"><is><t>%s</t></is></c>`, ref, v)
			}
		}
		sheet.WriteString("</row>")
	}
	parts := map[string]string{
		"[Content_Types].xml":        `<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>`,
		"_rels/.rels":                `<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>`,
		"xl/workbook.xml":            `<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>`,
		"xl/_rels/workbook.xml.rels": `<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/></Relationships>`,
		"xl/worksheets/sheet1.xml":   `<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>` + sheet.String() + `</sheetData></worksheet>`,
	}
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, name := range []string{"[Content_Types].xml", "_rels/.rels", "xl/workbook.xml", "xl/_rels/workbook.xml.rels", "xl/worksheets/sheet1.xml"} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, parts[name])
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
