package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// A host's phases run as steps: each on the host's executor, within its
// own deadline, with its start, end or failure written as it happens.

// phaseDone reports whether h finished phase name.
func phaseDone(h *bpa.HostStatus, name string) bool {
	for _, ph := range h.Phases {
		if ph.Name == name && ph.Finished != nil {
			return true
		}
	}
	return false
}

// begin records phase name as started (again, when it was cut short).
func (x *run) begin(ctx context.Context, h *bpa.HostStatus, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := metav1.NewTime(x.now().Truncate(time.Second))
	h.Phases = slices.DeleteFunc(h.Phases, func(ph bpa.Phase) bool { return ph.Name == name })
	h.Phases = append(h.Phases, bpa.Phase{Name: name, Started: t})
	if h.State != bpa.HostInstalling {
		h.State, h.LastUpdated = bpa.HostInstalling, &t
	}
	if err := x.save(ctx); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "recording a phase's start", "host", h.Name, "phase", name)
	}
	ctrl.LoggerFrom(ctx).Info("phase started", "host", h.Name, "phase", name)
	x.r.event(ref(x.p), false, ReasonPhaseStarted, name, fmt.Sprintf("host %s: phase %s started", h.Name, name))
}

func (x *run) end(ctx context.Context, h *bpa.HostStatus, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := metav1.NewTime(x.now().Truncate(time.Second))
	for i := range h.Phases {
		if h.Phases[i].Name == name {
			h.Phases[i].Finished = &t
			h.Phases[i].Duration = t.Sub(h.Phases[i].Started.Time).String()
			ctrl.LoggerFrom(ctx).Info("phase done", "host", h.Name, "phase", name, "took", h.Phases[i].Duration)
			x.r.event(ref(x.p), false, ReasonPhaseFinished, name, fmt.Sprintf("host %s: phase %s finished in %s", h.Name, name, h.Phases[i].Duration))
		}
	}
	h.Error, h.Failures, h.NextRetry = "", 0, nil
	if err := x.save(ctx); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "recording a phase's end", "host", h.Name, "phase", name)
	}
}

// fail records a failed phase: the host is Unreachable or in Error, and
// is tried again after a backoff.
func (x *run) fail(ctx context.Context, h *bpa.HostStatus, phase string, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	h.Failures++
	wait := backoff(h.Failures)
	next := metav1.NewTime(x.now().Add(wait).Truncate(time.Second))
	h.NextRetry = &next
	st := bpa.HostError
	var un *install.UnreachableError
	if errors.As(err, &un) {
		st = bpa.HostUnreachable
	}
	if h.State != st {
		t := metav1.NewTime(x.now().Truncate(time.Second))
		h.State, h.LastUpdated = st, &t
	}
	// Errors of jobs and queries are redacted where they are made; this
	// masks anything shaped like a token that came another way.
	h.Error = install.Redact(fmt.Sprintf("%s: %v (try %d; next at %s)", phase, err, h.Failures, next.UTC().Format(time.TimeOnly)))
	// The next try connects anew; this connection is closed, not leaked.
	if c := x.clients[h.Name]; c != nil {
		c.Close()
	}
	delete(x.clients, h.Name)
	x.wantAgain(wait)
	ctrl.LoggerFrom(ctx).Info("phase failed", "host", h.Name, "phase", phase, "error", h.Error)
	reason := ReasonPhaseFailed
	if st == bpa.HostUnreachable {
		reason = ReasonHostUnreachable
	}
	x.r.event(ref(x.p), true, reason, phase, fmt.Sprintf("host %s: %s", h.Name, h.Error))
}

// waiting reports whether h is in its backoff.
func (x *run) waiting(h *bpa.HostStatus) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if h.NextRetry != nil && x.now().Before(h.NextRetry.Time) {
		x.wantAgain(h.NextRetry.Sub(x.now()))
		return true
	}
	return false
}

func (x *run) client(ctx context.Context, h *bpa.HostStatus) (install.Executor, error) {
	x.mu.Lock()
	c := x.clients[h.Name]
	x.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := x.connect(ctx, h.Name, h.Address)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if old := x.clients[h.Name]; old != nil {
		c.Close() // another goroutine connected first
		return old, nil
	}
	x.clients[h.Name] = c
	return c, nil
}

// step runs phase name of h with f (unless it ended before; connect
// always dials), recording its start and end, or the failure. f gets a
// context bounded by the phase's deadline.
func (x *run) step(ctx context.Context, h *bpa.HostStatus, name string, f func(ctx context.Context, c install.Executor) error) bool {
	if name != bpa.PhaseConnect && phaseDone(h, name) {
		return true
	}
	if !phaseDone(h, name) {
		x.begin(ctx, h, name)
	}
	// The phase's own deadline bounds its work, not the recording of its
	// end or failure.
	pctx := ctx
	if d := PhaseDeadlines[name]; d > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	c, err := x.client(pctx, h)
	if err == nil && f != nil {
		err = f(pctx, c)
	}
	if err != nil {
		x.fail(ctx, h, name, err)
		return false
	}
	if !phaseDone(h, name) {
		x.end(ctx, h, name)
	}
	return true
}
