// Package virtbmc runs virtual BMCs for test and developer sites: real BMC
// programs that Ironic drives over a real protocol.
//
// IPMISim is OpenIPMI's ipmi_sim (Debian package openipmi): an IPMI 2.0
// LAN BMC (RMCP+, the lanplus interface Ironic's ipmitool uses) whose
// chassis power and boot device live in a state file. It powers no
// machine: a site whose hosts are booted by hand (a deploy ramdisk in
// QEMU) or not at all is enough to take a BareMetalHost through
// registration and into inspection.
package virtbmc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bootstick/bootstick/internal/command"
)

// IPMISim is a running ipmi_sim.
type IPMISim struct {
	Addr     string // ip:port it listens on (UDP)
	Username string
	password string
	dir      string
	cmd      *exec.Cmd
	done     chan struct{}
}

// chassis answers ipmi_sim's chassis control calls: "MC get power" prints
// power:0|1, "MC set power 1" powers on; the boot device is remembered.
const chassis = `#!/bin/sh
dir=$(dirname "$0")
[ -f "$dir/power" ] || echo 0 >"$dir/power"
[ -f "$dir/boot" ] || echo default >"$dir/boot"
shift # the MC's address
op=$1; shift
case "$op" in
get)
	for item in "$@"; do
		case $item in
		power) echo "power:$(cat "$dir/power")" ;;
		boot) echo "boot:$(cat "$dir/boot")" ;;
		esac
	done ;;
set)
	while [ $# -gt 1 ]; do
		case $1 in
		power) echo "$2" >"$dir/power" ;;
		boot) echo "$2" >"$dir/boot" ;;
		esac
		shift 2
	done ;;
esac
`

// StartIPMISim starts a BMC on ip:port (UDP) with one admin user, its
// files in dir, and waits until it answers. It stops with ctx or Stop.
func StartIPMISim(ctx context.Context, dir, ip string, port int, username, password string) (*IPMISim, error) {
	if _, err := exec.LookPath("ipmi_sim"); err != nil {
		return nil, fmt.Errorf("ipmi_sim is missing (apt-get install openipmi): %w", err)
	}
	if strings.ContainsAny(username+password, "\" \n") {
		return nil, fmt.Errorf("ipmi_sim: the user and password may not hold quotes, spaces or newlines")
	}
	if len(password) > 16 || len(username) > 16 {
		return nil, fmt.Errorf("ipmi_sim: users and passwords of up to 16 bytes (it keeps IPMI 1.5-sized passwords)")
	}
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o700); err != nil {
		return nil, fmt.Errorf("ipmi_sim: %w", err)
	}
	script := filepath.Join(dir, "chassis")
	lan := fmt.Sprintf(`name "bootstick-virtbmc"
set_working_mc 0x20
  startlan 1
    addr %s %d
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  chassis_control "%s 0x20"
  user 2 true "%s" "%s" admin 10 none md2 md5 straight
`, ip, port, script, username, password)
	// One BMC controller (MC 0x20) with IPMI 2.0 and the chassis device.
	emu := "mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02\nmc_enable 0x20\n"
	for name, f := range map[string]struct {
		data string
		mode os.FileMode
	}{"chassis": {chassis, 0o700}, "lan.conf": {lan, 0o600}, "bmc.emu": {emu, 0o600}} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(f.data), f.mode); err != nil {
			return nil, fmt.Errorf("ipmi_sim: %w", err)
		}
	}
	b := &IPMISim{Addr: ip + ":" + strconv.Itoa(port), Username: username, password: password, dir: dir, done: make(chan struct{})}
	log, err := os.Create(filepath.Join(dir, "ipmi_sim.log"))
	if err != nil {
		return nil, fmt.Errorf("ipmi_sim: %w", err)
	}
	defer log.Close()
	b.cmd = exec.Command("ipmi_sim", "-n", "-c", filepath.Join(dir, "lan.conf"), "-f", filepath.Join(dir, "bmc.emu"), "-s", filepath.Join(dir, "state"))
	b.cmd.Stdout, b.cmd.Stderr = log, log
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("ipmi_sim: %w", err)
	}
	go func() {
		_ = b.cmd.Wait()
		close(b.done)
	}()
	go func() {
		select {
		case <-ctx.Done():
			b.Stop()
		case <-b.done:
		}
	}()
	if err := b.waitAnswers(ctx); err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}

// Power reports whether the BMC's machine is on, from its state file.
func (b *IPMISim) Power() (bool, error) {
	data, err := os.ReadFile(filepath.Join(b.dir, "power"))
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(data)) == "1", nil
}

// BootDevice is what Ironic last set ("pxe", "disk", ...; "default").
func (b *IPMISim) BootDevice() string {
	data, _ := os.ReadFile(filepath.Join(b.dir, "boot"))
	return strings.TrimSpace(string(data))
}

// waitAnswers asks the BMC its power state until it answers.
func (b *IPMISim) waitAnswers(ctx context.Context) error {
	host, port, _ := strings.Cut(b.Addr, ":")
	pw := filepath.Join(b.dir, "password")
	if err := os.WriteFile(pw, []byte(b.password), 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := command.Output(ctx, command.Options{}, "ipmitool", "-I", "lanplus", "-H", host, "-p", port,
			"-U", b.Username, "-f", pw, "-R", "1", "-N", "1", "chassis", "power", "status")
		if err == nil {
			return nil
		}
		select {
		case <-b.done:
			log, _ := os.ReadFile(filepath.Join(b.dir, "ipmi_sim.log"))
			return fmt.Errorf("ipmi_sim exited: %s", command.Tail(string(log), 10))
		case <-ctx.Done():
			return fmt.Errorf("ipmi_sim on %s does not answer: %w", b.Addr, err)
		case <-tick.C:
		}
	}
}

// Stop ends the BMC.
func (b *IPMISim) Stop() {
	if b.cmd.Process != nil {
		_ = b.cmd.Process.Kill()
	}
	<-b.done
}
