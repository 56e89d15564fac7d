package render

import (
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Unstructured converts objects for output and apply: no status, no empty
// creationTimestamp.
func Unstructured(objs []Object) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return nil, fmt.Errorf("converting %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
		delete(m, "status")
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// Redacted is what a Secret value reads as in printed output.
const Redacted = "<redacted: firstboot render --show-secrets prints it>"

// WriteYAML writes the objects as YAML documents. Unless showSecrets,
// the values of Secret keys password and ssh-privatekey are replaced by a
// marker (as stringData), so
// printing a site's objects shows no password and no private key.
func WriteYAML(w io.Writer, objs []Object, showSecrets bool) error {
	us, err := Unstructured(objs)
	if err != nil {
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	for _, u := range us {
		if !showSecrets && u.GetAPIVersion() == "v1" && u.GetKind() == "Secret" {
			redact(u)
		}
		if err := enc.Encode(u.Object); err != nil {
			return fmt.Errorf("writing %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return enc.Close()
}

// secretKeys are the Secret keys whose values are never printed.
var secretKeys = map[string]bool{"password": true, "ssh-privatekey": true}

func redact(u *unstructured.Unstructured) {
	data, _ := u.Object["data"].(map[string]any)
	sd := map[string]any{}
	for k := range data {
		if secretKeys[k] {
			sd[k] = Redacted
			delete(data, k)
		}
	}
	if len(sd) > 0 {
		u.Object["stringData"] = sd
	}
}
