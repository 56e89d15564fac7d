// Package testctx gives a long test a context that ends before go test's
// own -timeout does. A -timeout panic runs no cleanup: it prints a
// goroutine dump and leaves the test's machines, namespaces and host-mode
// cluster running. A test whose context ends first fails in words, and its
// cleanups (a firstboot reset, a site's Close) still have time to run.
package testctx

import (
	"context"
	"time"
)

// Reserve is the time kept back from go test's -timeout for a journey's
// cleanups: a host-mode reset and a virtual site's Close take a minute or
// two on a loaded machine.
const Reserve = 4 * time.Minute

// T is the part of *testing.T that New uses.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Deadline() (time.Time, bool)
}

// New returns a context that ends after want, or Reserve before the test
// binary's deadline, whichever comes first. It fails the test at once
// when the deadline would leave it less than a minute.
func New(t T, want time.Duration) (context.Context, context.CancelFunc) {
	t.Helper()
	end, limited := ends(t, want)
	if left := time.Until(end); limited && left < time.Minute {
		t.Fatalf("only %s is left of go test's -timeout (%s kept for cleanups): raise the package's -timeout", left.Round(time.Second), Reserve)
	}
	return context.WithDeadline(context.Background(), end)
}

// ends is when a context of New(t, want) ends, and whether go test's
// -timeout, not want, set it.
func ends(t T, want time.Duration) (time.Time, bool) {
	end := time.Now().Add(want)
	if d, ok := t.Deadline(); ok && d.Add(-Reserve).Before(end) {
		return d.Add(-Reserve), true
	}
	return end, false
}
