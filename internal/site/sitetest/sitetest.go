// Package sitetest holds the bad sites the site loader must refuse, as one
// table of edits to internal/site/testdata/good.yaml, and writes them out
// as files. Only tests import it.
package sitetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Case is one bad site: the good site with Edits applied, and a text the
// loader's error must contain.
type Case struct {
	Name  string
	Want  string
	Edits []Edit
}

// Site is a Case written to a file.
type Site struct {
	Name, Path, Want string
}

// Write writes every case to dir as NAME.yaml, made from the good site at
// the path good, with the files the cases refer to, and returns them in
// table order.
func Write(dir, good string) ([]Site, error) {
	data, err := os.ReadFile(good)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		p := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(f.text), 0o600); err != nil {
			return nil, err
		}
	}
	var out []Site
	seen := map[string]bool{}
	for _, c := range Cases {
		if seen[c.Name] {
			return nil, fmt.Errorf("bad site %s: a second case of that name", c.Name)
		}
		seen[c.Name] = true
		b, err := c.Apply(data)
		if err != nil {
			return nil, fmt.Errorf("bad site %s: %w", c.Name, err)
		}
		p := filepath.Join(dir, c.Name+".yaml")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return nil, err
		}
		out = append(out, Site{Name: c.Name, Path: p, Want: c.Want})
	}
	return out, nil
}

// Apply returns the good site's text with the case's edits made: on its
// node tree, which is then written back in good.yaml's own layout, or on
// its text. A case does one or the other.
func (c Case) Apply(good []byte) ([]byte, error) {
	var onText int
	for _, e := range c.Edits {
		if e.text != nil {
			onText++
		}
	}
	if len(c.Edits) == 0 || (onText > 0 && onText < len(c.Edits)) {
		return nil, errors.New("give edits of the node tree or of the text, at least one, not both")
	}
	if onText > 0 {
		s := string(good)
		for _, e := range c.Edits {
			var err error
			if s, err = e.text(s); err != nil {
				return nil, fmt.Errorf("%s: %w", e.desc, err)
			}
		}
		return []byte(s), nil
	}
	var root yaml.Node
	if err := yaml.Unmarshal(good, &root); err != nil {
		return nil, fmt.Errorf("the good site: %w", err)
	}
	for _, e := range c.Edits {
		if err := e.tree(&root); err != nil {
			return nil, fmt.Errorf("%s: %w", e.desc, err)
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	enc.CompactSeqIndent()
	if err := enc.Encode(&root); err != nil {
		return nil, fmt.Errorf("writing the edited site: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("writing the edited site: %w", err)
	}
	return b.Bytes(), nil
}

// Edit is one change to the good site. Set, Delete, Add, Append and Rename
// change its node tree at a field path such as "hosts[0].bmc.address" ("" is
// the top mapping), and take values as YAML text: a scalar, a list, a
// mapping, with a tag or a style; "" is YAML's empty value (null). Replace
// and Text change its text, for faults no node tree can hold.
type Edit struct {
	desc string
	tree func(root *yaml.Node) error
	text func(string) (string, error)
}

// Set replaces the value at path.
func Set(path, value string) Edit {
	return Edit{desc: "Set " + path, tree: func(root *yaml.Node) error {
		parent, i, err := locate(root, path)
		if err != nil {
			return err
		}
		v, err := parseValue(value)
		if err != nil {
			return err
		}
		parent.Content[i] = v
		return nil
	}}
}

// Delete removes the key or list entry at path.
func Delete(path string) Edit {
	return Edit{desc: "Delete " + path, tree: func(root *yaml.Node) error {
		parent, i, err := locate(root, path)
		if err != nil {
			return err
		}
		if parent.Kind == yaml.MappingNode {
			parent.Content = append(parent.Content[:i-1], parent.Content[i+1:]...)
		} else {
			parent.Content = append(parent.Content[:i], parent.Content[i+1:]...)
		}
		return nil
	}}
}

// Add adds the new key with value at the end of the mapping at path.
func Add(path, key, value string) Edit {
	return Edit{desc: "Add " + join(path, key), tree: func(root *yaml.Node) error {
		m, err := at(root, path, yaml.MappingNode)
		if err != nil {
			return err
		}
		if valueOf(m, key) >= 0 {
			return fmt.Errorf("%s is there already", join(path, key))
		}
		v, err := parseValue(value)
		if err != nil {
			return err
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
		return nil
	}}
}

// Append adds value at the end of the list at path.
func Append(path, value string) Edit {
	return Edit{desc: "Append " + path, tree: func(root *yaml.Node) error {
		l, err := at(root, path, yaml.SequenceNode)
		if err != nil {
			return err
		}
		v, err := parseValue(value)
		if err != nil {
			return err
		}
		l.Content = append(l.Content, v)
		return nil
	}}
}

// Rename gives the key at path the name key, in its place.
func Rename(path, key string) Edit {
	return Edit{desc: "Rename " + path, tree: func(root *yaml.Node) error {
		parent, i, err := locate(root, path)
		if err != nil {
			return err
		}
		if parent.Kind != yaml.MappingNode {
			return fmt.Errorf("%s is a list entry, not a key", path)
		}
		if valueOf(parent, key) >= 0 {
			return fmt.Errorf("%s is there already", key)
		}
		parent.Content[i-1].Value = key
		return nil
	}}
}

// Replace replaces old, which must occur once in the good site's text, by
// new.
func Replace(old, new string) Edit {
	return Edit{desc: fmt.Sprintf("Replace %q", old), text: func(s string) (string, error) {
		if n := strings.Count(s, old); n != 1 {
			return "", fmt.Errorf("occurs %d times, not once", n)
		}
		return strings.Replace(s, old, new, 1), nil
	}}
}

// Text replaces the whole text by text.
func Text(text string) Edit {
	return Edit{desc: "Text", text: func(string) (string, error) { return text, nil }}
}

// locate finds the node at path: its parent (a mapping or a list) and its
// index in the parent's Content.
func locate(root *yaml.Node, path string) (parent *yaml.Node, i int, err error) {
	steps, err := split(path)
	if err != nil {
		return nil, 0, err
	}
	if len(steps) == 0 {
		return nil, 0, errors.New("no field path")
	}
	n := top(root)
	for j, s := range steps {
		parent = n
		if s.key != "" {
			if n.Kind != yaml.MappingNode {
				return nil, 0, fmt.Errorf("%s is not a mapping", s.prefix)
			}
			if i = valueOf(n, s.key); i < 0 {
				return nil, 0, fmt.Errorf("%s has no key %s", s.prefix, s.key)
			}
		} else {
			if n.Kind != yaml.SequenceNode {
				return nil, 0, fmt.Errorf("%s is not a list", s.prefix)
			}
			if i = s.index; i >= len(n.Content) {
				return nil, 0, fmt.Errorf("%s has no entry %d", s.prefix, i)
			}
		}
		if j < len(steps)-1 {
			n = n.Content[i]
		}
	}
	return parent, i, nil
}

// at returns the node at path, which must be of the given kind.
func at(root *yaml.Node, path string, kind yaml.Kind) (*yaml.Node, error) {
	n := top(root)
	if path != "" {
		parent, i, err := locate(root, path)
		if err != nil {
			return nil, err
		}
		n = parent.Content[i]
	}
	if n.Kind != kind {
		if kind == yaml.MappingNode {
			return nil, fmt.Errorf("%s is not a mapping", path)
		}
		return nil, fmt.Errorf("%s is not a list", path)
	}
	return n, nil
}

func top(root *yaml.Node) *yaml.Node {
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		return root.Content[0]
	}
	return root
}

// valueOf returns the index of key's value in the mapping m, or -1.
func valueOf(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return i + 1
		}
	}
	return -1
}

// step is one step of a field path: a key, or (key "") a list index.
// prefix is the path up to it, for messages.
type step struct {
	key    string
	index  int
	prefix string
}

// split turns "hosts[0].bmc.address" into its steps.
func split(path string) ([]step, error) {
	var out []step
	for part := range strings.SplitSeq(path, ".") {
		key, rest, _ := strings.Cut(part, "[")
		if key == "" {
			return nil, fmt.Errorf("field path %q: an empty key", path)
		}
		out = append(out, step{key: key, prefix: prefixOf(out)})
		for rest != "" {
			num, after, ok := strings.Cut(rest, "]")
			i, err := strconv.Atoi(num)
			if !ok || err != nil || i < 0 || (after != "" && after[0] != '[') {
				return nil, fmt.Errorf("field path %q: a bad list index", path)
			}
			out = append(out, step{index: i, prefix: prefixOf(out)})
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return out, nil
}

// prefixOf is the field path the steps so far make.
func prefixOf(steps []step) string {
	var b strings.Builder
	for _, s := range steps {
		if s.key != "" {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		} else {
			fmt.Fprintf(&b, "[%d]", s.index)
		}
	}
	if b.Len() == 0 {
		return "the top mapping"
	}
	return b.String()
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// parseValue parses YAML text into a node; "" is the empty value, null.
func parseValue(text string) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil, fmt.Errorf("value %q: %w", text, err)
	}
	if len(doc.Content) == 0 {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}, nil
	}
	return doc.Content[0], nil
}
