// Package stickkey keeps the data disk's key on the boot stick, for a
// machine with no TPM 2.0 to seal it to. The stick's image ends with a
// small partition of its own (MBR partition 3, type 0xda, non-FS data),
// built blank; the first boot of a dd'd stick writes a random key into it,
// and every later boot reads it from there. The stick is then the disk's
// key: the data disk alone shows nothing, and whoever holds both reads
// both. A CD (or any medium that is not writable) has nowhere to keep it.
//
// The slot is one 512-byte sector: Magic, a state byte (0 blank, 1 key),
// the 64-byte key, and the key's SHA-256, so a torn or foreign write is
// never taken for a key.
package stickkey

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Magic starts a key slot.
const Magic = "BOOTSTICK DATA DISK KEY SLOT v1\n"

// KeySize is the key's size in bytes.
const KeySize = 64

// PartitionType is the slot partition's MBR type (non-FS data).
const PartitionType = 0xda

// PartitionIndex is the slot partition's MBR entry (0-based): after the
// ISO's whole-image partition and its EFI image.
const PartitionIndex = 2

const (
	sector    = 512
	stateOff  = len(Magic)
	keyOff    = 64
	sumOff    = keyOff + KeySize
	blank     = 0
	holdsKey  = 1
	mbrTable  = 446
	mbrEntry  = 16
	mbrSigOff = 510
)

// Blank is the slot's sector as the stick is built: no key yet.
func Blank() []byte {
	b := make([]byte, sector)
	copy(b, Magic)
	return b
}

// Slot is a key slot found on a disk, at Offset bytes.
type Slot struct {
	Disk   string
	Offset int64
}

func (s Slot) String() string { return fmt.Sprintf("%s (key slot at byte %d)", s.Disk, s.Offset) }

// Find returns the key slot on disk (a whole disk, e.g. the boot
// medium's), or an error saying why it has none.
func Find(disk string) (Slot, error) {
	f, err := os.Open(disk)
	if err != nil {
		return Slot{}, fmt.Errorf("looking for the key slot on %s: %w", disk, err)
	}
	defer f.Close()
	mbr := make([]byte, sector)
	if _, err := f.ReadAt(mbr, 0); err != nil {
		return Slot{}, fmt.Errorf("looking for the key slot on %s: %w", disk, err)
	}
	if mbr[mbrSigOff] != 0x55 || mbr[mbrSigOff+1] != 0xaa {
		return Slot{}, fmt.Errorf("%s has no partition table (a CD, or not a stick of ours), so no key slot", disk)
	}
	e := mbr[mbrTable+PartitionIndex*mbrEntry:]
	if e[4] != PartitionType {
		return Slot{}, fmt.Errorf("%s has no key slot partition (its partition 3 is of type %#x, not %#x): a stick built before key slots", disk, e[4], PartitionType)
	}
	s := Slot{Disk: disk, Offset: int64(binary.LittleEndian.Uint32(e[8:12])) * sector}
	b := make([]byte, sector)
	if _, err := f.ReadAt(b, s.Offset); err != nil {
		return Slot{}, fmt.Errorf("reading the key slot on %s: %w", disk, err)
	}
	if !bytes.HasPrefix(b, []byte(Magic)) {
		return Slot{}, fmt.Errorf("%s: partition 3 is not a key slot (no %q)", disk, bytes.TrimSpace([]byte(Magic)))
	}
	return s, nil
}

// Writable reports whether the slot's disk can be written (a dd'd USB
// stick, not a CD or a read-only device).
func (s Slot) Writable() bool {
	if ro, err := os.ReadFile(filepath.Join("/sys/class/block", filepath.Base(s.Disk), "ro")); err == nil && bytes.Equal(bytes.TrimSpace(ro), []byte("1")) {
		return false
	}
	f, err := os.OpenFile(s.Disk, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// Load returns the key in the slot, or nil when it holds none.
func (s Slot) Load() ([]byte, error) {
	f, err := os.Open(s.Disk)
	if err != nil {
		return nil, fmt.Errorf("reading the key slot on %s: %w", s.Disk, err)
	}
	defer f.Close()
	return parse(f, s)
}

func parse(f *os.File, s Slot) ([]byte, error) {
	b := make([]byte, sector)
	if _, err := f.ReadAt(b, s.Offset); err != nil {
		return nil, fmt.Errorf("reading the key slot on %s: %w", s.Disk, err)
	}
	if !bytes.HasPrefix(b, []byte(Magic)) {
		return nil, fmt.Errorf("the key slot on %s is damaged (no %q)", s.Disk, bytes.TrimSpace([]byte(Magic)))
	}
	switch b[stateOff] {
	case blank:
		return nil, nil
	case holdsKey:
	default:
		return nil, fmt.Errorf("the key slot on %s is damaged (state %d)", s.Disk, b[stateOff])
	}
	key := bytes.Clone(b[keyOff : keyOff+KeySize])
	sum := sha256.Sum256(key)
	if !bytes.Equal(sum[:], b[sumOff:sumOff+sha256.Size]) {
		return nil, fmt.Errorf("the key slot on %s is damaged (its checksum does not match)", s.Disk)
	}
	return key, nil
}

// Store writes key into a blank slot, synchronously, and reads it back. A
// slot that holds a key already is never overwritten.
func (s Slot) Store(key []byte) error {
	if len(key) != KeySize {
		return fmt.Errorf("storing a key of %d bytes: the slot holds %d", len(key), KeySize)
	}
	f, err := os.OpenFile(s.Disk, os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		return fmt.Errorf("writing the key slot on %s: %w", s.Disk, err)
	}
	defer f.Close()
	old, err := parse(f, s)
	if err != nil {
		return err
	}
	if old != nil {
		return fmt.Errorf("the key slot on %s holds a key already: it opens another data disk", s.Disk)
	}
	b := Blank()
	b[stateOff] = holdsKey
	copy(b[keyOff:], key)
	sum := sha256.Sum256(key)
	copy(b[sumOff:], sum[:])
	if _, err := f.WriteAt(b, s.Offset); err != nil {
		return fmt.Errorf("writing the key slot on %s: %w", s.Disk, err)
	}
	got, err := parse(f, s)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, key) {
		return errors.New("the key slot on " + s.Disk + " does not read back what was written")
	}
	return nil
}
