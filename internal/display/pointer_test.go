package display

import (
	"errors"
	"testing"
)

func TestParseButton(t *testing.T) {
	tests := []struct {
		in      string
		want    Button
		wantErr bool
	}{
		{"left", ButtonLeft, false},
		{"Right", ButtonRight, false},
		{" middle ", ButtonMiddle, false},
		{"wheel-up", "", true},
		{"", "", true},
		{"lft", "", true},
	}
	for _, tt := range tests {
		got, err := ParseButton(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseButton(%q) = %q, %v; want %q, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
		var fe *FieldError
		if tt.wantErr && (!errors.As(err, &fe) || fe.Field != "button" || fe.Value != tt.in) {
			t.Errorf("ParseButton(%q) error %v does not name field button", tt.in, err)
		}
	}
	_, err := ParseButton("side")
	if got, want := err.Error(), `button: invalid value "side": want left, right or middle`; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}

func TestParseScrollDirection(t *testing.T) {
	tests := []struct {
		in      string
		want    ScrollDirection
		wheel   string
		wantErr bool
	}{
		{"up", ScrollUp, "wheel-up", false},
		{"DOWN", ScrollDown, "wheel-down", false},
		{"left", ScrollLeft, "wheel-left", false},
		{"right ", ScrollRight, "wheel-right", false},
		{"sideways", "", "", true},
		{"", "", "", true},
	}
	for _, tt := range tests {
		got, err := ParseScrollDirection(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseScrollDirection(%q) = %q, %v; want %q, err=%v", tt.in, got, err, tt.want, tt.wantErr)
			continue
		}
		var fe *FieldError
		if tt.wantErr {
			if !errors.As(err, &fe) || fe.Field != "scroll_direction" {
				t.Errorf("ParseScrollDirection(%q) error %v does not name field scroll_direction", tt.in, err)
			}
			continue
		}
		if w := got.WheelButton(); w != tt.wheel {
			t.Errorf("%s.WheelButton() = %q, want %q", got, w, tt.wheel)
		}
	}
}

func TestCheckPoint(t *testing.T) {
	tests := []struct {
		x, y    int
		wantErr bool
	}{
		{0, 0, false}, {1279, 799, false}, {1280, 0, true}, {0, 800, true}, {-1, 5, true}, {5, -1, true},
	}
	for _, tt := range tests {
		err := CheckPoint(tt.x, tt.y, 1280, 800)
		if (err != nil) != tt.wantErr {
			t.Errorf("CheckPoint(%d, %d) = %v, want err=%v", tt.x, tt.y, err, tt.wantErr)
		}
		var fe *FieldError
		if err != nil && (!errors.As(err, &fe) || fe.Field != "coordinate") {
			t.Errorf("CheckPoint error %v does not name field coordinate", err)
		}
	}
	if got, want := CheckPoint(1280, 3, 1280, 800).Error(), `coordinate: invalid value "[1280, 3]": outside the 1280x800 screen`; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}
