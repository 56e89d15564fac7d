package config

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

type thing struct {
	TypeMeta `yaml:",inline"`
	Name     string   `yaml:"name"`
	Hosts    []host   `yaml:"hosts"`
	Tags     []string `yaml:"tags"`
}

type host struct {
	Name string `yaml:"name"`
	BMC  struct {
		Address string `yaml:"address"`
	} `yaml:"bmc"`
}

const good = `apiVersion: bootstick.dev/v1alpha1
kind: Thing
name: a
hosts:
- name: h0
  bmc:
    address: ipmi://x
- name: h1
  bmc:
    address: ipmii://y
`

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, data, want string
	}{
		{"empty", "", "f.yaml: empty file: expected a Thing document"},
		{"malformed", "apiVersion: [", "f.yaml: line 1: did not find expected node content"},
		{"wrong kind", "apiVersion: bootstick.dev/v1alpha1\nkind: Other\n", `f.yaml: 1 problem:
  line 2: kind: Invalid value: "Other": must be Thing`},
		{"wrong version", "apiVersion: v2\nkind: Thing\n", `line 1: apiVersion: Invalid value: "v2": must be bootstick.dev/v1alpha1`},
		{"unknown field", good + "colour: red\n", `line 11: colour: unknown field "colour": remove it or check its spelling`},
		{"nested unknown", strings.Replace(good, "  bmc:\n    address: ipmi://x", "  bmc:\n    adress: ipmi://x", 1), `line 7: hosts[0].bmc.adress: unknown field "adress": remove it or check its spelling (did you mean address?)`},
		{"duplicate key", good + "name: b\n", `line 11: mapping key "name" already defined at line 3`},
		{"two documents", good + "---\napiVersion: x\n", "f.yaml:11: a second YAML document"},
		{"wrong type", strings.Replace(good, "tags:", "", 1) + "tags: 3\n", "line 11: tags: must be a list, not a single value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v thing
			_, err := Decode("f.yaml", []byte(tc.data), "Thing", &v)
			if err == nil {
				t.Fatalf("Decode succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tc.want)
			}
		})
	}
}

func TestProblemsNameLineAndPath(t *testing.T) {
	var v thing
	doc, err := Decode("site.yaml", []byte(good), "Thing", &v)
	if err != nil {
		t.Fatal(err)
	}
	if v.Hosts[1].BMC.Address != "ipmii://y" {
		t.Fatalf("decoded %+v", v)
	}
	errs := field.ErrorList{
		field.NotSupported(field.NewPath("hosts").Index(1).Child("bmc", "address"), "ipmii", []string{"ipmi", "redfish"}),
		field.Required(field.NewPath("hosts").Index(0).Child("bmc", "credentials"), "give a username and password"),
		field.Required(field.NewPath("tags"), "at least one tag"),
	}
	got := doc.Problems(errs).Error()
	want := `site.yaml: 3 problems:
  line 0: tags: Required value: at least one tag
  line 6: hosts[0].bmc.credentials: Required value: give a username and password
  line 10: hosts[1].bmc.address: Unsupported value: "ipmii": supported values: "ipmi", "redfish"`
	want = strings.Replace(want, "line 0: ", "", 1)
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	if doc.Problems(nil) != nil {
		t.Fatal("no problems must give a nil error")
	}
}
