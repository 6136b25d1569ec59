package api

import "testing"

func TestSelector(t *testing.T) {
	labels := map[string]string{"pool": "web", "tier": "gpu"}
	tests := []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"pool=web", true},
		{"pool==web", true},
		{"pool!=web", false},
		{"pool=web,tier=cpu", false},
		{"tier in (gpu,cpu)", true},
		{"tier notin (gpu)", false},
		{"pool", true},
		{"!pool", false},
		{"!missing", true},
		{"missing!=x", true},
	}
	for _, tt := range tests {
		s, err := ParseSelector(tt.sel)
		if err != nil {
			t.Fatalf("%q: %v", tt.sel, err)
		}
		if got := s.Matches(labels); got != tt.want {
			t.Errorf("%q matches = %v, want %v", tt.sel, got, tt.want)
		}
	}
	for _, bad := range []string{"a b c", "pool=bad value", "=x", "k in x"} {
		if _, err := ParseSelector(bad); err == nil || FieldOf(err) != "labelSelector" {
			t.Errorf("%q: got %v, want a labelSelector error", bad, err)
		}
	}
}

// TestMatchLabels: the one matchLabels rule, as pools count the agents
// waiting for them and DisplayServices pick sandboxes, agrees with the
// Selector the scheduler places agents by: a key must be there, even
// with an empty value.
func TestMatchLabels(t *testing.T) {
	labels := map[string]string{"pool": "web", "tier": ""}
	for _, want := range []map[string]string{
		nil,
		{"pool": "web"},
		{"pool": "web", "tier": ""},
		{"pool": "db"},
		{"zone": ""},
		{"pool": "web", "zone": ""},
	} {
		got := MatchLabels(want, labels)
		if sel := SelectorFromMap(want).Matches(labels); got != sel {
			t.Errorf("MatchLabels(%v) = %v, the selector %q says %v", want, got, SelectorFromMap(want), sel)
		}
		ds := DisplayServiceSpec{Selector: want}
		if sel := ds.Selects(labels); sel != (got && len(want) > 0) {
			t.Errorf("a DisplayService selecting %v selects %v: %v", want, labels, sel)
		}
	}
}
