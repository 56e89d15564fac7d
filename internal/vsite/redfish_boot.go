package vsite

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// BootSourceOverrideEnabled values.
const (
	overrideOnce       = "Once"
	overrideContinuous = "Continuous"
	overrideDisabled   = "Disabled"
)

var bootEnabled = []string{overrideOnce, overrideContinuous, overrideDisabled}

// redfishBoot is the System's boot override, beside the boot target the
// machine's definition holds.
type redfishBoot struct {
	enabled string // BootSourceOverrideEnabled
	// restore is, while a Once override waits for the machine's next
	// start, the boot target the override replaced: the definition gets
	// it back once the machine has started with the override.
	restore string
}

// bootEnabled is the System's BootSourceOverrideEnabled.
func (b *redfishBMC) bootEnabled() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.boot.enabled
}

// etag is the System's ETag: it changes with what a PATCH changes (the
// boot settings), not with the power state.
func etag(enabled string, st machineState) string {
	return weakETag(enabled + "/" + st.BootTarget + "/" + bootMode(st))
}

// weakETag is a resource's weak ETag for the state it is made of.
func weakETag(state string) string {
	h := sha256.Sum256([]byte(state))
	return fmt.Sprintf(`W/"%x"`, h[:8])
}

// staleIfMatch tells whether the request's If-Match names an ETag other
// than current (weak or strong alike); none, or *, matches.
func staleIfMatch(r *http.Request, current string) bool {
	tag := r.Header.Get("If-Match")
	return tag != "" && tag != "*" && strings.TrimPrefix(tag, "W/") != strings.TrimPrefix(current, "W/")
}

// patchBoot sets the boot override: the target goes into the machine's
// definition at once and takes effect at its next power-on or reset; the
// mode must be the machine's firmware's (it cannot change). A Once
// override remembers the target it replaced, which comes back when the
// machine has started with the override (useOnce), or when the override
// is Disabled before that.
func (b *redfishBMC) patchBoot(w http.ResponseWriter, r *http.Request) {
	if !b.thisSystem(w, r) {
		return
	}
	var req struct {
		Boot *struct {
			Target      *string `json:"BootSourceOverrideTarget"`
			Enabled     *string `json:"BootSourceOverrideEnabled"`
			Mode        *string `json:"BootSourceOverrideMode"`
			HTTPBootURI *string `json:"HttpBootUri"`
		}
	}
	if err := decodeBody(r, &req); err != nil {
		redfishError(w, http.StatusBadRequest, err.Error())
		return
	}
	boot := req.Boot
	if boot == nil {
		redfishError(w, http.StatusBadRequest, "only Boot can be patched")
		return
	}
	b.domMu.Lock()
	defer b.domMu.Unlock()
	st, ok := b.state(w, r)
	if !ok {
		return
	}
	if staleIfMatch(r, etag(b.bootEnabled(), st)) {
		redfishError(w, http.StatusPreconditionFailed, "the system changed: its ETag is not "+r.Header.Get("If-Match"))
		return
	}
	switch {
	case boot.Target != nil && !slices.Contains(bootTargets, *boot.Target):
		redfishError(w, http.StatusBadRequest, fmt.Sprintf("BootSourceOverrideTarget %q is not one of %s", *boot.Target, strings.Join(bootTargets, ", ")))
		return
	case boot.Enabled != nil && !slices.Contains(bootEnabled, *boot.Enabled):
		redfishError(w, http.StatusBadRequest, fmt.Sprintf("BootSourceOverrideEnabled %q is not one of %s", *boot.Enabled, strings.Join(bootEnabled, ", ")))
		return
	case boot.Mode != nil && *boot.Mode != bootMode(st):
		redfishError(w, http.StatusBadRequest, fmt.Sprintf("BootSourceOverrideMode %q: this machine's firmware boots %s only", *boot.Mode, bootMode(st)))
		return
	case boot.HTTPBootURI != nil && *boot.HTTPBootURI != "":
		redfishError(w, http.StatusBadRequest, "HTTP boot is not supported")
		return
	}
	b.mu.Lock()
	cur := b.boot
	b.mu.Unlock()
	next, target := cur, ""
	if boot.Target != nil && *boot.Target != bootNone {
		target = *boot.Target
	}
	if boot.Enabled != nil {
		next.enabled = *boot.Enabled
	}
	switch {
	case next.enabled == overrideOnce && cur.enabled != overrideOnce:
		next.restore = st.BootTarget
	case next.enabled == overrideOnce: // a pending Once changes: keep what it replaced
	case cur.enabled == overrideOnce && next.enabled == overrideDisabled && target == "":
		// The pending Once override is called off.
		if _, ok := bootDevs[cur.restore]; ok {
			target = cur.restore
		}
		next.restore = ""
	default:
		next.restore = ""
	}
	if target != "" {
		if err := b.drv.SetBootTarget(r.Context(), target); err != nil {
			redfishError(w, http.StatusInternalServerError, fmt.Sprintf("machine %s: boot override: %v", b.name, err))
			return
		}
	}
	b.mu.Lock()
	b.boot = next
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// reset changes the machine's power. A restart of a machine that is off
// powers it on. ForceRestart powers off and on (a new QEMU), so a boot
// override applies; GracefulRestart is the guest's own reboot (ACPI), in
// the same QEMU. A start uses up a Once override.
func (b *redfishBMC) reset(w http.ResponseWriter, r *http.Request) {
	if !b.thisSystem(w, r) {
		return
	}
	var req struct{ ResetType string }
	if err := decodeBody(r, &req); err != nil {
		redfishError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !slices.Contains(redfishResetTypes, req.ResetType) {
		redfishError(w, http.StatusBadRequest, fmt.Sprintf("ResetType %q is not one of %s", req.ResetType, strings.Join(redfishResetTypes, ", ")))
		return
	}
	b.domMu.Lock()
	defer b.domMu.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	started, err := b.drv.Reset(ctx, req.ResetType)
	if err != nil {
		redfishError(w, http.StatusInternalServerError, fmt.Sprintf("machine %s: reset %s: %v", b.name, req.ResetType, err))
		return
	}
	if started {
		if err := b.useOnce(ctx); err != nil {
			redfishError(w, http.StatusInternalServerError, fmt.Sprintf("machine %s: reset %s started the machine, but its Once boot override stays: %v", b.name, req.ResetType, err))
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// useOnce ends a Once override, now that the machine has started with
// it: the definition gets back the boot target the override replaced,
// for the next start, and the override is Disabled. On an error the
// override stays, for the next start to end. The caller holds domMu.
func (b *redfishBMC) useOnce(ctx context.Context) error {
	b.mu.Lock()
	boot := b.boot
	b.mu.Unlock()
	if boot.enabled != overrideOnce {
		return nil
	}
	if _, ok := bootDevs[boot.restore]; ok {
		if err := b.drv.SetBootTarget(ctx, boot.restore); err != nil {
			return fmt.Errorf("restoring boot target %s: %w", boot.restore, err)
		}
	}
	b.mu.Lock()
	b.boot = redfishBoot{enabled: overrideDisabled}
	b.mu.Unlock()
	return nil
}
