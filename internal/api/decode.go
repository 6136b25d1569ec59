package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"sync"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// DecodeOptions adjust Decode.
type DecodeOptions struct {
	// AgentShortForm accepts seed 000's agent submission
	// {"name": …, "sandboxSelector": {"pool": …}, "task": {…}}.
	AgentShortForm bool
}

// Decode parses one or more objects from YAML (documents separated by ---)
// or JSON (an object, an array of objects, or a List). Unknown fields, wrong
// types, unknown kinds and unknown apiVersions are errors naming the field
// path. Decode neither defaults nor validates; see Default and Validate.
func Decode(data []byte, opts DecodeOptions) ([]Object, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, err
	}
	var out []Object
	for i, doc := range docs {
		objs, err := decodeGeneric(doc, opts)
		if err != nil {
			if len(docs) > 1 {
				return nil, fmt.Errorf("document %d: %w", i+1, err)
			}
			return nil, err
		}
		out = append(out, objs...)
	}
	if len(out) == 0 {
		return nil, Invalid("", "no objects found in input")
	}
	return out, nil
}

// DecodeOne parses exactly one object.
func DecodeOne(data []byte, opts DecodeOptions) (Object, error) {
	objs, err := Decode(data, opts)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, Invalid("", "expected one object, got %d", len(objs))
	}
	return objs[0], nil
}

// splitDocuments turns the input into generic JSON values, one per document.
func splitDocuments(data []byte) ([]any, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, Invalid("", "empty input: expected YAML or JSON")
	}
	if trimmed[0] == '{' || trimmed[0] == '[' {
		v, err := parseJSON(trimmed)
		var fe *FieldError
		if errors.As(err, &fe) {
			return nil, err
		}
		if err != nil {
			return nil, Invalid("", "invalid JSON: %v", err)
		}
		if arr, ok := v.([]any); ok {
			return arr, nil
		}
		return []any{v}, nil
	}
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	sz := newYAMLSizer(len(data))
	var docs []any
	for {
		var node yamlv3.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, Invalid("", "invalid YAML: %v", err)
		}
		if len(node.Content) == 0 || (node.Content[0].Kind == yamlv3.ScalarNode && node.Content[0].Tag == "!!null") {
			continue // an empty document between separators
		}
		// Before the aliases are expanded, into JSON and then objects.
		if err := sz.add(node.Content[0]); err != nil {
			return nil, err
		}
		b, err := yamlv3.Marshal(&node)
		if err != nil {
			return nil, Invalid("", "invalid YAML: %v", err)
		}
		j, err := yaml.YAMLToJSONStrict(b)
		if err != nil {
			return nil, Invalid("", "invalid YAML: %v", err)
		}
		v, err := parseJSON(j)
		if err != nil {
			return nil, Invalid("", "invalid YAML: %v", err)
		}
		docs = append(docs, v)
	}
	return docs, nil
}

// parseJSON decodes b into generic values (numbers as json.Number),
// refusing duplicate keys: encoding/json keeps the last of them silently,
// so {"name":"a","name":"b"} would name the object b.
func parseJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := parseValue(dec, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the top-level value")
	}
	return v, nil
}

// maxJSONDepth bounds nesting, so that a hostile body cannot exhaust the
// stack.
const maxJSONDepth = 100

func parseValue(dec *json.Decoder, path string, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, Invalid("", "nested more than %d levels deep", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				if _, dup := m[k]; dup {
					return nil, Invalid(join(path, k), "duplicate key")
				}
				v, err := parseValue(dec, join(path, k), depth+1)
				if err != nil {
					return nil, err
				}
				m[k] = v
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, err
			}
			return m, nil
		case '[':
			arr := []any{}
			for i := 0; dec.More(); i++ {
				v, err := parseValue(dec, fmt.Sprintf("%s[%d]", path, i), depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// CheckJSON reports the first duplicate key in the JSON document b, naming
// its path, or a syntax error. Bodies decoded straight into Go structs go
// through it first.
func CheckJSON(b []byte) error {
	_, err := parseJSON(b)
	var fe *FieldError
	if err != nil && !errors.As(err, &fe) {
		return Invalid("", "invalid JSON: %v", err)
	}
	return err
}

func decodeGeneric(doc any, opts DecodeOptions) ([]Object, error) {
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, Invalid("", "expected an object with apiVersion and kind, got %s", describe(doc))
	}
	if opts.AgentShortForm && isAgentShortForm(m) {
		m = expandAgentShortForm(m)
	}
	apiVersion, err := stringField(m, "apiVersion")
	if err != nil {
		return nil, err
	}
	kind, err := stringField(m, "kind")
	if err != nil {
		return nil, err
	}
	if apiVersion != Version && apiVersion != LegacyVersion && apiVersion != KubeVersion {
		return nil, Invalid("apiVersion", "unsupported value %q: want %s (or %s)", apiVersion, Version, KubeVersion)
	}
	if kind == "List" || strings.HasSuffix(kind, "List") {
		items, ok := m["items"].([]any)
		if !ok {
			return nil, Invalid("items", "a %s needs a list of items", kind)
		}
		var out []Object
		for i, it := range items {
			objs, err := decodeGeneric(it, opts)
			if err != nil {
				return nil, fmt.Errorf("items[%d]: %w", i, err)
			}
			out = append(out, objs...)
		}
		return out, nil
	}
	info, ok := kindByExactName(kind)
	if !ok {
		return nil, Invalid("kind", "unknown kind %q: want one of %s", kind, strings.Join(kindNames(), ", "))
	}
	obj := info.new()
	if err := checkValue("", m, reflect.TypeOf(obj).Elem()); err != nil {
		return nil, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("re-encode %s: %w", kind, err)
	}
	if err := json.Unmarshal(b, obj); err != nil {
		return nil, Invalid("", "%v", err)
	}
	obj.GetTypeMeta().APIVersion = Version
	return []Object{obj}, nil
}

func stringField(m map[string]any, name string) (string, error) {
	v, ok := m[name]
	if !ok || v == nil {
		return "", Invalid(name, "required")
	}
	s, ok := v.(string)
	if !ok {
		return "", Invalid(name, "expected a string, got %s", describe(v))
	}
	if s == "" {
		return "", Invalid(name, "required")
	}
	return s, nil
}

func kindByExactName(kind string) (KindInfo, bool) {
	for _, k := range Kinds {
		if k.Kind == kind {
			return k, true
		}
	}
	return KindInfo{}, false
}

func kindNames() []string {
	var names []string
	for _, k := range Kinds {
		names = append(names, k.Kind)
	}
	return names
}

// isAgentShortForm reports whether m is seed 000's flat agent submission.
func isAgentShortForm(m map[string]any) bool {
	_, hasName := m["name"]
	_, hasMeta := m["metadata"]
	_, hasKind := m["kind"]
	return hasName && !hasMeta && !hasKind
}

func expandAgentShortForm(m map[string]any) map[string]any {
	meta := map[string]any{"name": m["name"]}
	spec := map[string]any{}
	for k, v := range m {
		switch k {
		case "name":
		case "labels":
			meta["labels"] = v
		case "apiVersion":
		default:
			spec[k] = v
		}
	}
	apiVersion := any(Version)
	if v, ok := m["apiVersion"]; ok {
		apiVersion = v
	}
	return map[string]any{"apiVersion": apiVersion, "kind": KindAgent, "metadata": meta, "spec": spec}
}

var (
	rawMessageType  = reflect.TypeOf(json.RawMessage(nil))
	unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	fieldCache      sync.Map // reflect.Type -> map[string]reflect.Type
)

// checkValue walks a generic JSON value against the Go type it will be
// decoded into and returns the first mismatch, naming its path.
func checkValue(path string, v any, t reflect.Type) error {
	if v == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType || t.Kind() == reflect.Interface {
		return nil
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		b, err := json.Marshal(v)
		if err == nil {
			err = json.Unmarshal(b, reflect.New(t).Interface())
		}
		if err != nil {
			return Invalid(path, "invalid value %s: %v", describe(v), err)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return Invalid(path, "expected an object, got %s", describe(v))
		}
		fields := structFields(t)
		for _, k := range sortedKeys(m) {
			ft, ok := fields[k]
			if !ok {
				return Invalid(join(path, k), "unknown field")
			}
			if err := checkValue(join(path, k), m[k], ft); err != nil {
				return err
			}
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return Invalid(path, "expected an object, got %s", describe(v))
		}
		for _, k := range sortedKeys(m) {
			if err := checkValue(join(path, k), m[k], t.Elem()); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 { // []byte: base64, as encoding/json takes it
			str, ok := v.(string)
			if !ok {
				return Invalid(path, "expected a base64 string, got %s", describe(v))
			}
			if _, err := base64.StdEncoding.DecodeString(str); err != nil {
				return Invalid(path, "not base64 (give the value in stringData instead)")
			}
			return nil
		}
		arr, ok := v.([]any)
		if !ok {
			return Invalid(path, "expected a list, got %s", describe(v))
		}
		for i, e := range arr {
			if err := checkValue(fmt.Sprintf("%s[%d]", path, i), e, t.Elem()); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return Invalid(path, "expected a string, got %s", describe(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return Invalid(path, "expected true or false, got %s", describe(v))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			return Invalid(path, "expected an integer, got %s", describe(v))
		}
		i, err := n.Int64()
		if err != nil {
			return Invalid(path, "expected an integer, got %s", describe(v))
		}
		if reflect.New(t).Elem().OverflowInt(i) {
			return Invalid(path, "integer %d is out of range", i)
		}
	case reflect.Float32, reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			return Invalid(path, "expected a number, got %s", describe(v))
		}
		if _, err := n.Float64(); err != nil {
			return Invalid(path, "expected a number, got %s", describe(v))
		}
	}
	return nil
}

// structFields maps the JSON names of t's fields, embedded ones included, to
// their types.
func structFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			for k, v := range structFields(ft) {
				fields[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	fieldCache.Store(t, fields)
	return fields
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names a generic JSON value's type for error messages.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return fmt.Sprintf("string %q", x)
	case json.Number:
		return "number " + x.String()
	case bool:
		return fmt.Sprintf("boolean %t", x)
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	default:
		return fmt.Sprintf("%T", v)
	}
}
