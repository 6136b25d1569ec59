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
