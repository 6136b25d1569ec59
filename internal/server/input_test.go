package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
)

// failingDesk is a fake desktop that counts how often the action layer
// reads the sandbox (screen size, input) and fails the failAt-th input
// event, delivering the ones before it; it keeps what the delivered
// events leave pressed.
type failingDesk struct {
	Sandboxes
	mu     sync.Mutex
	failAt int
	sent   int
	sizes  int
	sends  int
	down   []string
}

func (d *failingDesk) ScreenSize(context.Context, string) (int, int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sizes++
	return 1280, 800, nil
}

func (d *failingDesk) SendInput(ctx context.Context, _ string, evs []backend.InputEvent) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sends++
	for _, e := range evs {
		d.sent++
		if d.sent == d.failAt {
			return errors.New("the input channel broke")
		}
		if e.Kind == backend.EventMove {
			continue
		}
		i := slices.Index(d.down, e.Key+e.Button)
		switch {
		case e.Down && i < 0:
			d.down = append(d.down, e.Key+e.Button)
		case !e.Down && i >= 0:
			d.down = slices.Delete(d.down, i, i+1)
		}
	}
	return nil
}

func (d *failingDesk) TypeText(context.Context, string, string) error { return nil }
func (d *failingDesk) CursorPosition(context.Context, string) (int, int, error) {
	return 0, 0, nil
}

// TestOpenAIDragFailingPartWay: an OpenAI drag (a press, moves, a release)
// that fails part way leaves no button down, and the whole drag reads the
// sandbox once for its screen and once for its input.
func TestOpenAIDragFailingPartWay(t *testing.T) {
	const drag = `{"type":"drag","path":[{"x":10,"y":10},{"x":50,"y":50},{"x":70,"y":50},{"x":90,"y":90}]}`
	for _, tt := range []struct {
		failAt int
		code   int
	}{{0, http.StatusOK}, {3, http.StatusInternalServerError}, {5, http.StatusInternalServerError}} {
		d := &failingDesk{failAt: tt.failAt}
		ts := start(t, Options{Sandboxes: d, Actions: display.NewActions(d)})
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = "desk"
		api.Default(sb)
		if _, err := ts.st.Create(context.Background(), sb); err != nil {
			t.Fatal(err)
		}
		code, _, body := ts.do(t, "POST", "/api/v1/sandboxes/desk/input", "application/json", drag)
		if code != tt.code {
			t.Fatalf("event %d fails: %d %s, want %d", tt.failAt, code, body, tt.code)
		}
		if len(d.down) > 0 {
			t.Errorf("event %d fails: %v still held", tt.failAt, d.down)
		}
		if tt.failAt == 0 && (d.sizes != 1 || d.sends != 1) {
			t.Errorf("a drag of four points read the screen size %d times and sent input %d times, want 1 and 1", d.sizes, d.sends)
		}
	}
}
