package cli

import "os"

// notifyResize does nothing on Windows, which has no SIGWINCH: the size
// is the one the terminal had when the session began.
func notifyResize(ch chan os.Signal) {}
