package luks

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestParseHeader reads a real header (luksDump --dump-json-metadata of a
// data disk firstboot sealed to a swtpm in QEMU): one keyslot, opened by
// the systemd-tpm2 token bound to PCR 7 alone. The same header with its
// token removed (a key kept on the stick) has no TPM, and one with the
// token and a second keyslot is not sealed only.
func TestParseHeader(t *testing.T) {
	data, err := os.ReadFile("testdata/tpm2-sealed.json")
	if err != nil {
		t.Fatal(err)
	}
	h, err := parseHeader(data)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.TPM2PCRs, []int{7}) || !slices.Equal(h.Keyslots, []string{"1"}) || !h.SealedOnly() {
		t.Errorf("sealed header: %+v, want keyslot 1 opened by the TPM (PCR 7) alone", h)
	}

	var meta map[string]any
	if err := json.Unmarshal(data, &meta); err != nil {
		t.Fatal(err)
	}
	slots := meta["keyslots"].(map[string]any)
	slots["0"] = slots["1"]
	both, _ := json.Marshal(meta)
	if h, err := parseHeader(both); err != nil || h.SealedOnly() || !slices.Equal(h.Keyslots, []string{"0", "1"}) {
		t.Errorf("a header with a second keyslot: %+v, %v; want not sealed only", h, err)
	}
	meta["tokens"] = map[string]any{}
	plain, _ := json.Marshal(meta)
	if h, err := parseHeader(plain); err != nil || h.TPM2PCRs != nil || h.SealedOnly() {
		t.Errorf("a header with no token: %+v, %v; want no TPM", h, err)
	}
	if _, err := parseHeader([]byte("LUKS header information")); err == nil {
		t.Error("luksDump's text output parsed as a header")
	}
}
