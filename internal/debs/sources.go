package debs

import (
	"errors"
	"fmt"
	"strings"
)

// Sources are where a Debian suite's packages come from, as on an
// installed Debian system: the suite and its -updates at Mirror, its
// -security at SecurityMirror (the security archive lives apart). Apt
// takes the highest version any of them serves.
type Sources struct {
	Suite  string `json:"suite"`
	Mirror string `json:"mirror"`
	// SecurityMirror serves Suite-security; empty for a suite that has
	// none (HasUpdates).
	SecurityMirror string `json:"securityMirror,omitempty"`
}

// HasUpdates reports whether the archive has -updates and -security
// suites for suite: the releases do; unstable, experimental and the
// update suites themselves do not.
func HasUpdates(suite string) bool {
	switch suite {
	case "sid", "unstable", "experimental", "rc-buggy":
		return false
	}
	for _, s := range []string{"-updates", "-security", "-backports", "-backports-sloppy", "-proposed-updates"} {
		if strings.HasSuffix(suite, s) {
			return false
		}
	}
	return true
}

// Complete fills the mirrors s leaves empty from mirror (the mirror of a
// suite, e.g. from the build host's apt configuration): Mirror from
// mirror(s.Suite), SecurityMirror from mirror(s.Suite+"-security").
func (s Sources) Complete(mirror func(suite string) (string, error)) (Sources, error) {
	var err error
	if s.Mirror == "" {
		if s.Mirror, err = mirror(s.Suite); err != nil {
			return s, err
		}
	}
	if s.SecurityMirror == "" && HasUpdates(s.Suite) {
		if s.SecurityMirror, err = mirror(s.Suite + "-security"); err != nil {
			return s, err
		}
	}
	return s, nil
}

// Suites are the suites read, the base suite first.
func (s Sources) Suites() []string {
	if !HasUpdates(s.Suite) {
		return []string{s.Suite}
	}
	return []string{s.Suite, s.Suite + "-updates", s.Suite + "-security"}
}

// check fails when a mirror is missing: a build must never quietly go
// without the security suite.
func (s Sources) check() error {
	switch {
	case s.Suite == "":
		return errors.New("no Debian suite given")
	case s.Mirror == "":
		return fmt.Errorf("no Debian mirror given for %s", s.Suite)
	case HasUpdates(s.Suite) && s.SecurityMirror == "":
		return fmt.Errorf("no Debian security mirror given for %s-security", s.Suite)
	}
	return nil
}

// Lines are apt's one-line sources for the suites, of components (main
// when none), each verified with the Debian archive keyring.
func (s Sources) Lines(components []string) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	comps := "main"
	if len(components) > 0 {
		comps = strings.Join(components, " ")
	}
	var out []string
	for _, suite := range s.Suites() {
		uri := s.Mirror
		if strings.HasSuffix(suite, "-security") {
			uri = s.SecurityMirror
		}
		out = append(out, fmt.Sprintf("deb [signed-by=%s] %s %s %s", Keyring, uri, suite, comps))
	}
	return out, nil
}

// String names the suites and mirrors, for messages (the suite alone when
// there is no security mirror: a lock made before the updates were read).
func (s Sources) String() string {
	if !HasUpdates(s.Suite) || s.SecurityMirror == "" {
		return s.Suite + " from " + s.Mirror
	}
	return fmt.Sprintf("%s and %s-updates from %s, %s-security from %s", s.Suite, s.Suite, s.Mirror, s.Suite, s.SecurityMirror)
}
