package kube

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hvkube/hvkube/internal/api"
)

// filled is an object of kind with every field it has set, as a custom
// resource's map.
func filled(t testing.TB, kind string) *unstructured.Unstructured {
	o, err := api.New(kind)
	if err != nil {
		t.Fatal(err)
	}
	fill(reflect.ValueOf(o).Elem(), 0)
	o.GetTypeMeta().APIVersion, o.GetTypeMeta().Kind = api.KubeVersion, kind
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	// Decoded as client-go decodes the API server's answers: whole
	// numbers as int64 (a float field of 2 among them), others float64.
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	return u
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// fill sets every field of v that JSON writes to a value of its type.
func fill(v reflect.Value, depth int) {
	if depth > 8 {
		return
	}
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 12, 5, 6, 7, 8, 9000, time.UTC)))
		return
	case v.Type() == rawType:
		v.Set(reflect.ValueOf(json.RawMessage(`{"a":[1,"b",true]}`)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x-1")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(9)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(2) // written "2": a whole number, as the API server's JSON has it
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && f.Tag.Get("json") != "-" {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Interface:
		v.Set(reflect.ValueOf(map[string]any{"k": "v"}))
	}
}

// TestFromKubeAsJSON: the converter fromKube uses decodes every field of
// every kind as the JSON round trip does.
func TestFromKubeAsJSON(t *testing.T) {
	for _, kind := range []string{api.KindTemplate, api.KindSandbox, api.KindSandboxPool, api.KindAgent, api.KindDisplayService, api.KindNode, api.KindSecret} {
		t.Run(kind, func(t *testing.T) {
			u := filled(t, kind)
			direct, _ := api.New(kind)
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, direct); err != nil {
				t.Fatalf("the converter refuses it (fromKube would take the JSON way): %v", err)
			}
			got, err := fromKube(u)
			if err != nil {
				t.Fatal(err)
			}
			want, err := fromKubeJSON(u)
			if err != nil {
				t.Fatal(err)
			}
			want.GetTypeMeta().APIVersion = api.Version
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			if string(gb) != string(wb) {
				t.Errorf("fromKube:\n%s\nthrough JSON:\n%s", gb, wb)
			}
			if len(gb) < 200 {
				t.Errorf("the object compared holds little: %s", gb)
			}
		})
	}
}

// BenchmarkFromKube times the decoding of an Agent whose every field is
// set: apimachinery's converter, and the JSON round trip it replaced.
func BenchmarkFromKube(b *testing.B) {
	u := filled(b, api.KindAgent)
	b.Run("converter", func(b *testing.B) {
		for b.Loop() {
			if _, err := fromKube(u); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			if _, err := fromKubeJSON(u); err != nil {
				b.Fatal(err)
			}
		}
	})
}
