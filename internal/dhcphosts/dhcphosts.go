// Package dhcphosts keeps the list of machines the provisioning network's
// DHCP server answers: a folder on the data disk that Ironic's dnsmasq
// reads as its dhcp-hostsdir (images/ironic/usr/local/bin/run-dnsmasq),
// with one file per boot MAC, named by it (52-54-00-12-34-56), holding
// one dnsmasq host line: "MAC" (answer it) or "MAC,ignore" (never).
//
// dnsmasq reads a new or changed file of the folder at once (inotify), so
// a host added on day 2 is answered without restarting Ironic. But it
// keeps every record it has read until it restarts or gets SIGHUP: a
// deleted file, or a line taken out of one, would go on answering its MAC.
// So Write never deletes a file: a MAC that no longer belongs to a host is
// rewritten as "MAC,ignore". dnsmasq puts each record it reads ahead of
// those it had and follows the first that matches a MAC, so the newest
// line of a MAC is the one it follows; a dnsmasq that starts reads one
// line per MAC.
package dhcphosts

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bootstick/bootstick/internal/atomicfile"
)

// Host is one machine's line: its MAC (lower case, colon-separated), and
// whether DHCP answers it.
type Host struct {
	MAC    string
	Answer bool
}

// ignore is dnsmasq's word, after the MAC, for a host never answered.
const ignore = ",ignore"

// line is the file's content for h.
func (h Host) line() string {
	if h.Answer {
		return h.MAC + "\n"
	}
	return h.MAC + ignore + "\n"
}

// fileName is the name of the file of a MAC: dnsmasq's log names the
// files it reads, and the MAC in it with dashes is not mistaken for a
// DHCP exchange of that MAC.
func fileName(mac string) string { return strings.ReplaceAll(mac, ":", "-") }

// macOf is the MAC a file name stands for; "" when it stands for none
// (a file Write did not make, a dotfile dnsmasq skips).
func macOf(name string) string {
	mac := strings.ReplaceAll(name, "-", ":")
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 || hw.String() != mac || fileName(mac) != name {
		return ""
	}
	return mac
}

// Write makes the folder dir say hosts: each host's file holds its line,
// and every other file of the folder (a MAC no host has any longer)
// refuses its MAC, or answers it when answerOthers is set (DHCP answers
// every MAC anyway, and one refused earlier, a virtual-media host's, may
// be a machine that boots by PXE now). A file whose line is already
// right is left alone: dnsmasq adds a record each time it sees one
// change. The folder is made when missing, readable by all (dnsmasq
// reads it after it has dropped root). Write returns the lines it
// changed, by MAC.
func Write(dir string, hosts []Host, answerOthers bool) ([]Host, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("DHCP host list: %w", err)
	}
	// Whatever the umask made of it.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("DHCP host list: %w", err)
	}
	have, err := Read(dir)
	if err != nil {
		return nil, err
	}
	want := map[string]Host{}
	for _, h := range have {
		want[h.MAC] = Host{MAC: h.MAC, Answer: answerOthers}
	}
	for _, h := range hosts {
		want[h.MAC] = h
	}
	var changed []Host
	for _, mac := range sortedKeys(want) {
		h := want[mac]
		if slices.Contains(have, h) {
			continue
		}
		if err := atomicfile.Write(filepath.Join(dir, fileName(mac)), []byte(h.line()), 0o644); err != nil {
			return changed, fmt.Errorf("DHCP host list: %w", err)
		}
		changed = append(changed, h)
	}
	return changed, nil
}

// Read returns the lines of the folder dir, by MAC; none when it does
// not exist. Files of other names are left out: Write made none of them.
func Read(dir string) ([]Host, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the DHCP host list: %w", err)
	}
	var out []Host
	for _, e := range entries {
		mac := macOf(e.Name())
		if mac == "" || !e.Type().IsRegular() {
			continue
		}
		h, err := readHost(filepath.Join(dir, e.Name()), mac)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// readHost reads the file of mac at path.
func readHost(path, mac string) (Host, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Host{}, fmt.Errorf("reading the DHCP host list: %w", err)
	}
	switch strings.TrimSpace(string(data)) {
	case mac:
		return Host{MAC: mac, Answer: true}, nil
	case mac + ignore:
		return Host{MAC: mac}, nil
	}
	return Host{}, fmt.Errorf("DHCP host list: %s holds %q, want %q or %q: firstboot writes these files (remove it; firstboot site apply writes it again)",
		path, strings.TrimSpace(string(data)), mac, mac+ignore)
}

func sortedKeys(m map[string]Host) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
