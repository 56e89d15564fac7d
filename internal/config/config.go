// Package config loads bootstick's versioned YAML kinds strictly and reports
// validation problems with their file, line and field path.
//
// Every kind (Recipes, Bundle, Site) goes through the same steps: Decode
// (unknown and duplicate fields are errors), then defaults, then validation
// that collects every problem as a field.ErrorList, then Problems to turn that
// list into one error that names the file, the line and the field path.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// APIVersion is the API group and version of every bootstick kind.
const APIVersion = "bootstick.dev/v1alpha1"

// Document is a decoded YAML file: its name, its node tree (for line
// numbers) and nothing else. It is returned by Decode so that validation can
// point at lines.
type Document struct {
	File  string
	root  *yaml.Node
	lines map[string]int
}

// TypeMeta is embedded by every kind.
type TypeMeta struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
}

// Decode parses data (read from file) into v, which must be a pointer to a
// struct that embeds TypeMeta inline. It rejects unknown fields, duplicate
// keys, a second document, and an apiVersion or kind other than the ones
// given. Errors name the file and the line.
func Decode(file string, data []byte, kind string, v any) (*Document, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty file: expected a %s document", file, kind)
		}
		return nil, fmt.Errorf("%s: %s", file, cleanYAMLError(err.Error()))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("%s:%d: a second YAML document: put one %s per file", file, extra.Line, kind)
	} else if !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %s", file, cleanYAMLError(err.Error()))
	}
	doc := &Document{File: file, root: &root}

	var meta TypeMeta
	if err := root.Decode(&meta); err != nil {
		return nil, fmt.Errorf("%s: %s", file, cleanYAMLError(err.Error()))
	}
	var errs field.ErrorList
	if meta.APIVersion != APIVersion {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), meta.APIVersion, "must be "+APIVersion))
	}
	if meta.Kind != kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), meta.Kind, "must be "+kind))
	}
	if err := doc.Problems(errs); err != nil {
		return nil, err
	}

	// Every type problem at once, each with its line and field path; the
	// strict decoder's own message (Go types, quoted values) is the last
	// resort.
	if probs := checkTypes(&root, reflect.TypeOf(v).Elem()); len(probs) > 0 {
		return nil, &ProblemsError{File: file, Problems: probs}
	}
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(v); err != nil {
		return nil, fmt.Errorf("%s: %s", file, cleanYAMLError(err.Error()))
	}
	return doc, nil
}

var (
	unknownField = regexp.MustCompile(`line (\d+): field (\S+) not found in type \S+`)
	lineN        = regexp.MustCompile(`line (\d+): `)
	quoted       = regexp.MustCompile("`[^`]*`|'[^']*'")
)

// cleanYAMLError rewrites yaml.v3's messages, which name Go types, into
// ones a user can act on.
func cleanYAMLError(msg string) string {
	msg = strings.TrimPrefix(msg, "yaml: ")
	// yaml quotes the text it stumbled on (an anchor's name, a value in
	// backticks): that text may be a password, so it never shows.
	msg = quoted.ReplaceAllString(msg, "…")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	msg = unknownField.ReplaceAllString(msg, `line $1: unknown field "$2": remove it or check its spelling`)
	msg = lineN.ReplaceAllString(msg, "line $1: ")
	return strings.ReplaceAll(msg, "\n  ", "; ")
}

// Line returns the line of the node at a field path such as
// "hosts[2].bmc.address", or of its nearest parent that exists; 0 when
// nothing matches.
func (d *Document) Line(path string) int {
	if d == nil || d.root == nil {
		return 0
	}
	if d.lines == nil {
		d.lines = map[string]int{}
		walk(d.root, "", d.lines)
	}
	for p := path; p != ""; p = parentPath(p) {
		if l, ok := d.lines[p]; ok {
			return l
		}
	}
	return 0
}

func walk(n *yaml.Node, path string, lines map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			walk(c, path, lines)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			lines[p] = k.Line
			walk(val, p, lines)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			lines[p] = c.Line
			walk(c, p, lines)
		}
	}
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i <= 0 {
		return ""
	}
	return p[:i]
}

// ProblemsError is every validation problem of one file.
type ProblemsError struct {
	File     string
	Problems []Problem
}

// Problem is one validation problem.
type Problem struct {
	Line   int    `json:"line,omitempty"`
	Path   string `json:"field"`
	Detail string `json:"detail"`
}

func (p Problem) String() string { return p.Path + ": " + p.Detail }

func (e *ProblemsError) Error() string {
	var b strings.Builder
	if len(e.Problems) == 1 {
		fmt.Fprintf(&b, "%s: 1 problem:", e.File)
	} else {
		fmt.Fprintf(&b, "%s: %d problems:", e.File, len(e.Problems))
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		if p.Line > 0 {
			fmt.Fprintf(&b, "line %d: ", p.Line)
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// Problems turns a validation result into one error that lists every problem
// with its line and field path, sorted by line; nil when errs is empty.
func (d *Document) Problems(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	out := &ProblemsError{File: d.File}
	for _, e := range errs {
		// ErrorBody is the message without the path in front. Validators
		// must not put secrets in an Invalid value: use Required or Forbidden.
		out.Problems = append(out.Problems, Problem{Line: d.Line(e.Field), Path: e.Field, Detail: e.ErrorBody()})
	}
	sort.SliceStable(out.Problems, func(i, j int) bool { return out.Problems[i].Line < out.Problems[j].Line })
	return out
}
