package vsite

import (
	"fmt"
	"net/http"
)

// The SecureBoot resource of a System whose firmware is a Secure Boot
// build (Redfish's SecureBoot v1.1): SecureBootEnable is the setting
// from the next power-on or reset, SecureBootCurrentBoot the current (or
// last) boot's state, SecureBootMode UserMode with keys enrolled and
// SetupMode without. Ironic reads and sets it (through sushy) for a node
// whose boot mode is UEFISecureBoot.

func secureBootPath(name string) string { return systemPath(name) + "/SecureBoot" }

func secureBootETag(st machineState) string {
	return weakETag(fmt.Sprintf("secureboot/%t/%t", st.SecureBoot, st.SecureBootCurrent))
}

// secureBootState reads the machine and answers 404 when its firmware
// has no Secure Boot, as a BMC of such a server has no such resource.
func (b *redfishBMC) secureBootState(w http.ResponseWriter, r *http.Request) (machineState, bool) {
	if !b.thisSystem(w, r) {
		return machineState{}, false
	}
	st, ok := b.state(w, r)
	if !ok {
		return st, false
	}
	if !st.SecureBootCapable {
		redfishError(w, http.StatusNotFound, "this system's firmware has no Secure Boot")
		return st, false
	}
	return st, true
}

func (b *redfishBMC) secureBoot(w http.ResponseWriter, r *http.Request) {
	st, ok := b.secureBootState(w, r)
	if !ok {
		return
	}
	current, mode := "Disabled", "SetupMode"
	if st.SecureBootCurrent {
		current, mode = "Enabled", "UserMode"
	}
	tag := secureBootETag(st)
	w.Header().Set("ETag", tag)
	w.Header().Set("Allow", "GET, PATCH")
	writeJSON(w, http.StatusOK, obj{
		"@odata.type":           "#SecureBoot.v1_1_0.SecureBoot",
		"@odata.id":             secureBootPath(b.name),
		"@odata.etag":           tag,
		"Id":                    "SecureBoot",
		"Name":                  "UEFI Secure Boot",
		"SecureBootEnable":      st.SecureBoot,
		"SecureBootCurrentBoot": current,
		"SecureBootMode":        mode,
	})
}

// patchSecureBoot changes SecureBootEnable, which takes effect at the
// machine's next power-on or reset.
func (b *redfishBMC) patchSecureBoot(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Enable *bool `json:"SecureBootEnable"`
	}
	if err := decodeBody(r, &req); err != nil {
		redfishError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Enable == nil {
		redfishError(w, http.StatusBadRequest, "only SecureBootEnable can be patched")
		return
	}
	b.domMu.Lock()
	defer b.domMu.Unlock()
	st, ok := b.secureBootState(w, r)
	if !ok {
		return
	}
	if staleIfMatch(r, secureBootETag(st)) {
		redfishError(w, http.StatusPreconditionFailed, "Secure Boot changed: its ETag is not "+r.Header.Get("If-Match"))
		return
	}
	if *req.Enable != st.SecureBoot {
		if err := b.drv.SetSecureBoot(r.Context(), *req.Enable); err != nil {
			redfishError(w, http.StatusInternalServerError, fmt.Sprintf("machine %s: Secure Boot: %v", b.name, err))
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
