package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/bench"
	"github.com/hvkube/hvkube/internal/cli"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure hvkube and print p50/p95 latencies",
		Long: `Measure hvkube end to end and print p50/p95 latencies. With --write FILE the
results replace their section of FILE (docs/benchmarks.md in the repository).`,
	}
	cmd.AddCommand(newBenchAPICmd())
	return cmd
}

func newBenchAPICmd() *cobra.Command {
	var objects, runs int
	var write string
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Control plane: create, get, list with many objects stored; apply of a 100-document file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if objects < 100 {
				return fmt.Errorf("--objects: at least 100")
			}
			if runs < 20 {
				return fmt.Errorf("--runs: at least 20")
			}
			rep, err := bench.API(cmd.Context(), bench.APIOptions{
				Objects: objects,
				Runs:    runs,
				Log:     cmd.ErrOrStderr(),
				Apply: func(ctx context.Context, server, file string) error {
					var errOut strings.Builder
					if code := cli.Main(ctx, cli.Options{Stdout: io.Discard, Stderr: &errOut}, []string{"--server", server, "apply", "-f", file}); code != 0 {
						return fmt.Errorf("apply exited %d: %s", code, errOut.String())
					}
					return nil
				},
			})
			if err != nil {
				return err
			}
			return report(cmd, rep, "api", write)
		},
	}
	cmd.Flags().IntVar(&objects, "objects", 10000, "objects stored before measuring")
	cmd.Flags().IntVar(&runs, "runs", 200, "runs per operation")
	cmd.Flags().StringVar(&write, "write", "", "also write the results into this markdown file (e.g. docs/benchmarks.md)")
	return cmd
}

func report(cmd *cobra.Command, rep *bench.Report, key, write string) error {
	rep.Print(cmd.OutOrStdout())
	if write == "" {
		return nil
	}
	if err := bench.WriteSection(write, key, rep.Markdown()); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", write)
	return nil
}
