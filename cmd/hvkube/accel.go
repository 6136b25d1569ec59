package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/drivers/qemu"
)

// newDebugAccelCmd is `hvkube debug accel`: the QEMU backend's choice of
// accelerator, for scripts that start QEMU themselves (boot.sh).
func newDebugAccelCmd() *cobra.Command {
	var binary string
	cmd := &cobra.Command{
		Use:   "accel [--qemu BINARY]",
		Short: "Print kvm or tcg: the accelerator the QEMU backend would use here",
		Long: `Print kvm or tcg, as the QEMU backend decides it: kvm only when a tiny
probe VM runs under KVM (and not far slower than under TCG), since a
/dev/kvm that opens may not run a guest (nested or paravirtual KVM); tcg
at once when a backend on this host has seen KVM stop a guest since the
host booted (kvm-refused.json in the cache directory). The reason goes to
standard error. images/linux-desktop/boot.sh uses it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			accel, reason, err := qemu.ProbeAccel(ctx, binary, nil)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), reason)
			fmt.Fprintln(cmd.OutOrStdout(), accel)
			return nil
		},
	}
	cmd.Flags().StringVar(&binary, "qemu", "qemu-system-x86_64", "the QEMU binary")
	return cmd
}
