package powershell

import "fmt"

// Result reads the outcome of a script that ran elsewhere (in a guest,
// with Command's arguments): its output into out, or its *Error.
func Result(name string, exitCode int, stdout, stderr []byte, out any) error {
	if exitCode != 0 {
		return parseError(name, exitCode, stderr)
	}
	if err := Decode(stdout, out); err != nil {
		return fmt.Errorf("%s: output: %w", name, err)
	}
	return nil
}
