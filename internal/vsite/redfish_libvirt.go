package vsite

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// libvirtMachine drives a site's domain for its Redfish BMC, through
// virsh: power from domstate, start, destroy, shutdown, reboot and
// inject-nmi; the boot override and the CD in the domain's persistent
// definition (its inactive XML), where the next power-on reads them.
type libvirtMachine struct {
	s *Site
	m Machine
}

func (l *libvirtMachine) xml(ctx context.Context, inactive bool) (*xmlNode, error) {
	args := []string{"dumpxml", "--security-info", l.m.Name}
	if inactive {
		args = append(args, "--inactive")
	}
	out, err := l.s.virsh(ctx, args...)
	if err != nil {
		return nil, err
	}
	return parseDomainXML(out)
}

func (l *libvirtMachine) running(ctx context.Context) (bool, error) {
	st, err := l.s.PowerState(ctx, l.m.Name)
	if err != nil {
		return false, err
	}
	switch st {
	case "shut off", "crashed", "":
		return false, nil
	}
	return true, nil // running, paused, in shutdown, idle, pmsuspended
}

func (l *libvirtMachine) State(ctx context.Context) (machineState, error) {
	on, err := l.running(ctx)
	if err != nil {
		return machineState{}, err
	}
	dom, err := l.xml(ctx, true)
	if err != nil {
		return machineState{}, err
	}
	st := machineState{
		UUID:       dom.text("uuid"),
		PowerOn:    on,
		BootTarget: dom.bootTarget(),
		UEFI:       dom.uefi(),
		MACs:       dom.macs(),
		DiskBytes:  int64(l.m.DiskGiB) << 30,
	}
	st.CPUs, _ = strconv.Atoi(dom.text("vcpu"))
	if mem := dom.child("memory"); mem != nil {
		kib, _ := strconv.Atoi(strings.TrimSpace(mem.Text))
		if u := mem.attr("unit"); u == "" || u == "KiB" {
			st.MemoryMiB = kib / 1024
		}
	}
	if _, file, err := dom.cdrom(); err == nil {
		st.Media = file
	}
	if dom.secureBootCapable() {
		vars, template := dom.nvram()
		st.SecureBootCapable = true
		st.SecureBoot = template == ovmfSecureBootVars
		st.SecureBootCurrent = varsTemplate(vars) == ovmfSecureBootVars
	}
	return st, nil
}

// SetSecureBoot names the variables template of the setting (Microsoft's
// keys, or none) in the domain's definition; the machine's variables are
// made again from it when it next starts (Reset).
func (l *libvirtMachine) SetSecureBoot(ctx context.Context, on bool) error {
	dom, err := l.xml(ctx, true)
	if err != nil {
		return err
	}
	if !dom.secureBootCapable() {
		return fmt.Errorf("the machine's firmware has no Secure Boot")
	}
	template := ovmfVars
	if on {
		template = ovmfSecureBootVars
	}
	if err := dom.setNVRAMTemplate(template); err != nil {
		return err
	}
	return l.define(ctx, dom)
}

// varsPending is the variables file and its template when a Secure Boot
// change waits for the machine's next start; "" when none does.
func (l *libvirtMachine) varsPending(ctx context.Context) (file, template string, err error) {
	dom, err := l.xml(ctx, true)
	if err != nil {
		return "", "", err
	}
	file, template = dom.nvram()
	if !dom.secureBootCapable() || file == "" || varsTemplate(file) == template {
		return "", "", nil
	}
	return file, template, nil
}

func (l *libvirtMachine) Reset(ctx context.Context, resetType string) (started bool, err error) {
	on, err := l.running(ctx)
	if err != nil {
		return false, err
	}
	var steps [][]string
	switch resetType {
	case "On", "ForceOn":
		if !on {
			steps = [][]string{{"start"}}
		}
	case "ForceOff":
		if on {
			steps = [][]string{{"destroy"}}
		}
	case "GracefulShutdown":
		if on {
			steps = [][]string{{"shutdown"}}
		}
	case "GracefulRestart":
		steps = [][]string{{"start"}}
		if on {
			steps = [][]string{{"reboot"}}
		}
	case "ForceRestart":
		steps = [][]string{{"start"}}
		if on {
			steps = [][]string{{"destroy"}, {"start"}}
		}
	case "Nmi":
		if on {
			steps = [][]string{{"inject-nmi"}}
		}
	default:
		return false, fmt.Errorf("reset type %q is not supported", resetType)
	}
	// A Secure Boot change applies when the machine starts: its
	// variables are made afresh from the template of the new setting, as
	// a server's firmware takes the change at its next boot. A reboot of
	// a running machine keeps its QEMU and so its variables: with a
	// change waiting, it is a power cycle instead.
	vars, template, err := l.varsPending(ctx)
	if err != nil {
		return false, err
	}
	if vars != "" && len(steps) == 1 && steps[0][0] == "reboot" {
		steps = [][]string{{"destroy"}, {"start"}}
	}
	for _, st := range steps {
		if st[0] == "start" && vars != "" {
			if err := resetVars(template, vars); err != nil {
				return false, fmt.Errorf("Secure Boot: the machine's UEFI variables: %w", err)
			}
		}
		if _, err := l.s.virsh(ctx, append(st, l.m.Name)...); err != nil {
			return false, err
		}
		started = started || st[0] == "start"
	}
	return started, nil
}

func (l *libvirtMachine) SetBootTarget(ctx context.Context, target string) error {
	dom, err := l.xml(ctx, true)
	if err != nil {
		return err
	}
	if err := dom.setBootTarget(target); err != nil {
		return err
	}
	return l.define(ctx, dom)
}

// define makes dom the domain's persistent definition.
func (l *libvirtMachine) define(ctx context.Context, dom *xmlNode) error {
	data, err := dom.marshal()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(l.s.opts.Dir, l.m.Name+".define.*.xml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	_, err = l.s.virsh(ctx, "define", f.Name())
	return err
}

// SetMedia changes the CD in the persistent definition and, when the
// machine runs, in the running machine too (virsh change-media).
func (l *libvirtMachine) SetMedia(ctx context.Context, file string) error {
	on, err := l.running(ctx)
	if err != nil {
		return err
	}
	scopes := []string{"--config"}
	if on {
		scopes = append(scopes, "--live")
	}
	for _, scope := range scopes {
		dom, err := l.xml(ctx, scope == "--config")
		if err != nil {
			return err
		}
		target, cur, err := dom.cdrom()
		if err != nil {
			return err
		}
		args := []string{"change-media", l.m.Name, target}
		switch {
		case file == "" && cur == "":
			continue
		case file == "":
			args = append(args, "--eject", "--force")
		case cur == "":
			args = append(args, file, "--insert")
		default:
			args = append(args, file, "--update")
		}
		if _, err := l.s.virsh(ctx, append(args, scope)...); err != nil {
			return err
		}
	}
	return nil
}
