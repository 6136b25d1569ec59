// Command hvkube is the hvkube server (hvkube serve) and its command-line
// client (every other verb).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, cli.Options{Version: version, Extra: []*cobra.Command{newServeCmd(), newNodeCmd(), newBenchCmd(), newWebhookConfigCmd(), newCACmd()},
		DebugExtra: []*cobra.Command{newDebugAccelCmd()}}, os.Args[1:])
	stop()
	os.Exit(code)
}
