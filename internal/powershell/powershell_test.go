package powershell

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/hvkube/hvkube/internal/api"
)

var fixedFlags = []string{"-NoProfile", "-NonInteractive", "-NoLogo", "-ExecutionPolicy", "Bypass", "-EncodedCommand"}

// decodeCommand is what PowerShell does with -EncodedCommand's argument.
func decodeCommand(t testing.TB, enc string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		t.Fatalf("-EncodedCommand is not base64: %v", err)
	}
	if len(b)%2 != 0 {
		t.Fatalf("-EncodedCommand has an odd number of bytes: %d", len(b))
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
	}
	return string(utf16.Decode(u))
}

func TestCommand(t *testing.T) {
	s := Script{Name: "get-vm", Text: "param([string]$Name, [string[]]$Tags)\nGet-VM -Name $Name\n"}
	for _, tt := range []struct {
		name string
		args Args
		want string // the JSON on stdin
	}{
		{"values", Args{"Name": "a'b\"c", "Tags": []string{"x", "$(y)"}}, `{"Name":"a'b\"c","Tags":["x","$(y)"]}`},
		{"nil args", nil, `{}`},
		{"bytes", Args{"Data": []byte{0, 1, 0xff}}, `{"Data":"AAH/"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			argv, stdin, err := Command(s, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if got := argv[:len(argv)-1]; !slices.Equal(got, fixedFlags) {
				t.Errorf("flags = %q, want %q", got, fixedFlags)
			}
			if got, want := decodeCommand(t, argv[len(argv)-1]), Wrap(s); got != want {
				t.Errorf("decoded command = %q, want Wrap(s) = %q", got, want)
			}
			js, err := base64.StdEncoding.DecodeString(string(stdin))
			if err != nil {
				t.Fatalf("stdin is not base64: %v", err)
			}
			if string(js) != tt.want {
				t.Errorf("stdin = %s, want %s", js, tt.want)
			}
		})
	}
}

func TestCommandRefuses(t *testing.T) {
	ok := "param($Name)\n$Name"
	for _, tt := range []struct {
		name string
		text string
		args Args
	}{
		{"no param block", "Get-VM", nil},
		{"comment before param", "# get\nparam($Name)", nil},
		{"param is a prefix", "paramX($Name)", nil},
		{"too long", "param()\n" + strings.Repeat("#", 20000), nil},
		{"name with a dash", ok, Args{"Na-me": "x"}},
		{"name with a space", ok, Args{"Name; rm": "x"}},
		{"name starting with a digit", ok, Args{"1Name": "x"}},
		{"empty name", ok, Args{"": "x"}},
		{"names equal but for case", ok, Args{"Name": "x", "name": "y"}},
		{"invalid UTF-8", ok, Args{"Name": "a\xffb"}},
		{"invalid UTF-8 in a slice", ok, Args{"Name": []string{"ok", "\xc3"}}},
		{"invalid UTF-8 in a map key", ok, Args{"Name": map[string]int{"\xc3": 1}}},
		{"not JSON", ok, Args{"Name": func() {}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Command(Script{Name: "s", Text: tt.text}, tt.args); err == nil {
				t.Error("Command accepted it")
			}
		})
	}
}

func TestCommandAccepts(t *testing.T) {
	for _, tt := range []struct {
		name string
		text string
		args Args
	}{
		{"leading space and capital", "  Param ($Name)\n$Name", Args{"Name": "x"}},
		{"attributes", "param(\n  [Parameter(Mandatory)][string]$Name\n)", Args{"Name": "x"}},
		{"bytes need not be UTF-8", "param($Data)", Args{"Data": []byte("\xff\xfe")}},
		{"underscores and digits", "param($a_1)", Args{"a_1": 1, "_b": true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Command(Script{Name: "s", Text: tt.text}, tt.args); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestEncode(t *testing.T) {
	for _, text := range []string{
		"",
		"Get-VM",
		"naïve café — ünïcödé",
		"emoji 😀 and 𝄞 (outside the BMP, surrogate pairs)",
		"nul \x00 and newline\r\n",
	} {
		if got := decodeCommand(t, Encode(text)); got != text {
			t.Errorf("Encode(%q) decodes to %q", text, got)
		}
	}
	// One UTF-16 unit per BMP character, two for one outside it.
	if got, want := len(mustBase64(t, Encode("a😀"))), 2*3; got != want {
		t.Errorf("Encode(a😀) is %d bytes, want %d", got, want)
	}
}

func mustBase64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWrap pins what the wrapper must keep doing; the reasons are in
// powershell.go.
func TestWrap(t *testing.T) {
	s := Script{Name: "s", Text: "param($x)\n$x"}
	w := Wrap(s)
	if !strings.Contains(w, "\n"+s.Text+"\n") {
		t.Error("the script is not on lines of its own")
	}
	for _, want := range []string{
		"$ErrorActionPreference = 'Stop'",
		"3>$null 4>$null 5>$null 6>$null", // warnings and Write-Host stay out of stdout
		"Remove-TypeData -TypeName System.Array",
		"[Console]::OpenStandardOutput()",
		"exit 1",
	} {
		if !strings.Contains(w, want) {
			t.Errorf("wrapper lacks %q", want)
		}
	}
	for _, bad := range []string{
		"2>",                        // native stderr would become terminating errors
		"[Console]::OutputEncoding", // would change a shared console's code page
		"$input",                    // would make PowerShell consume stdin itself
	} {
		if strings.Contains(w, bad) {
			t.Errorf("wrapper has %q", bad)
		}
	}
}

type vm struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

func TestDecode(t *testing.T) {
	for _, tt := range []struct {
		name string
		out  string
		into func() any // a pointer, preset to show what is left alone
		want any
	}{
		{"single object into a slice", `{"name":"a","state":"Running"}`, func() any { return new([]vm) }, []vm{{"a", "Running"}}},
		{"array into a slice", `[{"name":"a"},{"name":"b"}]`, func() any { return new([]vm) }, []vm{{Name: "a"}, {Name: "b"}}},
		{"object into a struct", `{"name":"a"}`, func() any { return new(vm) }, vm{Name: "a"}},
		{"empty leaves the value", "", func() any { v := []vm{{Name: "old"}}; return &v }, []vm{{Name: "old"}}},
		{"spaces leave the value", " \r\n", func() any { v := "old"; return &v }, "old"},
		{"null leaves the value", "null", func() any { v := vm{Name: "old"}; return &v }, vm{Name: "old"}},
		{"BOM", "\xef\xbb\xbf{\"name\":\"a\"}\r\n", func() any { return new(vm) }, vm{Name: "a"}},
		{"string", `"hello \u00e9"`, func() any { return new(string) }, "hello é"},
		{"string into a slice", `"hello"`, func() any { return new([]string) }, []string{"hello"}},
		{"strings", `["a","b"]`, func() any { return new([]string) }, []string{"a", "b"}},
		{"int", `42`, func() any { return new(int) }, 42},
		{"int into a slice", `42`, func() any { return new([]int) }, []int{42}},
		{"large int", `9007199254740993`, func() any { return new(int64) }, int64(9007199254740993)},
		{"decimal", `1.5`, func() any { return new(float64) }, 1.5},
		{"bool", `true`, func() any { return new(bool) }, true},
		{"raw message kept whole", `{"a":1}`, func() any { return new(json.RawMessage) }, json.RawMessage(`{"a":1}`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.into()
			if err := Decode([]byte(tt.out), v); err != nil {
				t.Fatal(err)
			}
			if got := reflect.ValueOf(v).Elem().Interface(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
	if err := Decode([]byte(`{"name":`), new(vm)); err == nil {
		t.Error("Decode accepted broken JSON")
	}
	if err := Decode([]byte(`{"name":"a"}`), nil); err != nil {
		t.Errorf("Decode into nil: %v", err)
	}
}

func TestParseError(t *testing.T) {
	for _, tt := range []struct {
		name   string
		stderr string
		want   Error
	}{
		{
			"wrapper line among others",
			"#< CLIXML\r\n<Objs Version=\"1.1.0.1\"></Objs>\r\nsome native tool: warning\r\n" +
				`{"category":"ObjectNotFound","errorId":"ObjectNotFound,Microsoft.HyperV.PowerShell.Commands.SetVMFirmware","message":"Hyper-V was unable to find a virtual machine with name \"x\"."}` + "\r\n",
			Error{Script: "s", ExitCode: 1, Category: "ObjectNotFound", ErrorID: "ObjectNotFound,Microsoft.HyperV.PowerShell.Commands.SetVMFirmware", Message: `Hyper-V was unable to find a virtual machine with name "x".`},
		},
		{
			"the last wrapper line wins",
			`{"message":"first","category":"InvalidOperation","errorId":"a"}` + "\n" + `{"message":"second","category":"InvalidArgument","errorId":"b"}`,
			Error{Script: "s", ExitCode: 1, Category: "InvalidArgument", ErrorID: "b", Message: "second"},
		},
		{
			"other JSON is text",
			`{"level":"warn","msg":"not ours"}`,
			Error{Script: "s", ExitCode: 1, Message: `{"level":"warn","msg":"not ours"}`},
		},
		{
			"plain text",
			"At line:1 char:1\r\n+ param(\r\nMissing ')' in function parameter list.\r\n",
			Error{Script: "s", ExitCode: 1, Message: "At line:1 char:1\r\n+ param(\r\nMissing ')' in function parameter list."},
		},
		{"nothing", "", Error{Script: "s", ExitCode: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := parseError("s", 1, []byte(tt.stderr))
			var got *Error
			if !errors.As(err, &got) {
				t.Fatalf("got %T, want *Error", err)
			}
			if *got != tt.want {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func TestErrorIs(t *testing.T) {
	for _, tt := range []struct {
		category          string
		notFound, invalid bool
	}{
		{"ObjectNotFound", true, false},
		{"InvalidArgument", false, true},
		{"InvalidData", false, true},
		{"InvalidOperation", false, false},
		{"", false, false},
	} {
		err := error(&Error{Script: "s", Category: tt.category, Message: "m"})
		if got := errors.Is(err, api.ErrNotFound); got != tt.notFound {
			t.Errorf("%q: errors.Is(ErrNotFound) = %v", tt.category, got)
		}
		if got := errors.Is(err, api.ErrInvalid); got != tt.invalid {
			t.Errorf("%q: errors.Is(ErrInvalid) = %v", tt.category, got)
		}
		if errors.Is(err, api.ErrConflict) {
			t.Errorf("%q: errors.Is(ErrConflict)", tt.category)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	for _, tt := range []struct {
		err  Error
		want string
	}{
		{Error{Script: "s", Message: "boom", ErrorID: "id", ExitCode: 1}, "s: boom"},
		{Error{Script: "s", ErrorID: "id", ExitCode: 1}, "s: id"},
		{Error{Script: "s", ExitCode: 3}, "s: exited 3"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestResult(t *testing.T) {
	var v []vm
	if err := Result("s", 0, []byte(`{"name":"a"}`), nil, &v); err != nil || len(v) != 1 {
		t.Errorf("Result = %v, %v", v, err)
	}
	if err := Result("s", 0, []byte("null"), []byte("chatter"), &v); err != nil || len(v) != 1 {
		t.Errorf("null output: %v, %v", v, err)
	}
	if err := Result("s", 0, nil, nil, &v); err == nil {
		t.Error("no output at all (the script called exit) was accepted")
	}
	if err := Result("s", 0, []byte("not json"), nil, &v); err == nil {
		t.Error("broken output was accepted")
	}
	err := Result("s", 3, nil, nil, &v)
	var e *Error
	if !errors.As(err, &e) || e.ExitCode != 3 {
		t.Errorf("exit 3: %v", err)
	}
}

func TestChildEnv(t *testing.T) {
	in := []string{
		"PATH=/bin",
		"HVKUBE_TOKEN=secret",
		"hvkube_token=secret",
		"HVKUBE=kept", // not hvkube's prefix
		"PSModulePath=C:\\Program Files\\PowerShell\\7\\Modules",
		"PSMODULEPATH=x",
		"=C:=C:\\dir",
		"",
	}
	want := []string{"PATH=/bin", "HVKUBE=kept", "=C:=C:\\dir", ""}
	if got := childEnv(in); !slices.Equal(got, want) {
		t.Errorf("childEnv = %q, want %q", got, want)
	}
}

func TestBuffers(t *testing.T) {
	tb := &tailBuffer{keep: 4}
	for _, s := range []string{"abc", "defgh", "ijk"} {
		if n, err := tb.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if got := string(tb.Bytes()); got != "hijk" {
		t.Errorf("tailBuffer kept %q, want %q", got, "hijk")
	}
	lb := &limitedBuffer{max: 4}
	if _, err := lb.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if _, err := lb.Write([]byte("de")); err == nil || !lb.over {
		t.Error("limitedBuffer took more than its max")
	}
	if !bytes.Equal(lb.Bytes(), []byte("abc")) {
		t.Errorf("limitedBuffer kept %q", lb.Bytes())
	}
	// io.Copy would call ReadFrom instead of Write, past the limits.
	for _, w := range []any{lb, tb} {
		if _, ok := w.(io.ReaderFrom); ok {
			t.Errorf("%T has ReadFrom", w)
		}
	}
}
