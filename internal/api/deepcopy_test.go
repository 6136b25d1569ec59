package api

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// fill sets every field v reaches to a value drawn from r: strings,
// numbers, times, and a non-empty slice, map and pointer at every level.
// What is already there it changes in place (the elements of a slice, the
// values of a map, what a pointer points at), so that filling a copy that
// shares any of them with its original changes the original too.
func fill(r *rand.Rand, v reflect.Value, depth int) {
	if depth > 8 {
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", r.IntN(1000)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(r.IntN(1000)) * int64(time.Second))
			return
		}
		v.SetInt(int64(r.IntN(1000) + 1))
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		v.SetUint(uint64(r.IntN(200) + 1))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(r.IntN(1000)) / 8)
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fill(r, v.Elem(), depth+1)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			b := []byte(fmt.Sprintf(`{"k":"%03d"}`, r.IntN(1000)))
			if v.Len() == len(b) {
				reflect.Copy(v, reflect.ValueOf(b))
			} else {
				v.SetBytes(b)
			}
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		}
		for i := range v.Len() {
			fill(r, v.Index(i), depth+1)
		}
	case reflect.Map:
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
			k := reflect.New(v.Type().Key()).Elem()
			fill(r, k, depth+1)
			v.SetMapIndex(k, reflect.New(v.Type().Elem()).Elem())
		}
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			fill(r, e, depth+1)
			v.SetMapIndex(k, e)
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(int64(r.IntN(1e9)), int64(r.IntN(1e9))).UTC()))
			return
		}
		if v.Type() == reflect.TypeFor[IntOrString]() {
			v.Set(reflect.ValueOf(IntOrString{IntVal: r.IntN(1000) + 1}))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(r, v.Field(i), depth+1)
			}
		}
	}
}

// TestDeepCopy: each kind's generated DeepCopy gives an object equal to
// the original, field for field and in its JSON, that shares nothing with
// it: filling the copy anew leaves the original as it was.
func TestDeepCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, k := range append(Kinds[:len(Kinds):len(Kinds)], EventKind) {
		t.Run(k.Kind, func(t *testing.T) {
			for range 20 {
				o := k.new()
				fill(r, reflect.ValueOf(o).Elem(), 0)
				before, err := json.Marshal(o)
				if err != nil {
					t.Fatal(err)
				}
				c := DeepCopy(o)
				if !reflect.DeepEqual(c, o) {
					t.Fatalf("the copy differs from the original:\n%+v\n%+v", c, o)
				}
				if got, _ := json.Marshal(c); string(got) != string(before) {
					t.Fatalf("the copy's JSON differs:\n%s\n%s", got, before)
				}
				fill(r, reflect.ValueOf(c).Elem(), 0)
				if after, _ := json.Marshal(o); string(after) != string(before) {
					t.Fatalf("filling the copy changed the original:\n%s\n%s", after, before)
				}
			}
		})
	}
	var nilAgent *Agent
	if DeepCopy(nilAgent) != nil {
		t.Errorf("a copy of a nil agent is not nil")
	}
}
