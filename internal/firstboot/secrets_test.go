package firstboot

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/status"
)

// A kubeadm that fails after printing the bootstrap token (and a
// certificate key and a private key): the token reaches neither the state
// file, nor the console banner, nor the log (the journal); the whole
// output is kept in a log file only root can read.
func TestKubeadmSecretsStayOutOfStateConsoleAndJournal(t *testing.T) {
	const token = "q8w7e6.r5t4y3u2i1o0p9a8"
	const certKey = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	bin := t.TempDir()
	script := "#!/bin/sh\n" +
		"echo '[bootstrap-token] Using token: " + token + "'\n" +
		"echo 'kubeadm join 10.0.0.1:6443 --token " + token + " --certificate-key " + certKey + "'\n" +
		"echo '-----BEGIN RSA PRIVATE KEY-----'; echo 'MIIEowIBAAKCAQEAtopsecret'; echo '-----END RSA PRIVATE KEY-----'\n" +
		"echo 'error execution phase addon/coredns: timed out' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "kubeadm"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	p := defaultPaths(data)
	n := &node{opts: runOptions{binDir: bin}, paths: p}
	console := &status.Console{Path: filepath.Join(t.TempDir(), "bootstick.issue")}
	var journal bytes.Buffer
	ctx := logctx.With(context.Background(), slog.New(slog.NewTextHandler(&journal, &slog.HandlerOptions{Level: slog.LevelDebug})))
	step := pipeline.Step{Name: "kubeadm-init", Run: func(ctx context.Context, pc *pipeline.Context) error {
		return runKubeadm(ctx, n, "init", "--config=/dev/null")
	}}
	r := &pipeline.Runner{Dir: p.State, Steps: []pipeline.Step{step}, Observer: console}
	err := r.Run(ctx)
	if err == nil {
		t.Fatal("the run did not fail")
	}
	state, _ := os.ReadFile(pipeline.StatePath(p.State))
	banner, _ := os.ReadFile(console.Path)
	logFile := filepath.Join(p.commandLogs(), "kubeadm.log")
	whole, _ := os.ReadFile(logFile)
	for what, text := range map[string]string{"the error": err.Error(), "state.json": string(state), "the console banner": string(banner), "the journal": journal.String()} {
		for _, secret := range []string{token, certKey, "topsecret"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s carries a secret (%s):\n%s", what, secret, text)
			}
		}
	}
	if !strings.Contains(string(state), "timed out") || !strings.Contains(err.Error(), logFile) {
		t.Errorf("the failure does not say what failed and where the whole output is:\n%s", state)
	}
	if !strings.Contains(string(whole), token) {
		t.Error("the command log lacks kubeadm's whole output")
	}
	for _, f := range []string{pipeline.StatePath(p.State), logFile} {
		fi, err := os.Stat(f)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", f, fi.Mode().Perm(), err)
		}
	}
}
