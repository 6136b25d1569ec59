package qmp

import (
	"math"
	"testing"
)

// The ways a guest maps an absolute coordinate back to a pixel (see
// PixelToAbs).
var absInverses = []struct {
	name string
	f    func(a, n int) int
}{
	{"libinput a*n/32768", func(a, n int) int { return a * n / 32768 }},
	{"xf86-input-libinput a*65535/32768*n/65536", func(a, n int) int {
		v := float64(a) * 65535 / 32768 // libinput into the driver's 0..0xffff axis
		return int(math.Trunc(v * float64(n) / 65536))
	}},
	{"max-min a*(n-1)/32767", func(a, n int) int { return a * (n - 1) / 32767 }},
}

func TestPixelToAbsRoundTrip(t *testing.T) {
	sizes := []int{2, 3, 600, 720, 768, 800, 900, 1024, 1050, 1080, 1200, 1280, 1366, 1440, 1600, 1680, 1920, 2560, 3840, 4096}
	for _, inv := range absInverses {
		for _, n := range sizes {
			for p := range n {
				a := pixelToAbs(p, n)
				if a < 0 || a > AbsMax {
					t.Fatalf("pixelToAbs(%d, %d) = %d, out of range", p, n, a)
				}
				if got := inv.f(a, n); got != p {
					t.Errorf("%s: n=%d pixel %d -> abs %d -> pixel %d", inv.name, n, p, a, got)
					break
				}
			}
		}
	}
}

func TestPixelToAbsRoundTripEveryWidth(t *testing.T) {
	if testing.Short() {
		t.Skip("exhaustive width sweep")
	}
	for n := 2; n <= 4096; n++ {
		for _, inv := range absInverses {
			for p := range n {
				if got := inv.f(pixelToAbs(p, n), n); got != p {
					t.Fatalf("%s: n=%d pixel %d -> pixel %d", inv.name, n, p, got)
				}
			}
		}
	}
}

// TestOtherFormulasFail documents why the simpler forward formulas were not
// chosen.
func TestOtherFormulasFail(t *testing.T) {
	candidates := []struct {
		name string
		f    func(p, n int) int
	}{
		{"centre (p*32768+n/2)/n", func(p, n int) int { return (p*32768 + n/2) / n }},
		{"floor p*32767/(n-1)", func(p, n int) int { return p * 32767 / (n - 1) }},
	}
	for _, c := range candidates {
		failed := false
		for _, n := range []int{800, 1080, 1280, 1920} {
			for _, inv := range absInverses {
				for p := range n {
					if inv.f(min(c.f(p, n), AbsMax), n) != p {
						failed = true
					}
				}
			}
		}
		if !failed {
			t.Errorf("%s round-trips everywhere; PixelToAbs's doc is out of date", c.name)
		}
	}
}

func TestPixelToAbs(t *testing.T) {
	tests := []struct {
		x, y, w, h int
		ax, ay     int
	}{
		{0, 0, 1280, 800, 0, 0},
		{1279, 799, 1280, 800, AbsMax, AbsMax},
		{640, 400, 1280, 800, 16397, 16405},
		{1, 1, 1920, 1080, 18, 31},
		{-5, 900, 1280, 800, 0, AbsMax},  // clamped
		{2000, -1, 1280, 800, AbsMax, 0}, // clamped
		{0, 0, 1, 1, 0, 0},               // degenerate screen
		{3, 3, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		ax, ay := PixelToAbs(tt.x, tt.y, tt.w, tt.h)
		if ax != tt.ax || ay != tt.ay {
			t.Errorf("PixelToAbs(%d, %d, %d, %d) = %d, %d; want %d, %d", tt.x, tt.y, tt.w, tt.h, ax, ay, tt.ax, tt.ay)
		}
	}
}
