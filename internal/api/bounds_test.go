package api

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	yamlv3 "go.yaml.in/yaml/v3"
)

// TestBoundsOnDurationsAndCounts: every duration and count an object
// carries has an upper bound; a value past it is refused naming its field
// (200000000 minutes overflows time.Duration; 150000000 minutes would mint
// a token valid for centuries), and the bound itself is accepted.
func TestBoundsOnDurationsAndCounts(t *testing.T) {
	const (
		agent = "apiVersion: hvkube/v1\nkind: Agent\nmetadata: {name: a}\nspec:\n  sandboxSelector: {pool: p}\n"
		sb    = "apiVersion: hvkube/v1\nkind: Sandbox\nmetadata: {name: s}\nspec:\n"
		pool  = "apiVersion: hvkube/v1\nkind: SandboxPool\nmetadata: {name: p}\nspec:\n  template: {spec: {}}\n"
		svc   = "apiVersion: hvkube/v1\nkind: DisplayService\nmetadata: {name: d}\nspec:\n  selector: {pool: p}\n"
		tpl   = "apiVersion: hvkube/v1\nkind: Template\nmetadata: {name: t}\nspec:\n  qemu: {image: linux-desktop}\n"
	)
	ports := func(n int) string {
		var b strings.Builder
		b.WriteString("  ports:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - {protocol: vnc, port: %d}\n", 7000+i)
		}
		return b.String()
	}
	artifacts := func(n int) string {
		return "  output:\n    artifacts: [" + strings.TrimSuffix(strings.Repeat("/tmp/*.txt, ", n), ", ") + "]\n"
	}
	tests := []struct {
		name, ok, bad, field string
	}{
		{"agent timeout", agent + "  completion: {timeoutMinutes: 10080}\n", agent + "  completion: {timeoutMinutes: 200000000}\n", "spec.completion.timeoutMinutes"},
		{"agent timeout that would mint a long token", "", agent + "  completion: {timeoutMinutes: 150000000}\n", "spec.completion.timeoutMinutes"},
		{"agent timeout just past", "", agent + "  completion: {timeoutMinutes: 10081}\n", "spec.completion.timeoutMinutes"},
		{"task timeout", agent + "  task: {timeoutSeconds: 604800}\n", agent + "  task: {timeoutSeconds: 604801}\n", "spec.task.timeoutSeconds"},
		{"task timeout near overflow", "", agent + "  task: {timeoutSeconds: 9223372036854775807}\n", "spec.task.timeoutSeconds"},
		{"retries", agent + "  completion: {maxRetries: 100}\n", agent + "  completion: {maxRetries: 101}\n", "spec.completion.maxRetries"},
		{"ttl", agent + "  ttlSecondsAfterFinished: 2592000\n", agent + "  ttlSecondsAfterFinished: 9000000000000\n", "spec.ttlSecondsAfterFinished"},
		{"checkpoint", agent + "  type: workflow\n  task: {steps: [{action: wait, duration: 1}]}\n  checkpoint: {everyMinutes: 1440}\n", agent + "  type: workflow\n  task: {steps: [{action: wait, duration: 1}]}\n  checkpoint: {everyMinutes: 1441}\n", "spec.checkpoint.everyMinutes"},
		{"checkpoint zero", agent + "  type: workflow\n  task: {steps: [{action: wait, duration: 1}]}\n  checkpoint: {everyMinutes: 1}\n", agent + "  type: workflow\n  task: {steps: [{action: wait, duration: 1}]}\n  checkpoint: {everyMinutes: 0}\n", "spec.checkpoint.everyMinutes"},
		{"checkpoint of an mcp-agent", agent + "  type: custom\n  task: {command: [x]}\n  checkpoint: {everyMinutes: 5}\n", agent + "  checkpoint: {everyMinutes: 5}\n", "spec.checkpoint"},
		{"ttl negative", agent + "  ttlSecondsAfterFinished: 0\n", agent + "  ttlSecondsAfterFinished: -1\n", "spec.ttlSecondsAfterFinished"},
		{"artifact patterns", agent + artifacts(100), agent + artifacts(101), "spec.output.artifacts"},
		{"wait step", agent + "  task: {steps: [{action: wait, duration: 100}]}\n", agent + "  task: {steps: [{action: wait, duration: 1e12}]}\n", "spec.task.steps[0].duration"},
		{"sandbox lifetime", sb + "  lifecycle: {timeoutMinutes: 525600}\n", sb + "  lifecycle: {timeoutMinutes: 200000000}\n", "spec.lifecycle.timeoutMinutes"},
		{"sandbox idle time", sb + "  lifecycle: {idleTimeoutMinutes: 525600}\n", sb + "  lifecycle: {idleTimeoutMinutes: 525601}\n", "spec.lifecycle.idleTimeoutMinutes"},
		{"sandbox idle pause", sb + "  lifecycle: {idlePauseSeconds: 86400}\n", sb + "  lifecycle: {idlePauseSeconds: 86401}\n", "spec.lifecycle.idlePauseSeconds"},
		{"template source", tpl + "  source: {sandbox: desk, node: n1}\n", tpl + "  source: {sandbox: desk, node: 'N/1'}\n", "spec.source.node"},
		{"sandbox idle save", sb + "  lifecycle: {idleSaveSeconds: 604800}\n", sb + "  lifecycle: {idleSaveSeconds: -1}\n", "spec.lifecycle.idleSaveSeconds"},
		{"health interval", sb + "  healthCheck: {intervalSeconds: 3600}\n", sb + "  healthCheck: {intervalSeconds: 3601}\n", "spec.healthCheck.intervalSeconds"},
		{"pool member lifetime", "", strings.Replace(pool, "{spec: {}}", "{spec: {lifecycle: {timeoutMinutes: 600000}}}", 1), "spec.template.spec.lifecycle.timeoutMinutes"},
		{"replicas", pool + "  replicas: 10000\n", pool + "  replicas: 10001\n", "spec.replicas"},
		{"maxPerHost", pool + "  maxPerHost: 10000\n", pool + "  maxPerHost: 1000000000\n", "spec.maxPerHost"},
		{"maxAge", pool + "  maxAge: 8760h\n", pool + "  maxAge: 8761h\n", "spec.maxAge"},
		{"maxAge past time.Duration", "", pool + "  maxAge: 2000000h\n", "spec.maxAge"},
		{"refillRate", pool + "  refillRate: 1000\n", pool + "  refillRate: 1001\n", "spec.refillRate"},
		{"scaleDownDelay", pool + "  scaling: {scaleDownDelay: 604800}\n", pool + "  scaling: {scaleDownDelay: 604801}\n", "spec.scaling.scaleDownDelay"},
		{"scaleUpThreshold", pool + "  scaling: {scaleUpThreshold: 10000}\n", pool + "  scaling: {scaleUpThreshold: 10001}\n", "spec.scaling.scaleUpThreshold"},
		{"maxReplicas", pool + "  scaling: {maxReplicas: 10000}\n", pool + "  scaling: {maxReplicas: 10001}\n", "spec.scaling.maxReplicas"},
		{"service ports", svc + ports(32), svc + ports(33), "spec.ports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.ok != "" {
				if _, err := decodeValid(tt.ok, DecodeOptions{}); err != nil {
					t.Fatalf("the bound itself was refused: %v", err)
				}
			}
			_, err := decodeValid(tt.bad, DecodeOptions{})
			wantInvalid(t, err, tt.field)
		})
	}
}

// TestYAMLAliasesCannotBlowUp: anchors and aliases may not make a YAML
// document stand for an object many times its size, either by nesting
// ("billion laughs") or by repeating one long string; a cycle is refused.
// Documents that use aliases modestly, and large ones that use none,
// decode.
func TestYAMLAliasesCannotBlowUp(t *testing.T) {
	const head = "apiVersion: hvkube/v1\nkind: Agent\nmetadata: {name: a}\nspec:\n  sandboxSelector: {pool: p}\n  task:\n    input:\n"

	// 66 KB that stood for about 13 MB: a 6 KB string, repeated 2000 times.
	var fan strings.Builder
	fan.WriteString(head + "      s: &s " + strings.Repeat("x", 6<<10) + "\n      list:\n")
	for range 2000 {
		fan.WriteString("      - *s\n")
	}

	// Ten of ten of ten … of "lol".
	var laughs strings.Builder
	laughs.WriteString(head + "      l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i <= 9; i++ {
		ref := fmt.Sprintf("*l%d", i-1)
		fmt.Fprintf(&laughs, "      l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(ref+", ", 10), ", "))
	}

	for name, in := range map[string]string{"fan-out": fan.String(), "billion laughs": laughs.String()} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(in), DecodeOptions{})
			if err == nil {
				t.Fatalf("a %d-byte document with aliases was accepted", len(in))
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "aliases expand") {
				t.Fatalf("error %v: want an invalid input naming the aliases", err)
			}
		})
	}

	t.Run("cycle", func(t *testing.T) {
		_, err := Decode([]byte(head+"      a: &a [1, *a]\n"), DecodeOptions{})
		if err == nil || !errors.Is(err, ErrInvalid) {
			t.Fatalf("a self-referring alias: %v", err)
		}
	})

	t.Run("modest aliases", func(t *testing.T) {
		in := "apiVersion: hvkube/v1\nkind: Agent\nmetadata: {name: a}\nspec:\n  sandboxSelector: {pool: p}\n  task:\n    steps:\n" +
			"    - &click {action: left_click, coordinate: [10, 10]}\n" + strings.Repeat("    - *click\n", 200)
		objs, err := decodeValid(in, DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(objs[0].(*Agent).Spec.Task.Steps); got != 201 {
			t.Fatalf("%d steps, want 201", got)
		}
	})

	// Without aliases a document measures at most 1.5 times its text, so
	// that MaxYAMLExpansion never refuses one, however large.
	t.Run("no aliases", func(t *testing.T) {
		for _, d := range []string{
			strings.Repeat("a:\n", 100), "{" + strings.Repeat("a,", 100) + "}", "[" + strings.Repeat("a,", 100) + "]",
			"[" + strings.Repeat("a:,", 100) + "]", strings.Repeat("-\n", 100), "[" + strings.Repeat(`"",`, 100) + "]",
			"a: |\n" + strings.Repeat("  x\n", 100), "a: \"" + strings.Repeat(`\t`, 100) + "\"\n",
		} {
			var n yamlv3.Node
			if err := yamlv3.Unmarshal([]byte(d), &n); err != nil {
				t.Fatalf("%q: %v", d, err)
			}
			got, err := newYAMLSizer(len(d)).size(n.Content[0], 0)
			if err != nil || got > int64(len(d))*3/2 {
				t.Errorf("%q: %d bytes measure %d (%v): more than 1.5 times", d[:10], len(d), got, err)
			}
		}
	})
}
