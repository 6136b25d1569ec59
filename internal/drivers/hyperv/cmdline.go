package hyperv

import (
	"fmt"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
)

// A Windows program receives its arguments as one command line and splits
// it itself, nearly always by the rules of CommandLineToArgvW and the
// Microsoft C runtime: white space separates arguments; double quotes group
// them; 2n backslashes before a quote are n backslashes and the quote
// groups, 2n+1 are n backslashes and a literal quote; other backslashes are
// literal. quoteArg writes an argument so that those rules give it back
// unchanged. (Programs that parse their command line otherwise, such as
// cmd.exe, are not helped by any quoting.)

// quoteArg quotes one argument for a Windows command line.
func quoteArg(s string) string {
	if s == "" {
		return `""`
	}
	if !strings.ContainsAny(s, " \t\n\v\"") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	slashes := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			slashes++
			continue
		case '"':
			// The backslashes before a quote are doubled, and one more
			// escapes the quote.
			b.WriteString(strings.Repeat(`\`, 2*slashes+1))
		default:
			b.WriteString(strings.Repeat(`\`, slashes))
		}
		slashes = 0
		b.WriteByte(c)
	}
	// The closing quote follows: the backslashes before it are doubled.
	b.WriteString(strings.Repeat(`\`, 2*slashes))
	b.WriteByte('"')
	return b.String()
}

// joinArgs is the arguments part of a command line.
func joinArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = quoteArg(a)
	}
	return strings.Join(q, " ")
}

// commandLine is a whole command line: the program, quoted (a Windows path
// cannot hold a double quote, so quoting it is always safe), and its
// arguments.
func commandLine(path string, args []string) string {
	line := `"` + path + `"`
	if len(args) > 0 {
		line += " " + joinArgs(args)
	}
	return line
}

// checkExec refuses what cannot reach a Windows program intact: NUL
// characters, which end a C string, and environment entries without a
// name.
func checkExec(path string, args, env []string) error {
	if strings.TrimSpace(path) == "" {
		return api.Invalid("command", "required")
	}
	if strings.ContainsAny(path, "\x00\"") {
		return api.Invalid("command", "%q: a Windows program path holds no NUL or double quote", path)
	}
	for i, a := range args {
		if strings.ContainsRune(a, 0) {
			return api.Invalid(fmt.Sprintf("args[%d]", i), "holds a NUL character")
		}
	}
	for i, e := range env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" || strings.ContainsRune(e, 0) {
			return api.Invalid(fmt.Sprintf("env[%d]", i), "%q: want NAME=VALUE", e)
		}
	}
	return nil
}
