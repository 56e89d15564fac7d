package rootfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Source is one apt source: a URI and its suites.
type Source struct {
	URI    string
	Suites []string
	File   string // where it was found
}

// HostMirror returns the Debian mirror of the host's apt configuration
// under root (normally "/"): the first "deb" source that carries suite, from
// etc/apt/sources.list and then etc/apt/sources.list.d/*.list and *.sources
// in name order. When none carries it, it is the source of the machine's
// own release (VERSION_CODENAME in etc/os-release): a Debian archive
// serves every suite, so a bookworm host builds trixie from its own mirror
// without an apt source for trixie. A security suite lives in the security
// archive: trixie-security falls back to the source of the machine's own
// bookworm-security.
func HostMirror(root, suite string) (string, error) {
	srcs, err := HostSources(root)
	if err != nil {
		return "", err
	}
	find := func(suite string) string {
		for _, s := range srcs {
			for _, su := range s.Suites {
				if su == suite {
					return strings.TrimSuffix(s.URI, "/")
				}
			}
		}
		return ""
	}
	if m := find(suite); m != "" {
		return m, nil
	}
	own := osCodename(root)
	if own != "" && strings.HasSuffix(suite, "-security") {
		own += "-security"
	}
	if m := find(own); m != "" {
		return m, nil
	}
	return "", noSource(root, suite, own)
}

// noSource says that the apt configuration under root has no source of
// suite, nor of own (the machine's release, or its -security), and what
// to do.
func noSource(root, suite, own string) error {
	nor := ""
	if own != "" {
		nor = fmt.Sprintf(" (nor for this machine's %q)", own)
	}
	give := "mirror (a bundle's os.mirror)"
	if strings.HasSuffix(suite, "-security") {
		give = "security mirror (a bundle's os.securityMirror)"
	}
	return fmt.Errorf("no apt source for suite %q%s in %s or %s: add one there, or give the %s",
		suite, nor, filepath.Join(root, "etc/apt/sources.list"), filepath.Join(root, "etc/apt/sources.list.d"), give)
}

// osCodename is VERSION_CODENAME of root/etc/os-release, or "".
func osCodename(root string) string {
	data, err := os.ReadFile(filepath.Join(root, "etc/os-release"))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VERSION_CODENAME="); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return ""
}

// HostSources lists the enabled "deb" sources of the apt configuration
// under root.
func HostSources(root string) ([]Source, error) {
	var out []Source
	main := filepath.Join(root, "etc/apt/sources.list")
	if data, err := os.ReadFile(main); err == nil {
		out = append(out, parseList(main, data)...)
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("reading apt sources %s: %w", main, err)
	}
	dir := filepath.Join(root, "etc/apt/sources.list.d")
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("reading apt sources %s: %w", dir, err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, n)
		switch filepath.Ext(n) {
		case ".list", ".sources":
		default:
			continue // apt ignores other names (e.g. *.disabled)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading apt sources %s: %w", p, err)
		}
		if filepath.Ext(n) == ".list" {
			out = append(out, parseList(p, data)...)
		} else {
			out = append(out, parseDeb822(p, data)...)
		}
	}
	return out, nil
}

// parseList reads one-line style sources: "deb [options] URI suite comp...".
func parseList(file string, data []byte) []Source {
	var out []Source
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") {
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) > 0 {
				f = f[1:]
			}
		}
		if len(f) < 2 {
			continue
		}
		out = append(out, Source{URI: f[0], Suites: []string{f[1]}, File: file})
	}
	return out
}

// parseDeb822 reads deb822 style sources (stanzas of "Key: value").
func parseDeb822(file string, data []byte) []Source {
	var out []Source
	for _, stanza := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n\n") {
		fields := map[string]string{}
		last := ""
		for _, line := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") || strings.TrimSpace(line) == "" {
				continue
			}
			if (line[0] == ' ' || line[0] == '\t') && last != "" {
				fields[last] += " " + strings.TrimSpace(line)
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
		if strings.EqualFold(fields["enabled"], "no") {
			continue
		}
		isDeb := false
		for _, t := range strings.Fields(fields["types"]) {
			if t == "deb" {
				isDeb = true
			}
		}
		if !isDeb {
			continue
		}
		for _, uri := range strings.Fields(fields["uris"]) {
			out = append(out, Source{URI: uri, Suites: strings.Fields(fields["suites"]), File: file})
		}
	}
	return out
}
