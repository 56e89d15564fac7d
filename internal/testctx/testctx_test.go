package testctx

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

type fakeT struct {
	deadline time.Time
	fatal    string
}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Fatalf(format string, a ...any) { f.fatal = fmt.Sprintf(format, a...) }
func (f *fakeT) Deadline() (time.Time, bool)    { return f.deadline, !f.deadline.IsZero() }

func TestNew(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name     string
		deadline time.Time // zero: no -timeout
		want     time.Duration
		end      time.Time
		limited  bool
		fatal    string
	}{
		{"no -timeout: the wait's own", time.Time{}, 30 * time.Minute, now.Add(30 * time.Minute), false, ""},
		{"a short wait, no -timeout: the wait's own", time.Time{}, 10 * time.Second, now.Add(10 * time.Second), false, ""},
		{"-timeout far away: the wait's own", now.Add(2 * time.Hour), 30 * time.Minute, now.Add(30 * time.Minute), false, ""},
		{"-timeout near: Reserve before it", now.Add(20 * time.Minute), 30 * time.Minute, now.Add(20*time.Minute - Reserve), true, ""},
		{"too little left: the test fails", now.Add(Reserve + 30*time.Second), 30 * time.Minute, time.Time{}, true, "raise the package's -timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ft := &fakeT{deadline: c.deadline}
			end, limited := ends(ft, c.want)
			if limited != c.limited {
				t.Errorf("limited by -timeout: %v, want %v", limited, c.limited)
			}
			if !c.end.IsZero() && (end.Sub(c.end) > time.Second || c.end.Sub(end) > time.Second) {
				t.Errorf("ends %s from now, want %s", time.Until(end).Round(time.Second), time.Until(c.end).Round(time.Second))
			}
			ctx, cancel := New(ft, c.want)
			defer cancel()
			if !strings.Contains(ft.fatal, c.fatal) || (c.fatal == "" && ft.fatal != "") {
				t.Errorf("fatal %q, want one with %q", ft.fatal, c.fatal)
			}
			if d, ok := ctx.Deadline(); !ok || d.Sub(end) > time.Second {
				t.Errorf("the context ends at %v (%v), want %v", d, ok, end)
			}
		})
	}
}

func TestEndsBeforeThisBinarysTimeout(t *testing.T) {
	ctx, cancel := New(t, 365*24*time.Hour)
	defer cancel()
	d, _ := ctx.Deadline()
	if td, ok := t.Deadline(); ok && !d.Before(td) {
		t.Errorf("the context ends at %s, not before go test's -timeout at %s", d, td)
	}
	if ctx.Err() != nil {
		t.Fatal(context.Cause(ctx))
	}
}
