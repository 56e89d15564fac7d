package vsite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// startVBMC writes one virtualbmc configuration per IPMI machine (its own
// files, 0600: no password on a command line) and runs vbmcd in the
// namespace, which starts every BMC marked active. A site with no IPMI
// machine runs no vbmcd.
func (s *Site) startVBMC(ctx context.Context) error {
	dir := filepath.Join(s.opts.Dir, "vbmc")
	os.RemoveAll(dir)
	var ipmi []Machine
	for _, m := range s.opts.Machines {
		if m.BMC == BMCIPMI {
			ipmi = append(ipmi, m)
		}
	}
	if len(ipmi) == 0 {
		return nil
	}
	for _, m := range ipmi {
		if strings.ContainsAny(m.BMCUser+m.BMCPassword, "\n\r%") {
			return fmt.Errorf("machine %s: the BMC's user name or password holds a newline or %%", m.Name)
		}
		if err := os.MkdirAll(filepath.Join(dir, m.Name), 0o700); err != nil {
			return fmt.Errorf("virtualbmc: %w", err)
		}
		conf := fmt.Sprintf("[VirtualBMC]\nusername = %s\npassword = %s\naddress = %s\nport = %d\ndomain_name = %s\nlibvirt_uri = %s\nactive = True\n",
			m.BMCUser, m.BMCPassword, s.bmcAddr(m), m.BMCPort, m.Name, s.uri())
		if err := os.WriteFile(filepath.Join(dir, m.Name, "config"), []byte(conf), 0o600); err != nil {
			return fmt.Errorf("virtualbmc: %w", err)
		}
	}
	main := filepath.Join(s.opts.Dir, "virtualbmc.conf")
	conf := fmt.Sprintf("[default]\nconfig_dir = %s\npid_file = %s\nserver_port = 50891\n[log]\nlogfile = %s\n",
		dir, filepath.Join(s.opts.Dir, "vbmcd.pid"), filepath.Join(s.opts.Dir, "vbmcd.log"))
	if err := os.WriteFile(main, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("virtualbmc: %w", err)
	}
	os.Remove(filepath.Join(s.opts.Dir, "vbmcd.pid"))
	d, err := startDaemon("vbmcd", filepath.Join(s.opts.Dir, "vbmcd.out"), []string{"VIRTUALBMC_CONFIG=" + main},
		"ip", "netns", "exec", s.opts.Netns, "vbmcd", "--foreground")
	if err != nil {
		return err
	}
	s.vbmc = d
	// vbmcd logs each BMC it starts.
	return d.wait(ctx, time.Minute, func() bool {
		data, _ := os.ReadFile(filepath.Join(s.opts.Dir, "vbmcd.log"))
		for _, m := range ipmi {
			if !strings.Contains(string(data), "Started vBMC instance for domain "+m.Name+"\n") {
				return false
			}
		}
		return true
	})
}
