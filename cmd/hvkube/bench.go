package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/backend/qemu"
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
	cmd.AddCommand(newBenchAPICmd(), newBenchQEMUCmd())
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

func newBenchQEMUCmd() *cobra.Command {
	var runs, coldBoots, batches int
	var imageDir, image, write string
	cmd := &cobra.Command{
		Use:   "qemu",
		Short: "Desktops: cold boot, clone, resume, restore, memory, 10-clone fill, screenshot and input via the API",
		Long: `Measure the QEMU fast path on the image built by make image: cold boots,
clones from the template snapshot, resume, save/restore, reset, the private
memory of paused clones, 10 clones at once, and screenshots and input through
a real server's API. Under TCG this takes several minutes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs < 1 || coldBoots < 1 || batches < 1 {
				return fmt.Errorf("--runs, --cold-boots and --batches must be at least 1")
			}
			rep, err := bench.QEMU(cmd.Context(), bench.QEMUOptions{ImageDir: imageDir, Image: image, Runs: runs, ColdBoots: coldBoots, Batches: batches, Log: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			return report(cmd, rep, "qemu", write)
		},
	}
	cmd.Flags().IntVar(&runs, "runs", 20, "runs per operation (screenshots and input run 5x this)")
	cmd.Flags().IntVar(&coldBoots, "cold-boots", 20, "cold boots to time")
	cmd.Flags().IntVar(&batches, "batches", 20, "times to clone 10 sandboxes at once")
	cmd.Flags().StringVar(&imageDir, "image-dir", qemu.DefaultImageDir(), "where make image left the image")
	cmd.Flags().StringVar(&image, "image", "linux-desktop", "the image to use")
	cmd.Flags().StringVar(&write, "write", "", "also write the results into this markdown file")
	return cmd
}
