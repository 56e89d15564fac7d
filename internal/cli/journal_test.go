package cli

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestPriorityHandler(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(newPriorityHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})).With("step", "kubeadm-init")
	log.Debug("detail")
	log.Info("step kubeadm-init (6/11): done in 5m1s")
	log.Warn("left out a Deployment")
	log.Error("failed")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{"<7>", "<5>", "<4>", "<3>"}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines:\n%s", len(lines), b.String())
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, want[i]+"time=") || !strings.Contains(l, "step=kubeadm-init") {
			t.Errorf("line %d: %q, want prefix %s and the step attribute", i, l, want[i])
		}
	}
	if stderrIsJournal(&b) {
		t.Error("a buffer is not the journal")
	}
}
