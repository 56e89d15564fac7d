package config

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkTypes walks the YAML node tree against the Go type it decodes into
// and returns every mismatch: unknown fields, a mapping or list where a
// single value belongs (or the other way round), numbers that are not
// whole or do not fit, booleans that are not true or false, and empty list
// entries. Each problem has its line and field path and is said in a
// user's words; none quotes a value, so a misplaced password never shows.
func checkTypes(n *yaml.Node, t reflect.Type) []Problem {
	c := &checker{}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	c.check(n, t, "")
	sort.SliceStable(c.out, func(i, j int) bool { return c.out[i].Line < c.out[j].Line })
	return c.out
}

type checker struct{ out []Problem }

func (c *checker) add(n *yaml.Node, path, detail string) {
	if path == "" {
		path = "(the document)"
	}
	c.out = append(c.out, Problem{Line: n.Line, Path: path, Detail: detail})
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kindWord(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "a single value"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (c *checker) check(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return
		}
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isNull(n) {
		return // an empty value: validation says whether it is required
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		// The type reads itself (a secret, a value of several forms).
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			c.add(n, path, "is not valid here: "+cleanYAMLError(err.Error()))
		}
		return
	}
	switch t.Kind() {
	case reflect.Interface:
		return // free-form (networkData): package netdata reads and checks it
	case reflect.Struct:
		c.checkStruct(n, t, path)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.add(n, path, "must be a mapping, not "+kindWord(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			c.check(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value))
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			c.add(n, path, "must be a list, not "+kindWord(n))
			return
		}
		for i, e := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if isNull(e) && t.Elem().Kind() != reflect.Interface {
				c.add(e, p, "is an empty entry: fill it in or remove the line")
				continue
			}
			c.check(e, t.Elem(), p)
		}
	default:
		c.checkScalar(n, t, path)
	}
}

func (c *checker) checkStruct(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.MappingNode {
		c.add(n, path, "must be a mapping ("+strings.Join(fieldNames(t), ", ")+"), not "+kindWord(n))
		return
	}
	fields := structFields(t)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" {
			continue // a merge key: yaml merges it
		}
		f, ok := fields[k.Value]
		if !ok {
			msg := fmt.Sprintf("unknown field %q: remove it or check its spelling", k.Value)
			if near := nearest(k.Value, fieldNames(t)); near != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", near)
			}
			c.add(k, join(path, k.Value), msg)
			continue
		}
		c.check(v, f, join(path, k.Value))
	}
}

// structFields maps each YAML key of t (inline structs flattened) to its
// type.
func structFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !strings.Contains(opts, "inline")) {
			continue
		}
		if strings.Contains(opts, "inline") {
			for k, v := range structFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

func fieldNames(t reflect.Type) []string {
	var names []string
	for k := range structFields(t) {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// nearest is the field name closest to key (case-insensitive, at most two
// edits), or "".
func nearest(key string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := distance(strings.ToLower(key), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func (c *checker) checkScalar(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.ScalarNode {
		c.add(n, path, "must be a single value, not "+kindWord(n))
		return
	}
	switch t.Kind() {
	case reflect.String:
		return
	case reflect.Bool:
		if n.Tag != "!!bool" {
			c.add(n, path, "must be true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, bits); err != nil {
			if n.Tag == "!!int" || isWhole(n.Value) {
				c.add(n, path, fmt.Sprintf("is out of range: give a whole number from %d to %d", int64(-1)<<(bits-1), int64(math.MaxInt64>>(64-bits))))
			} else {
				c.add(n, path, "must be a whole number")
			}
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		bits := t.Bits()
		if _, err := strconv.ParseUint(strings.ReplaceAll(n.Value, "_", ""), 0, bits); err != nil {
			if isWhole(n.Value) {
				c.add(n, path, fmt.Sprintf("is out of range: give a whole number from 0 to %d", uint64(math.MaxUint64>>(64-bits))))
			} else {
				c.add(n, path, "must be a whole number, not negative")
			}
		}
	case reflect.Float32, reflect.Float64:
		if _, err := strconv.ParseFloat(n.Value, t.Bits()); err != nil {
			c.add(n, path, "must be a number")
		}
	}
}

func isWhole(s string) bool {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}
