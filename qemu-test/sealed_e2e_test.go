//go:build e2e

package qemutest

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/testctx"
)

// blankStickRefused is firstboot's error when the data disk's key is on
// another stick (package datadisk).
var blankStickRefused = regexp.MustCompile(`this stick's key slot is blank: boot from that stick`)

// stickUnlocked is the data disk's unlock with the stick's key, in the
// journal.
var stickUnlocked = regexp.MustCompile(`unlocked the data disk with the key on the boot stick.* took=(\S+)`)

// TestSealedStickKey is issue 27's machine without a TPM: the dd'd stick
// keeps the data disk's key in its key slot (package stickkey).
//   - The first boot makes the data disk LUKS2, its key on the stick, and
//     status says so; the disk's image then holds no secret in clear.
//   - The next boot with the same stick unlocks it with nothing typed (the
//     machine's own SSH host key, kept on the disk, shows it).
//   - The disk with another stick of the same build (a blank key slot) is
//     refused, saying which stick opens it.
func TestSealedStickKey(t *testing.T) {
	ctx, cancel := testctx.New(t, 45*time.Minute)
	defer cancel()
	s := stickFor(t, ctx)
	run := NewRun(t, "stick-key")
	run.TPM, run.Stick = "", filepath.Join(run.Dir, "stick.qcow2")

	m := run.Boot(ctx, s, ColdMode, "boot1")
	if _, err := m.WaitConsole(ctx, stepRan("data-disk"), bootBudget+5*time.Minute); err != nil {
		run.Fatalf("stick key, first boot: %v", err)
	}
	rep, err := m.Status(ctx)
	if err != nil {
		run.Fatalf("stick key: firstboot status: %v", err)
	}
	if !strings.HasPrefix(rep.DataDisk, "LUKS2 on /dev/") || !strings.Contains(rep.DataDisk, "its key on the boot stick") {
		run.Errorf("stick key: firstboot status shows the data disk as %q, want LUKS2 with its key on the boot stick", rep.DataDisk)
	}
	var hostKey []secretFile
	for _, f := range secretFiles {
		if strings.Contains(f.path, "ssh-host-keys") {
			hostKey = append(hostKey, f)
		}
	}
	secrets, errs := m.ReadSecrets(ctx, hostKey)
	for _, err := range errs {
		run.Errorf("stick key: %v", err)
	}
	flushAndCut(t, ctx, m)
	searchDisk(t, run, secrets)

	m2 := run.Boot(ctx, s, ColdMode, "boot2")
	if _, err := m2.Connect(ctx, bootBudget); err != nil {
		run.Fatalf("stick key: the same stick, the next boot: %v", err)
	}
	journal, err := m2.Run(ctx, "journalctl -b -o cat --no-pager | grep -F 'unlocked the data disk' || true")
	if mt := stickUnlocked.FindStringSubmatch(journal); err != nil || mt == nil {
		run.Errorf("stick key: the journal does not say the stick's key unlocked the data disk (%v):\n%s", err, journal)
	} else {
		run.record(fmt.Sprintf("stick key: unlocking the data disk with the stick's key at boot took %s (TCG)", mt[1]))
	}
	m2.PowerCut()

	other := run.BootWith(ctx, s, BootOptions{Mode: ColdMode, StickOverlay: filepath.Join(run.Dir, "other-stick.qcow2")}, "other-stick")
	l, err := other.WaitConsole(ctx, blankStickRefused, bootBudget+5*time.Minute)
	if err != nil {
		run.Fatalf("stick key: the data disk with another stick: %v", err)
	}
	t.Logf("stick key: another stick, %s after power-on: %s", l.At.Round(time.Second), strings.TrimSpace(l.Text))
	other.PowerCut()
}

// otherTPMRefused is firstboot's error when the data disk's key is sealed
// to a TPM this machine does not have (package luks).
var otherTPMRefused = regexp.MustCompile(`this TPM does not unseal its key`)

// TestSealedOtherTPM is issue 27's stolen disk: a data disk sealed to one
// machine's TPM, put in a machine with another TPM, does not unseal, and
// firstboot says why and what to do. (make test's TestColdBoot proves the
// same disk unseals in its own machine.)
func TestSealedOtherTPM(t *testing.T) {
	ctx, cancel := testctx.New(t, 30*time.Minute)
	defer cancel()
	s := stickFor(t, ctx)
	run := NewRun(t, "other-tpm")

	m := run.Boot(ctx, s, ColdMode, "boot1")
	if _, err := m.WaitConsole(ctx, stepRan("data-disk"), bootBudget+5*time.Minute); err != nil {
		run.Fatalf("other TPM, first boot: %v", err)
	}
	for _, err := range m.CheckSealed(ctx) {
		run.Errorf("other TPM, first boot: %v", err)
	}
	flushAndCut(t, ctx, m)

	other := run.BootWith(ctx, s, BootOptions{Mode: ColdMode, TPMState: filepath.Join(run.Dir, "tpm-other")}, "other-tpm")
	l, err := other.WaitConsole(ctx, otherTPMRefused, bootBudget)
	if err != nil {
		run.Fatalf("other TPM: the data disk in a machine with another TPM: %v", err)
	}
	t.Logf("other TPM: %s after power-on: %s", l.At.Round(time.Second), strings.TrimSpace(l.Text))
	other.PowerCut()
}
