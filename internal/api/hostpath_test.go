package api

import (
	"strings"
	"testing"
)

// TestValidateHostPathSyntax: a host path is accepted when it is absolute
// in some host's syntax, POSIX or Windows, whatever host checks it; what
// no host could use is refused, naming the field.
func TestValidateHostPathSyntax(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"/srv/workflows", true},
		{"/", true},
		{"/srv/./workflows", true},
		{"/srv/work flows/é", true},
		{`C:\workflows`, true},
		{`c:/workflows/x`, true},
		{`C:\`, true},
		{`\\server\share\workflows`, true},
		{`\\server\share`, true},
		{"/" + strings.Repeat("a", MaxHostPathLength-1), true},

		{"", false},
		{"workflows", false},
		{"./workflows", false},
		{`C:workflows`, false},
		{`C:`, false},
		{`\workflows`, false},
		{`\\server`, false},
		{`\\server\`, false},
		{"/srv/../etc", false},
		{"/srv/..", false},
		{`C:\workflows\..\Windows`, false},
		{`C:/workflows/../Windows`, false},
		{`\\server\share\..\x`, false},
		{"/srv/a\x00b", false},
		{"/srv/a\nb", false},
		{"/srv/a\tb", false},
		{"/srv/a\x7fb", false},
		{"/srv/\xff", false},
		{`\\.\PhysicalDrive0`, false},
		{`\\?\C:\workflows`, false},
		{`//./pipe/x`, false},
		{"/" + strings.Repeat("a", MaxHostPathLength), false},
	}
	for _, tt := range tests {
		err := ValidateHostPath("spec.volumes[0].hostPath", tt.path)
		if got := err == nil; got != tt.ok {
			t.Errorf("ValidateHostPath(%.60q) = %.200v, want ok=%v", tt.path, err, tt.ok)
			continue
		}
		if err != nil {
			wantInvalid(t, err, "spec.volumes[0].hostPath")
		}
	}
}
