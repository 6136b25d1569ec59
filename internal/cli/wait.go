package cli

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
)

func newWaitCmd(e *env) *cobra.Command {
	var cond string
	var timeout time.Duration
	var quiet bool
	cmd := &cobra.Command{
		Use:   "wait KIND NAME --for phase=PHASE",
		Short: "Wait until an object reaches a phase, showing its events meanwhile",
		Long: `Wait until an object's status.phase is PHASE. While waiting, the object's
events are printed as they happen (a template build shows its progress this
way). Exits 1 if the object fails (phase Failed or Error) or the timeout
passes.`,
		Example: `  hvkube wait template linux-desktop --for phase=Ready --timeout 10m
  hvkube wait sandbox browser-agent-1 --for phase=Running`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, names, err := splitKindArgs(args)
			if err != nil {
				return err
			}
			if len(names) != 1 {
				return fmt.Errorf("wait needs one name: hvkube wait %s NAME --for phase=PHASE", kind.Singular)
			}
			want, ok := strings.CutPrefix(cond, "phase=")
			if !ok || want == "" {
				return fmt.Errorf("--for %q: want phase=PHASE, e.g. phase=Ready", cond)
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			seen := map[string]bool{}
			if evs, err := c.Events(ctx, kind.Kind, names[0]); err == nil {
				for _, ev := range evs {
					seen[ev.Metadata.Name] = true
				}
			}
			start := e.now()
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				o, err := c.Get(ctx, kind.Kind, names[0])
				if err != nil && ctx.Err() == nil {
					return err
				}
				if !quiet {
					if evs, err := c.Events(ctx, kind.Kind, names[0]); err == nil {
						for _, ev := range evs {
							if !seen[ev.Metadata.Name] {
								seen[ev.Metadata.Name] = true
								fmt.Fprintf(e.out, "%6s  %s: %s\n", humanDuration(e.now().Sub(start)), ev.Reason, ev.Message)
							}
						}
					}
				}
				if o != nil {
					phase, reason, msg := statusOf(o)
					if strings.EqualFold(phase, want) {
						fmt.Fprintf(e.out, "%s %s\n", kindRef(o), phase)
						return nil
					}
					if phase == api.TemplateFailed || phase == api.SandboxError {
						return fmt.Errorf("%s is %s: %s: %s", kindRef(o), phase, reason, msg)
					}
				}
				select {
				case <-ctx.Done():
					if cmd.Context().Err() != nil {
						return cmd.Context().Err()
					}
					return fmt.Errorf("timed out after %s waiting for %s/%s to be %s", timeout, kind.Singular, names[0], want)
				case <-tick.C:
				}
			}
		},
	}
	cmd.Flags().StringVar(&cond, "for", "", "the condition: phase=PHASE")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "do not print events while waiting")
	return cmd
}

// statusOf reads phase, reason and message from any object's status.
func statusOf(o api.Object) (phase, reason, msg string) {
	st := o.GetStatus()
	if st == nil {
		return "", "", ""
	}
	v := reflect.ValueOf(st).Elem()
	get := func(f string) string {
		if fv := v.FieldByName(f); fv.IsValid() && fv.Kind() == reflect.String {
			return fv.String()
		}
		return ""
	}
	return get("Phase"), get("Reason"), get("Message")
}
