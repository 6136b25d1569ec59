package hyperv

import (
	"github.com/hvkube/hvkube/internal/guest"
	"reflect"
	"strings"
	"testing"
)

func TestQuoteArg(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{``, `""`},
		{`a`, `a`},
		{`hello.txt`, `hello.txt`},
		{`C:\dir\file`, `C:\dir\file`},
		{`C:\dir\`, `C:\dir\`},
		{`a b`, `"a b"`},
		{"a\tb", "\"a\tb\""},
		{"a\nb", "\"a\nb\""},
		{`a"b`, `"a\"b"`},
		{`"`, `"\""`},
		{`a\"b`, `"a\\\"b"`},
		{`a\\"b`, `"a\\\\\"b"`},
		{`C:\Program Files\`, `"C:\Program Files\\"`},
		{`C:\Program Files\\`, `"C:\Program Files\\\\"`},
		{`a\b c`, `"a\b c"`},
		{`$(Stop-Computer)`, `$(Stop-Computer)`},
		{`a;b&c|d`, `a;b&c|d`},
		{`'single quoted'`, `"'single quoted'"`},
	} {
		if got := quoteArg(c.in); got != c.want {
			t.Errorf("quoteArg(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := parseCommandLine(quoteArg(c.in)); !reflect.DeepEqual(got, []string{c.in}) {
			t.Errorf("%q parses back as %q", quoteArg(c.in), got)
		}
	}
	if got := commandLine(`C:\Program Files\App\app.exe`, []string{"-x", "a b"}); got != `"C:\Program Files\App\app.exe" -x "a b"` {
		t.Errorf("commandLine = %q", got)
	}
	if got := commandLine(`notepad.exe`, nil); got != `"notepad.exe"` {
		t.Errorf("commandLine = %q", got)
	}
}

func FuzzQuoteArgs(f *testing.F) {
	for _, s := range []string{"", " ", `\`, `\\`, `"`, `\"`, `a b\`, `"\\"\`, "tab\there", `x""y`} {
		f.Add(s, s+" "+s)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if strings.ContainsRune(a+b, 0) {
			return
		}
		args := []string{a, b, "", a}
		if got := parseCommandLine(joinArgs(args)); !reflect.DeepEqual(got, args) {
			t.Fatalf("%q -> %q -> %q", args, joinArgs(args), got)
		}
	})
}

// parseCommandLine splits the arguments part of a command line as
// CommandLineToArgvW and the Microsoft C runtime (2008 and later) do.
func parseCommandLine(s string) []string {
	args := []string{}
	i := 0
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= len(s) {
			return args
		}
		var arg strings.Builder
		quoted := false
		for i < len(s) {
			c := s[i]
			if (c == ' ' || c == '\t') && !quoted {
				break
			}
			if c == '\\' {
				n := 0
				for i < len(s) && s[i] == '\\' {
					n++
					i++
				}
				if i < len(s) && s[i] == '"' {
					arg.WriteString(strings.Repeat(`\`, n/2))
					if n%2 == 1 {
						arg.WriteByte('"')
						i++
					}
				} else {
					arg.WriteString(strings.Repeat(`\`, n))
				}
				continue
			}
			if c == '"' {
				if quoted && i+1 < len(s) && s[i+1] == '"' {
					arg.WriteByte('"')
					i += 2
					continue
				}
				quoted = !quoted
				i++
				continue
			}
			arg.WriteByte(c)
			i++
		}
		args = append(args, arg.String())
	}
}

func TestIsWindowsAbs(t *testing.T) {
	for p, want := range map[string]bool{
		`C:\`: true, `c:\Users\agent\x.txt`: true, `D:/data/x`: true, `\\server\share\x`: true, `//server/share`: true,
		``: false, `C:`: false, `C:x`: false, `x.txt`: false, `\x`: false, `/tmp/x`: false, `\\`: false, `\\\x`: false,
		`1:\x`: false, "C:\\a\x00b": false, `..\x`: false,
	} {
		if got := (guest.WindowsOS{}).IsAbs(p); got != want {
			t.Errorf("IsAbs(%q) = %v, want %v", p, got, want)
		}
	}
}
