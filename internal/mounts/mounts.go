// Package mounts reads this process's mount table (/proc/self/mountinfo):
// the one parser of it in bootstick.
package mounts

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Mount is one line of mountinfo.
type Mount struct {
	Device string // major:minor
	Point  string // the mount point, unescaped
	FSType string
	Source string // the mounted device or source, unescaped
}

// List reads the mount table.
func List() ([]Mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	return Parse(string(data)), nil
}

// Parse parses mountinfo text.
func Parse(data string) []Mount {
	var out []Mount
	for _, line := range strings.Split(data, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		m := Mount{Device: f[2], Point: Unescape(f[4])}
		for i := 6; i+2 < len(f); i++ {
			if f[i] == "-" {
				m.FSType, m.Source = f[i+1], Unescape(f[i+2])
				break
			}
		}
		out = append(out, m)
	}
	return out
}

// At returns what is mounted at dir (the last mount there wins).
func At(dir string) (Mount, bool) {
	list, _ := List()
	var found Mount
	ok := false
	for _, m := range list {
		if m.Point == dir {
			found, ok = m, true
		}
	}
	return found, ok
}

// Mounted reports whether something is mounted at dir.
func Mounted(dir string) bool {
	_, ok := At(dir)
	return ok
}

// Under lists the mount points at or below any of dirs, deepest first.
func Under(dirs ...string) ([]string, error) {
	list, err := List()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range list {
		for _, d := range dirs {
			if d != "" && (m.Point == d || strings.HasPrefix(m.Point, strings.TrimSuffix(d, "/")+"/")) {
				out = append(out, m.Point)
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// Unescape undoes mountinfo's octal escapes (\040 for a space...).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
