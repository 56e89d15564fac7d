package render

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// DecodeYAML reads every object of a multi-document YAML stream.
func DecodeYAML(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// ReadManifest decodes the objects of the YAML file name in fsys.
func ReadManifest(fsys fs.FS, name string) ([]*unstructured.Unstructured, error) {
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("reading manifest: %w", err)
	}
	objs, err := DecodeYAML(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", name, err)
	}
	return objs, nil
}
