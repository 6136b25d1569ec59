package cli

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
)

func newWaitCmd(e *env) *cobra.Command {
	var cond string
	var timeout time.Duration
	var quiet bool
	cmd := &cobra.Command{
		Use:   "wait (KIND NAME... | KIND/NAME...) --for phase=PHASE|condition=TYPE",
		Short: "Wait until objects reach a phase or a condition, showing their events meanwhile",
		Long: `Wait until each named object's status.phase is PHASE, or its condition TYPE
is True. While waiting, the object's events are printed as they happen (a
template build shows its progress this way). Exits 1 if an object fails
(phase Failed or Error) or the timeout passes.`,
		Example: `  hvkube wait template linux-desktop --for phase=Ready --timeout 10m
  hvkube wait sandbox browser-agent-1 --for phase=Running
  hvkube wait pool browser-workers --for condition=Ready
  hvkube wait agent job-1 job-2 job-3 --for phase=Completed`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			groups, err := kindArgs(args)
			if err != nil {
				return err
			}
			for _, g := range groups {
				if len(g.names) == 0 {
					return fmt.Errorf("wait needs a name: hvkube wait %s NAME --for phase=PHASE", g.kind.Singular)
				}
			}
			want, byPhase := strings.CutPrefix(cond, "phase=")
			if !byPhase {
				var ok bool
				if want, ok = strings.CutPrefix(cond, "condition="); !ok {
					want = ""
				}
			}
			if want == "" {
				return fmt.Errorf("--for %q: want phase=PHASE (e.g. phase=Ready) or condition=TYPE (e.g. condition=Ready)", cond)
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			for _, g := range groups {
				for _, name := range g.names {
					if err := e.waitOne(ctx, cmd, c, g.kind, name, want, byPhase, quiet, timeout); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cond, "for", "", "the condition: phase=PHASE or condition=TYPE")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "do not print events while waiting")
	return cmd
}

// waitOne waits for one object (see wait).
func (e *env) waitOne(ctx context.Context, cmd *cobra.Command, c *client.Client, kind api.KindInfo, name, want string, byPhase, quiet bool, timeout time.Duration) error {
	seen := map[string]bool{}
	if evs, err := c.Events(ctx, kind.Kind, name); err == nil {
		for _, ev := range evs {
			seen[ev.Metadata.Name] = true
		}
	}
	start := e.now()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		o, err := c.Get(ctx, kind.Kind, name)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if !quiet {
			if evs, err := c.Events(ctx, kind.Kind, name); err == nil {
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
			if byPhase && strings.EqualFold(phase, want) {
				fmt.Fprintf(e.out, "%s %s\n", kindRef(o), phase)
				return nil
			}
			if !byPhase && conditionTrue(o, want) {
				fmt.Fprintf(e.out, "%s condition %s\n", kindRef(o), want)
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
			return fmt.Errorf("timed out after %s waiting for %s/%s to be %s", timeout, kind.Singular, name, want)
		case <-tick.C:
		}
	}
}

// conditionTrue reports whether o's status has condition typ with status
// True.
func conditionTrue(o api.Object, typ string) bool {
	st := o.GetStatus()
	if st == nil {
		return false
	}
	f := reflect.ValueOf(st).Elem().FieldByName("Conditions")
	if !f.IsValid() {
		return false
	}
	conds, ok := f.Interface().([]api.Condition)
	if !ok {
		return false
	}
	c := api.FindCondition(conds, typ)
	return c != nil && c.Status == api.ConditionTrue
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
