package command

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunFailureCarriesARedactedTail(t *testing.T) {
	log := filepath.Join(t.TempDir(), "logs", "kubeadm.log")
	token := "abcdef.0123456789abcdef"
	key := strings.Repeat("a1", 32)
	script := `for i in $(seq 1 40); do echo line $i; done
echo "kubeadm join 10.0.0.1:6443 --token ` + token + ` --discovery-token-ca-cert-hash sha256:00"
echo "Using certificate key: ` + key + `"
echo "-----BEGIN PRIVATE KEY-----"; echo MIIEvQ; echo "-----END PRIVATE KEY-----"
exit 3`
	_, err := Run(context.Background(), Options{Log: log, Tail: 8}, "sh", "-c", script)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("Run = %v, want a *command.Error", err)
	}
	msg := err.Error()
	for _, secret := range []string{token, key, "MIIEvQ"} {
		if strings.Contains(msg, secret) {
			t.Errorf("the error carries secret %q:\n%s", secret, msg)
		}
	}
	if strings.Contains(msg, "line 5\n") || !strings.Contains(msg, "line 40") || !strings.Contains(msg, "exit status 3") {
		t.Errorf("the error is not the short tail with the exit status:\n%s", msg)
	}
	fi, err := os.Stat(log)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("log mode %v, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(log)
	if !strings.Contains(string(data), "line 1\n") || !strings.Contains(string(data), "line 40") {
		t.Errorf("the log lacks the whole output:\n%s", data)
	}
}

func TestRunSuccessReturnsTheOutput(t *testing.T) {
	out, err := Run(context.Background(), Options{}, "sh", "-c", "echo hello")
	if err != nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("Run = %q, %v", out, err)
	}
}

func TestOutputKeepsStdoutApartAndTheExitCode(t *testing.T) {
	out, err := Output(context.Background(), Options{}, "sh", "-c", "echo out; echo err >&2; exit 2")
	if string(out) != "out\n" {
		t.Errorf("stdout %q, want only the standard output", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(err.Error(), "err") {
		t.Errorf("error %v: want exit code 2 reachable and stderr in the tail", err)
	}
}
