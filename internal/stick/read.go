package stick

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/filesystem"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/progress"
)

// Report is what `mkusb inspect` shows.
type Report struct {
	File       string           `json:"file"`
	Size       int64            `json:"size"`
	Label      string           `json:"label"`
	Lock       *bundle.Lock     `json:"lock"`
	Build      *BuildInfo       `json:"build,omitempty"`
	Boot       []BootEntry      `json:"boot"`
	Partitions []Partition      `json:"partitions"`
	Sizes      map[string]int64 `json:"sizes"` // bytes under each top folder of the ISO
	Site       bool             `json:"site"`
}

// BootEntry is an El Torito boot entry.
type BootEntry struct {
	Platform  string `json:"platform"` // BIOS or UEFI
	Emulation string `json:"emulation"`
	LoadRBA   uint32 `json:"loadRBA"`
	Sectors   uint16 `json:"sectors"` // 512-byte sectors loaded
}

// Partition is an entry of the hybrid MBR.
type Partition struct {
	Index    int    `json:"index"`
	Type     string `json:"type"`
	Active   bool   `json:"active"`
	StartLBA uint32 `json:"startLBA"`
	Sectors  uint32 `json:"sectors"`
}

// isoFS opens the ISO's file system.
func isoFS(p string) (filesystem.FileSystem, func(), error) {
	d, err := diskfs.Open(p, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		return nil, nil, fmt.Errorf("opening %s: %w", p, err)
	}
	fsys, err := d.GetFilesystem(0)
	if err != nil {
		d.Close()
		return nil, nil, fmt.Errorf("reading %s: not an ISO 9660 image: %w", p, err)
	}
	return fsys, func() { d.Close() }, nil
}

func readAll(fsys fs.FS, p string) ([]byte, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Inspect reads an ISO's lock, build record, boot entries and sizes.
func Inspect(p string) (*Report, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	r := &Report{File: p, Size: fi.Size(), Sizes: map[string]int64{}}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if r.Label, err = volumeLabel(f); err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if r.Boot, err = bootEntries(f); err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	r.Partitions = mbrPartitions(f)

	fsys, closeFS, err := isoFS(p)
	if err != nil {
		return nil, err
	}
	defer closeFS()
	data, err := readAll(fsys, "bundle/bundle.lock")
	if err != nil {
		return nil, fmt.Errorf("reading %s: no /bundle/bundle.lock (not a bootstick?): %w", p, err)
	}
	if r.Lock, err = bundle.ParseLock(p+":/bundle/bundle.lock", data); err != nil {
		return nil, err
	}
	if data, err := readAll(fsys, "bundle/build.json"); err == nil {
		var bi BuildInfo
		if err := json.Unmarshal(data, &bi); err != nil {
			return nil, fmt.Errorf("reading %s:/bundle/build.json: %w", p, err)
		}
		r.Build = &bi
	}
	if _, err := fs.Stat(fsys, "bundle/site/site.yaml"); err == nil {
		r.Site = true
	}
	err = fs.WalkDir(fsys, ".", func(fp string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		parts := strings.SplitN(fp, "/", 3)
		key := parts[0]
		if parts[0] == "bundle" && len(parts) == 3 {
			key = parts[0] + "/" + parts[1]
		}
		r.Sizes[key] += info.Size()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	return r, nil
}

const sector = 2048

func volumeLabel(f io.ReaderAt) (string, error) {
	pvd := make([]byte, sector)
	if _, err := f.ReadAt(pvd, 16*sector); err != nil {
		return "", fmt.Errorf("not an ISO 9660 image (too short for a volume descriptor): %w", err)
	}
	if pvd[0] != 1 || string(pvd[1:6]) != "CD001" {
		return "", errors.New("not an ISO 9660 image (no primary volume descriptor at sector 16)")
	}
	return strings.TrimRight(string(pvd[40:72]), " \x00"), nil
}

// bootEntries parses the El Torito boot catalog.
func bootEntries(f io.ReaderAt) ([]BootEntry, error) {
	br := make([]byte, sector)
	if _, err := f.ReadAt(br, 17*sector); err != nil {
		return nil, nil
	}
	if br[0] != 0 || string(br[1:6]) != "CD001" || !strings.HasPrefix(string(br[7:39]), "EL TORITO SPECIFICATION") {
		return nil, nil // not bootable
	}
	cat := make([]byte, sector)
	if _, err := f.ReadAt(cat, int64(binary.LittleEndian.Uint32(br[0x47:]))*sector); err != nil {
		return nil, fmt.Errorf("reading the boot catalog: %w", err)
	}
	if cat[0] != 1 || cat[30] != 0x55 || cat[31] != 0xAA {
		return nil, errors.New("the boot catalog has no validation entry")
	}
	platform := func(id byte) string {
		switch id {
		case 0:
			return "BIOS"
		case 0xEF:
			return "UEFI"
		}
		return fmt.Sprintf("0x%02x", id)
	}
	entry := func(e []byte, plat byte) BootEntry {
		emu := map[byte]string{0: "none", 1: "1.2M floppy", 2: "1.44M floppy", 3: "2.88M floppy", 4: "hard disk"}[e[1]&0x0f]
		return BootEntry{Platform: platform(plat), Emulation: emu, Sectors: binary.LittleEndian.Uint16(e[6:]), LoadRBA: binary.LittleEndian.Uint32(e[8:])}
	}
	var out []BootEntry
	if cat[32] == 0x88 {
		out = append(out, entry(cat[32:64], cat[1]))
	}
	for off := 64; off+32 <= sector; {
		h := cat[off : off+32]
		if h[0] != 0x90 && h[0] != 0x91 {
			break
		}
		n := int(binary.LittleEndian.Uint16(h[2:]))
		off += 32
		for i := 0; i < n && off+32 <= sector; i++ {
			if cat[off] == 0x88 {
				out = append(out, entry(cat[off:off+32], h[1]))
			}
			off += 32
		}
		if h[0] == 0x91 {
			break
		}
	}
	return out, nil
}

// mbrPartitions reads the hybrid MBR's partition table.
func mbrPartitions(f io.ReaderAt) []Partition {
	mbr := make([]byte, 512)
	if _, err := f.ReadAt(mbr, 0); err != nil || mbr[510] != 0x55 || mbr[511] != 0xAA {
		return nil
	}
	var out []Partition
	for i := 0; i < 4; i++ {
		e := mbr[446+16*i : 446+16*(i+1)]
		if e[4] == 0 {
			continue
		}
		out = append(out, Partition{Index: i + 1, Type: fmt.Sprintf("0x%02x", e[4]), Active: e[0] == 0x80,
			StartLBA: binary.LittleEndian.Uint32(e[8:]), Sectors: binary.LittleEndian.Uint32(e[12:])})
	}
	return out
}

// VerifyResult is what Verify checked.
type VerifyResult = bundle.Verified

// Verify re-hashes every payload file the lock pins, every registry blob,
// and the live files the build record names (bundle.VerifyFS).
func Verify(ctx context.Context, p string, prog progress.Progress) (*VerifyResult, error) {
	if prog == nil {
		prog = progress.Nop()
	}
	rep, err := Inspect(p)
	if err != nil {
		return nil, err
	}
	fsys, closeFS, err := isoFS(p)
	if err != nil {
		return nil, err
	}
	defer closeFS()
	var live map[string]cas.Digest
	if rep.Build != nil {
		live = rep.Build.Live
	}
	return bundle.VerifyFS(ctx, fsys, "bundle", rep.Lock, live, prog)
}
