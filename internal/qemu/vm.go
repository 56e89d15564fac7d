package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/command"
)

// Args is the command line the machine was started with (for logs).
func (vm *VM) Args() []string { return vm.cmd.Args }

// WaitSerial waits until the serial log matches re and returns the match.
// It fails when ctx ends or the machine stops first, with the log's tail.
func (vm *VM) WaitSerial(ctx context.Context, re *regexp.Regexp) (string, error) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		data, _ := os.ReadFile(vm.SerialLog)
		if m := re.Find(data); m != nil {
			return string(m), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("qemu: waiting for %q on the serial console: %w\nlast output:\n%s", re, ctx.Err(), command.Tail(string(data), 25))
		case <-vm.done:
			data, _ = os.ReadFile(vm.SerialLog)
			if m := re.Find(data); m != nil {
				return string(m), nil
			}
			return "", fmt.Errorf("qemu: stopped (%v) before %q showed on the serial console: %s\nlast output:\n%s", vm.waitErr, re, strings.TrimSpace(vm.stderr.String()), command.Tail(string(data), 25))
		case <-tick.C:
		}
	}
}

// Shutdown asks the guest to power off (ACPI) and waits up to timeout, then
// kills the machine.
func (vm *VM) Shutdown(timeout time.Duration) error {
	select {
	case <-vm.done:
		return nil
	default:
	}
	err := vm.qmpCommand("system_powerdown")
	if err == nil {
		select {
		case <-vm.done:
			return nil
		case <-time.After(timeout):
			err = fmt.Errorf("guest did not power off in %s", timeout)
		}
	}
	vm.Kill()
	return fmt.Errorf("qemu: clean shutdown failed, killed: %w", err)
}

// Kill stops the machine at once and waits for it to exit.
func (vm *VM) Kill() {
	select {
	case <-vm.done:
		return
	default:
	}
	_ = vm.qmpCommand("quit")
	select {
	case <-vm.done:
		return
	case <-time.After(3 * time.Second):
	}
	_ = vm.cmd.Process.Kill()
	<-vm.done
}

// ExitStatus says how QEMU ended (its wait status and stderr), or "" while
// it runs.
func (vm *VM) ExitStatus() string {
	select {
	case <-vm.done:
	default:
		return ""
	}
	status := "exit status 0"
	if vm.waitErr != nil {
		status = vm.waitErr.Error()
	}
	if e := strings.TrimSpace(vm.stderr.String()); e != "" {
		status += ": " + e
	}
	return status
}

// Done is closed when the machine has exited.
func (vm *VM) Done() <-chan struct{} { return vm.done }

func (vm *VM) qmpCommand(command string) error {
	c, err := net.DialTimeout("unix", vm.qmp, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if _, err := r.ReadBytes('\n'); err != nil { // greeting
		return err
	}
	for _, cmd := range []string{"qmp_capabilities", command} {
		b, _ := json.Marshal(map[string]string{"execute": cmd})
		if _, err := c.Write(append(b, '\n')); err != nil {
			return err
		}
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				if cmd == "quit" && errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			var resp map[string]json.RawMessage
			if json.Unmarshal(line, &resp) != nil {
				continue
			}
			if e, ok := resp["error"]; ok {
				return fmt.Errorf("qmp %s: %s", cmd, e)
			}
			if _, ok := resp["return"]; ok {
				break
			}
		}
	}
	return nil
}

// terminalEscapes are the control sequences firmware and a Linux console
// write to a serial port: CSI sequences (colour, cursor), character-set
// selection and reset.
var terminalEscapes = regexp.MustCompile(`\x1b\[[0-9;?=]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1bc`)

// ConsoleText is a serial console's text without its terminal escapes.
func ConsoleText(b []byte) string {
	return terminalEscapes.ReplaceAllString(string(b), "")
}
