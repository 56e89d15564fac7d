package qemutest

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// flushAndCut writes everything the guest holds to its disks (sync), then
// pulls the plug: the data disk's image holds all the guest wrote, without
// the minutes an ACPI power-off of a busy cluster takes under TCG.
func flushAndCut(t *testing.T, ctx context.Context, m *Machine) {
	if out, err := m.Run(ctx, "sync"); err != nil {
		t.Errorf("sealed: sync in the guest: %v\n%s", err, out)
	}
	m.PowerCut()
}

// searchDisk fails the run when the data disk's image, read here with its
// machine off, holds any of the secrets.
func searchDisk(t *testing.T, run *Run, secrets []secret) {
	found, scanned, err := SearchDisk(run.DataDisk, secrets)
	if err != nil {
		run.Fatalf("sealed: reading the data disk's image: %v", err)
	}
	var names []string
	for _, s := range secrets {
		names = append(names, s.what)
	}
	t.Logf("sealed: read %d MiB of the data disk's image on this machine, looking for %d secrets (%s)", scanned>>20, len(secrets), strings.Join(names, ", "))
	for _, f := range found {
		run.Errorf("sealed: the data disk's image holds %s (%s) in clear", f.what, f.path)
	}
}

// unsealTook is the data disk's unlock on a later boot, in the journal.
var unsealTook = regexp.MustCompile(`unsealed the data disk's key with the TPM and unlocked it.* took=(\S+)`)

// sealedScenarios follow scenario 1 in make test: its data disk keeps the
// secrets sealed (issue 27's Sealed journey).
//   - The machine flushes its disks and powers off, and its data disk's image, read here, holds
//     none of the secrets the guest showed.
//   - The same disk back in its own machine unseals on its own, with the
//     machine's own SSH host key (kept on the disk).
//
// The same disk in a machine with another TPM is make e2e's
// (TestSealedOtherTPM): a boot of its own, kept out of make test's budget.
func sealedScenarios(t *testing.T, ctx context.Context, s *Stick, run *Run, m1 *Machine) {
	for _, err := range m1.CheckSealed(ctx) {
		run.Errorf("sealed: %v", err)
	}
	secrets, errs := m1.ReadSecrets(ctx, secretFiles)
	for _, err := range errs {
		run.Errorf("sealed: %v", err)
	}
	flushAndCut(t, ctx, m1)
	searchDisk(t, run, secrets)

	m := run.Boot(ctx, s, ColdMode, "unseal")
	if _, err := m.Connect(ctx, bootBudget); err != nil {
		run.Fatalf("sealed: the data disk back in its own machine: %v", err)
	}
	for _, err := range m.CheckSealed(ctx) {
		run.Errorf("sealed, after the reboot: %v", err)
	}
	journal, err := m.Run(ctx, "journalctl -b -o cat --no-pager | grep -F 'unsealed the data disk' || true")
	if err != nil {
		run.Errorf("sealed: the journal: %v", err)
	} else if mt := unsealTook.FindStringSubmatch(journal); mt == nil {
		run.Errorf("sealed: the journal does not say the data disk was unsealed on this boot:\n%s", journal)
	} else {
		d, _ := time.ParseDuration(mt[1])
		t.Logf("sealed: the reboot unsealed the data disk with the TPM in %s", d)
		run.record(fmt.Sprintf("sealed: unsealing the data disk at boot took %s (TCG)", d))
	}
	m.PowerCut()
}
