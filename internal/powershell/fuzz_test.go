package powershell_test

import (
	"testing"
	"unicode/utf8"

	"github.com/hvkube/hvkube/internal/powershell"
	"github.com/hvkube/hvkube/internal/powershell/pstest"
)

var fuzzScript = powershell.Script{
	Name: "fuzz",
	Text: "param([string]$Name, [string[]]$Names, $Data)\n[pscustomobject]@{ Name = $Name; Names = $Names; Data = $Data }\n",
}

// FuzzArgsNeverChangeScript: whatever a value holds, it travels only on
// stdin, and arrives there unchanged.
func FuzzArgsNeverChangeScript(f *testing.F) {
	for _, s := range []string{
		"",
		"plain",
		"'", `"`, "''", `""`, "`", "``'",
		"$(Remove-Item -Recurse C:\\)",
		"${env:HVKUBE_TOKEN}",
		"@(1)", "@{a=1}",
		"; Remove-Item -Recurse -Force C:\\",
		"'); iex('calc",
		"\"); iex(\"calc",
		"\n}\nRemove-Item C:\\\n{",
		"\r\n#",
		"<# comment",
		"a\x00b",
		"\u2018smart quotes\u2019 \u201cdouble\u201d", // PowerShell treats these as quotes
		"\u2028\u2029",
		"\\/Date(0)\\/",
		"é😀𝄞",
		"\ufeffbom",
		"\xff\xfe", // not UTF-8
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		args := powershell.Args{"Name": v, "Names": []string{v, "x" + v, ""}, "Data": []byte(v)}
		if !utf8.ValidString(v) {
			// JSON would carry U+FFFD instead: Command refuses it.
			if _, _, err := powershell.Command(fuzzScript, args); err == nil {
				t.Errorf("Command accepted invalid UTF-8 %q", v)
			}
			args = powershell.Args{"Data": []byte(v)}
		}
		pstest.CheckArgsInert(t, fuzzScript, args)
	})
}
