package osworld

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestSplitWords(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  bool
	}{
		{in: "ls -l /tmp", want: []string{"ls", "-l", "/tmp"}},
		{in: `echo 'a b' "c \"d\" \$e" f\ g`, want: []string{"echo", "a b", `c "d" \$e`, "f g"}},
		{in: `x '' ""`, want: []string{"x", "", ""}},
		{in: "  spaced\tout\n", want: []string{"spaced", "out"}},
		{in: `a'b'"c"`, want: []string{"abc"}},
		{in: "", want: nil},
		{in: `'open`, err: true},
		{in: `"open`, err: true},
		{in: `trailing\`, err: true},
	} {
		got, err := splitWords(c.in)
		if (err != nil) != c.err || (!c.err && !slices.Equal(got, c.want)) {
			t.Errorf("splitWords(%q) = %q, %v; want %q (error %v)", c.in, got, err, c.want, c.err)
		}
	}
}

func TestBuildTree(t *testing.T) {
	list := "d sub\x00f a.txt\x00f sub/b.txt\x00d sub/deeper\x00f sub/deeper/c\x00l link\x00"
	b, _ := json.Marshal(buildTree("root", []byte(list)))
	want := `{"type":"directory","name":"root","children":[{"type":"directory","name":"sub","children":[{"type":"file","name":"b.txt"},{"type":"directory","name":"deeper","children":[{"type":"file","name":"c"}]}]},{"type":"file","name":"a.txt"},{"type":"file","name":"link"}]}`
	if string(b) != want {
		t.Errorf("tree\n%s\nwant\n%s", b, want)
	}
	if b, _ := json.Marshal(buildTree("empty", nil)); string(b) != `{"type":"directory","name":"empty","children":[]}` {
		t.Errorf("empty tree %s", b)
	}
}

func TestCommand(t *testing.T) {
	a := &call{d: Desktop{User: "agent"}}
	for _, c := range []struct {
		raw   string
		shell bool
		path  string
		args  []string
		err   bool
	}{
		{raw: `["python", "-c", "print(1)"]`, path: "python", args: []string{"-c", "print(1)"}},
		{raw: `"ls ~/docs 'a b'"`, path: "ls", args: []string{"/home/agent/docs", "a b"}},
		{raw: `"echo $HOME; ls"`, shell: true, path: "/bin/sh", args: []string{"-c", "echo $HOME; ls"}},
		{raw: `["echo $0", "x"]`, shell: true, path: "/bin/sh", args: []string{"-c", "echo $0", "x"}},
		{raw: `[]`, err: true},
		{raw: `null`, err: true},
		{raw: `42`, err: true},
		{raw: `"unclosed 'quote"`, err: true},
	} {
		req, err := a.command(json.RawMessage(c.raw), c.shell)
		if (err != nil) != c.err || (!c.err && (req.Path != c.path || !slices.Equal(req.Args, c.args))) {
			t.Errorf("command(%s, shell %v) = %q %q, %v", c.raw, c.shell, req.Path, req.Args, err)
		}
	}
}

func TestWallpaperPath(t *testing.T) {
	for in, want := range map[string]string{
		"'file:///usr/share/backgrounds/hvkube/osworld.png'": "/usr/share/backgrounds/hvkube/osworld.png",
		"'file:///home/user/My Pictures/100%.png'":           "/home/user/My Pictures/100%.png",
		"'/home/user/plain.png'":                             "/home/user/plain.png",
		"''":                                                 "",
	} {
		if got := wallpaperPath(in); got != want {
			t.Errorf("wallpaperPath(%s) = %q, want %q", in, got, want)
		}
	}
}

// TestFocusedTerminal reads the text of the active GNOME Terminal as
// OSWorld's XPath does: the focused terminal of an active frame of
// gnome-terminal-server, not an inactive window's, not another
// application's.
func TestFocusedTerminal(t *testing.T) {
	const ns = `xmlns:st="https://accessibility.ubuntu.example.org/ns/state"`
	for _, c := range []struct {
		name, doc string
		want      any // string, or nil for none
	}{
		{"active", `<desktop-frame ` + ns + `><application name="gnome-terminal-server"><frame name="x" st:active="true"><filler><terminal name="Terminal" st:focused="true">user@osworld:~$ ls
a.txt
   </terminal></filler></frame></application></desktop-frame>`, "user@osworld:~$ ls\na.txt"},
		{"two focused terminals", `<desktop-frame ` + ns + `><application name="gnome-terminal-server"><frame st:active="true"><terminal st:focused="true">a</terminal><terminal st:focused="true">b</terminal></frame></application></desktop-frame>`, nil},
		{"inactive window", `<desktop-frame ` + ns + `><application name="gnome-terminal-server"><frame name="x"><terminal st:focused="true">no</terminal></frame></application></desktop-frame>`, nil},
		{"not focused", `<desktop-frame ` + ns + `><application name="gnome-terminal-server"><frame st:active="true"><terminal>no</terminal></frame></application></desktop-frame>`, nil},
		{"another application", `<desktop-frame ` + ns + `><application name="xterm"><frame st:active="true"><terminal st:focused="true">no</terminal></frame></application></desktop-frame>`, nil},
		{"empty desktop", `<desktop-frame ` + ns + `></desktop-frame>`, nil},
	} {
		got, err := focusedTerminal(c.doc)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		switch want := c.want.(type) {
		case nil:
			if got != nil {
				t.Errorf("%s: %q, want none", c.name, *got)
			}
		case string:
			if got == nil || *got != want {
				t.Errorf("%s: %v, want %q", c.name, got, want)
			}
		}
	}
	if _, err := focusedTerminal("<not xml"); err == nil {
		t.Error("a broken tree gave no error")
	}
}
