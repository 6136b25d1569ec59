package cli

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
)

// hitlList is the body of GET /api/v1/hitl.
type hitlList struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Items      []struct {
		Agent   string           `json:"agent"`
		Sandbox string           `json:"sandbox,omitempty"`
		Request api.HumanRequest `json:"request"`
	} `json:"items"`
}

func newHITLCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hitl",
		Short: "Questions agents ask people: list, answer, ask",
		Long: `Human in the loop: an agent asks a person a question and waits for the
answer; meanwhile its WaitingForHuman condition is True.`,
	}
	cmd.AddCommand(newHITLListCmd(e), newHITLAnswerCmd(e), newHITLAskCmd(e))
	return cmd
}

func newHITLListCmd(e *env) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the questions waiting for an answer, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			var list hitlList
			if _, err := c.Do(cmd.Context(), "GET", "/api/v1/hitl", nil, "", &list); err != nil {
				return err
			}
			switch output {
			case "json":
				enc := json.NewEncoder(e.out)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			case "":
			default:
				return fmt.Errorf("-o %s: want json, or nothing for a table", output)
			}
			if len(list.Items) == 0 {
				fmt.Fprintln(e.errOut, "No questions are waiting.")
				return nil
			}
			tw := tabwriter.NewWriter(e.out, 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "AGENT\tSANDBOX\tID\tAGE\tQUESTION")
			for _, it := range list.Items {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", it.Agent, orNone(it.Sandbox), it.Request.ID, age(it.Request.AskedAt, e.now()), shorten(it.Request.Question, 60))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json")
	return cmd
}

func newHITLAnswerCmd(e *env) *cobra.Command {
	var id, by string
	cmd := &cobra.Command{
		Use:   "answer AGENT TEXT",
		Short: "Answer an agent's question",
		Long: `Answer the question agent AGENT waits on. Without --id the agent's current
question is answered; with it, only that question (not one asked since).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			agent := url.PathEscape(args[0])
			if id == "" {
				var hr api.HumanRequest
				if _, err := c.Do(cmd.Context(), "GET", "/api/v1/agents/"+agent+"/hitl", nil, "", &hr); err != nil {
					return err
				}
				if !hr.Pending() {
					return fmt.Errorf("agent %s waits for no answer (its last question was answered by %s)", args[0], hr.AnsweredBy)
				}
				id = hr.ID
			}
			body, _ := json.Marshal(map[string]string{"id": id, "answer": args[1], "by": by})
			var hr api.HumanRequest
			if _, err := c.Do(cmd.Context(), "POST", "/api/v1/hitl/"+agent+"/respond", body, "application/json", &hr); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "agent/%s answered (request %s)\n", args[0], hr.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "the id of the question answered (default: the agent's current one)")
	cmd.Flags().StringVar(&by, "by", defaultPerson(), "who answers")
	return cmd
}

func newHITLAskCmd(e *env) *cobra.Command {
	var wait int
	cmd := &cobra.Command{
		Use:   "ask AGENT QUESTION",
		Short: "Ask a person a question on an agent's behalf, and optionally wait for the answer",
		Long: `Ask a question as agent AGENT (which must be scheduled or running). With
--wait, wait up to that many seconds (at most 300) and print the answer;
exit 2 when none came in time.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			agent := url.PathEscape(args[0])
			body, _ := json.Marshal(map[string]string{"question": args[1]})
			var hr api.HumanRequest
			if _, err := c.Do(cmd.Context(), "POST", "/api/v1/agents/"+agent+"/hitl", body, "application/json", &hr); err != nil {
				return err
			}
			if wait <= 0 {
				fmt.Fprintf(e.out, "request %s asked\n", hr.ID)
				return nil
			}
			if _, err := c.Do(cmd.Context(), "GET", "/api/v1/agents/"+agent+"/hitl?wait="+strconv.Itoa(wait), nil, "", &hr); err != nil {
				return err
			}
			if hr.Pending() {
				return &ExitError{Code: 2, Err: fmt.Errorf("no answer to request %s within %ds", hr.ID, wait)}
			}
			fmt.Fprintln(e.out, hr.Answer)
			return nil
		},
	}
	cmd.Flags().IntVar(&wait, "wait", 0, "seconds to wait for the answer (at most 300)")
	return cmd
}

// defaultPerson is who the CLI acts as: the login name.
func defaultPerson() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "cli"
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// shorten puts s on one line of at most n characters.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
