package debs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestSourcesLines: a release reads its -updates at the mirror and its
// -security at the security mirror, each checked with the archive keyring;
// unstable has neither; a missing security mirror is an error, never a
// build without it.
func TestSourcesLines(t *testing.T) {
	trixie := Sources{Suite: "trixie", Mirror: "http://mirror.invalid/debian", SecurityMirror: "http://security.mirror.invalid/debian-security"}
	for _, tc := range []struct {
		name  string
		src   Sources
		comps []string
		want  []string
		err   string
	}{
		{"release", trixie, nil, []string{
			"deb [signed-by=" + Keyring + "] http://mirror.invalid/debian trixie main",
			"deb [signed-by=" + Keyring + "] http://mirror.invalid/debian trixie-updates main",
			"deb [signed-by=" + Keyring + "] http://security.mirror.invalid/debian-security trixie-security main",
		}, ""},
		{"components", trixie, []string{"main", "non-free-firmware"}, []string{
			"deb [signed-by=" + Keyring + "] http://mirror.invalid/debian trixie main non-free-firmware",
			"deb [signed-by=" + Keyring + "] http://mirror.invalid/debian trixie-updates main non-free-firmware",
			"deb [signed-by=" + Keyring + "] http://security.mirror.invalid/debian-security trixie-security main non-free-firmware",
		}, ""},
		{"unstable", Sources{Suite: "sid", Mirror: "http://mirror.invalid/debian"}, nil, []string{
			"deb [signed-by=" + Keyring + "] http://mirror.invalid/debian sid main",
		}, ""},
		{"no security mirror", Sources{Suite: "trixie", Mirror: "http://mirror.invalid/debian"}, nil, nil, "no Debian security mirror given for trixie-security"},
		{"no mirror", Sources{Suite: "trixie"}, nil, nil, "no Debian mirror given for trixie"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.src.Lines(tc.comps)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Lines = %q, %v\nwant %q", got, err, tc.want)
			}
		})
	}
}

// TestComplete: the mirrors the user gives stay; the others are asked
// for by suite, the security mirror by SUITE-security.
func TestComplete(t *testing.T) {
	var asked []string
	host := func(suite string) (string, error) {
		asked = append(asked, suite)
		return "http://host.invalid/" + suite, nil
	}
	for _, tc := range []struct {
		name      string
		in, want  Sources
		wantAsked []string
	}{
		{"from the host", Sources{Suite: "trixie"},
			Sources{Suite: "trixie", Mirror: "http://host.invalid/trixie", SecurityMirror: "http://host.invalid/trixie-security"},
			[]string{"trixie", "trixie-security"}},
		{"mirror given", Sources{Suite: "trixie", Mirror: "http://user.invalid/debian"},
			Sources{Suite: "trixie", Mirror: "http://user.invalid/debian", SecurityMirror: "http://host.invalid/trixie-security"},
			[]string{"trixie-security"}},
		{"both given", Sources{Suite: "trixie", Mirror: "http://user.invalid/debian", SecurityMirror: "http://user.invalid/security"},
			Sources{Suite: "trixie", Mirror: "http://user.invalid/debian", SecurityMirror: "http://user.invalid/security"},
			nil},
		{"unstable", Sources{Suite: "sid"}, Sources{Suite: "sid", Mirror: "http://host.invalid/sid"}, []string{"sid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked = nil
			got, err := tc.in.Complete(host)
			if err != nil || got != tc.want || !reflect.DeepEqual(asked, tc.wantAsked) {
				t.Errorf("Complete = %+v, %v (asked %v)\nwant %+v (asked %v)", got, err, asked, tc.want, tc.wantAsked)
			}
		})
	}
}

// TestSuiteOf: each package names the suite that serves its version, the
// base suite first when a point release took it in.
func TestSuiteOf(t *testing.T) {
	madison := []byte(`   openssl | 3.5.1-1+deb13u1 | http://security.mirror.invalid/debian-security trixie-security/main amd64 Packages
   openssl | 3.5.1-1 | http://mirror.invalid/debian trixie/main amd64 Packages
      curl | 8.14.1-2+deb13u2 | http://mirror.invalid/debian trixie-updates/main amd64 Packages
      curl | 8.14.1-2 | http://mirror.invalid/debian trixie/main amd64 Packages
     tzdata | 2025b-4+deb13u1 | http://mirror.invalid/debian trixie/main amd64 Packages
     tzdata | 2025b-4+deb13u1 | http://security.mirror.invalid/debian-security trixie-security/main amd64 Packages
      less | 668-1 | http://mirror.invalid/debian trixie/main amd64 Packages
      less | 668-1 | http://mirror.invalid/debian trixie/main Sources
`)
	served := parseMadison(madison)
	suites := Sources{Suite: "trixie"}.Suites()
	for _, tc := range []struct {
		p    Package
		want string
	}{
		{Package{Name: "openssl", Version: "3.5.1-1+deb13u1"}, "trixie-security"},
		{Package{Name: "openssl", Version: "3.5.1-1"}, "trixie"},
		{Package{Name: "curl", Version: "8.14.1-2+deb13u2"}, "trixie-updates"},
		{Package{Name: "tzdata", Version: "2025b-4+deb13u1"}, "trixie"},
		{Package{Name: "less", Version: "668-1"}, "trixie"},
		{Package{Name: "less", Version: "669-1"}, ""},
	} {
		if got := suiteOf(served, tc.p, suites); got != tc.want {
			t.Errorf("suiteOf(%s) = %q, want %q", tc.p, got, tc.want)
		}
	}
}

// TestHaveLists: lists fetched before stand in for an unreachable mirror
// only when they hold every suite, the security suite too.
func TestHaveLists(t *testing.T) {
	a := &Apt{Sources: Sources{Suite: "trixie", Mirror: "http://mirror.invalid/debian", SecurityMirror: "http://security.mirror.invalid/debian-security"}, Dir: t.TempDir()}
	lists := filepath.Join(a.root(), "lists")
	if err := os.MkdirAll(lists, 0o755); err != nil {
		t.Fatal(err)
	}
	touch := func(name string) {
		if err := os.WriteFile(filepath.Join(lists, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	touch("mirror.invalid_debian_dists_trixie_main_binary-amd64_Packages")
	touch("mirror.invalid_debian_dists_trixie-updates_main_binary-amd64_Packages")
	if a.haveLists() {
		t.Error("lists without trixie-security stood in for the mirrors")
	}
	touch("security.mirror.invalid_debian-security_dists_trixie-security_main_binary-amd64_Packages.lz4")
	if !a.haveLists() {
		t.Error("lists of every suite did not stand in for the mirrors")
	}
	other := &Apt{Sources: Sources{Suite: "trixie", Mirror: a.Mirror, SecurityMirror: "http://other.mirror.invalid/debian-security"}, Dir: a.Dir}
	if other.root() == a.root() {
		t.Error("another security mirror shares the apt folder")
	}
}
