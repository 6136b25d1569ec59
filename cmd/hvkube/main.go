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
	"github.com/hvkube/hvkube/internal/drivers/qemu"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// commands are the verbs of this binary beside the CLI's: the server, the
// node, benchmarks, the cluster's setup, and the hidden debug tools for
// guest images (which talk to QEMU's sockets, through the QEMU driver,
// so live here and not in the CLI).
func commands() []*cobra.Command {
	return []*cobra.Command{newServeCmd(), newNodeCmd(), newBenchCmd(), newWebhookConfigCmd(), newCACmd(), newDebugCmd(qemu.Direct{}, newDebugAccelCmd())}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, cli.Options{Version: version, Extra: commands()}, os.Args[1:])
	stop()
	os.Exit(code)
}
