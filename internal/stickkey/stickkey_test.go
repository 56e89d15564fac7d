package stickkey

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stick writes a disk image whose MBR names partition 3 of type typ at
// sector 2048, holding slot.
func stick(t *testing.T, typ byte, slot []byte) string {
	t.Helper()
	img := make([]byte, 2048*512+4096)
	e := img[mbrTable+PartitionIndex*mbrEntry:]
	e[4] = typ
	binary.LittleEndian.PutUint32(e[8:12], 2048)
	binary.LittleEndian.PutUint32(e[12:16], 8)
	img[510], img[511] = 0x55, 0xaa
	copy(img[2048*512:], slot)
	p := filepath.Join(t.TempDir(), "stick.img")
	if err := os.WriteFile(p, img, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSlot stores a key in a blank slot, reads it back, and never
// overwrites it.
func TestSlot(t *testing.T) {
	p := stick(t, PartitionType, Blank())
	s, err := Find(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Offset != 2048*512 {
		t.Errorf("slot at byte %d, want %d", s.Offset, 2048*512)
	}
	if !s.Writable() {
		t.Error("a writable image is not Writable")
	}
	if k, err := s.Load(); err != nil || k != nil {
		t.Fatalf("a blank slot: Load = %x, %v; want nothing", k, err)
	}
	key := bytes.Repeat([]byte{0x5a}, KeySize)
	if err := s.Store(key); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load()
	if err != nil || !bytes.Equal(got, key) {
		t.Fatalf("Load after Store = %x, %v", got, err)
	}
	err = s.Store(bytes.Repeat([]byte{0x11}, KeySize))
	if err == nil || !strings.Contains(err.Error(), "holds a key already") {
		t.Errorf("a second Store: %v, want a refusal", err)
	}
	if got, _ := s.Load(); !bytes.Equal(got, key) {
		t.Error("a refused Store changed the key")
	}
	if err := s.Store(key[:10]); err == nil {
		t.Error("a short key was stored")
	}
}

// TestDamaged refuses a slot whose checksum or state is wrong, and a disk
// with no slot, each saying why.
func TestDamaged(t *testing.T) {
	torn := Blank()
	torn[stateOff] = holdsKey
	copy(torn[keyOff:], bytes.Repeat([]byte{1}, KeySize)) // no checksum
	odd := Blank()
	odd[stateOff] = 7
	for _, c := range []struct {
		name, want string
		typ        byte
		slot       []byte
		find       bool
	}{
		{"torn", "checksum", PartitionType, torn, true},
		{"state", "state 7", PartitionType, odd, true},
		{"no slot partition", "no key slot partition", 0x83, Blank(), false},
		{"not a slot", "is not a key slot", PartitionType, make([]byte, 512), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := stick(t, c.typ, c.slot)
			s, err := Find(p)
			if !c.find {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("Find: %v, want %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Load(); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("Load: %v, want %q naming %s", err, c.want, p)
			}
		})
	}
	plain := filepath.Join(t.TempDir(), "cd.img")
	os.WriteFile(plain, make([]byte, 4096), 0o600)
	if _, err := Find(plain); err == nil || !strings.Contains(err.Error(), "no partition table") {
		t.Errorf("Find on a disk with no MBR: %v", err)
	}
}
