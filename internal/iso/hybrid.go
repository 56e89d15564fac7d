package iso

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
)

const (
	mbrCodeSize = 432
	// isohybrid's disk geometry: 64 heads, 32 sectors per track.
	mbrHeads   = 64
	mbrSectors = 32
)

// bootEntries finds the BIOS and EFI boot images' first sectors (2048-byte
// blocks) in the image's El Torito catalog. vds[1] is the boot record.
func bootEntries(f *os.File, vds [][]byte) (bios, efi uint32, err error) {
	var brvd []byte
	for _, vd := range vds {
		if vd[0] == vdBoot {
			brvd = vd
		}
	}
	if brvd == nil || string(brvd[7:30]) != "EL TORITO SPECIFICATION" {
		return 0, 0, fmt.Errorf("no El Torito boot record in the image")
	}
	catLoc := binary.LittleEndian.Uint32(brvd[0x47:0x4b])
	cat := make([]byte, sectorSize)
	if _, err := f.ReadAt(cat, int64(catLoc)*sectorSize); err != nil {
		return 0, 0, fmt.Errorf("reading the boot catalog: %w", err)
	}
	if cat[0] != 0x01 || cat[0x1e] != 0x55 || cat[0x1f] != 0xaa {
		return 0, 0, fmt.Errorf("bad boot catalog validation entry at sector %d", catLoc)
	}
	bios = binary.LittleEndian.Uint32(cat[32+8 : 32+12])
	platform := byte(0)
	for pos := 64; pos+32 <= len(cat); pos += 32 {
		switch cat[pos] {
		case 0x90, 0x91: // section header
			platform = cat[pos+1]
		case 0x88: // bootable entry
			if platform == 0xef && efi == 0 {
				efi = binary.LittleEndian.Uint32(cat[pos+8 : pos+12])
			}
		}
	}
	if efi == 0 {
		return 0, 0, fmt.Errorf("no EFI entry in the boot catalog")
	}
	return bios, efi, nil
}

// writeHybridMBR writes an isohybrid-style master boot record into the
// image's first sector: the isohybrid boot code (which loads the El Torito
// BIOS image from the disk, given its address at offset 432), a disk
// signature, partition 1 (active, the whole image, like isohybrid) and
// partition 2 (type 0xEF, the EFI image) for UEFI firmware, and partition
// 3 after the ISO when the boot options append one.
func writeHybridMBR(f *os.File, opts Options, vds [][]byte, size int64) error {
	code, err := os.ReadFile(opts.Boot.MBR)
	if err != nil {
		return fmt.Errorf("reading hybrid MBR code: %w", err)
	}
	if len(code) < mbrCodeSize {
		return fmt.Errorf("hybrid MBR code %s is %d bytes; want at least %d", opts.Boot.MBR, len(code), mbrCodeSize)
	}
	fi, err := os.Stat(filepath.Join(opts.Tree, filepath.FromSlash(opts.Boot.EFIImage)))
	if err != nil {
		return fmt.Errorf("EFI image: %w", err)
	}
	bios, efi, err := bootEntries(f, vds)
	if err != nil {
		return err
	}

	mbr := make([]byte, 512)
	copy(mbr, code[:mbrCodeSize])
	// isohdpfx reads the BIOS image's address in 512-byte sectors here.
	binary.LittleEndian.PutUint64(mbr[432:440], uint64(bios)*4)
	// A disk signature derived from the label and the epoch: stable for
	// reproducible builds, different between releases.
	h := fnv.New32a()
	fmt.Fprintf(h, "%s %d", opts.Label, opts.Epoch.Unix())
	binary.LittleEndian.PutUint32(mbr[440:444], h.Sum32())

	total := uint32(size / 512)
	partition(mbr[446:462], 0x80, 0x17, 0, total)
	efiSectors := uint32((fi.Size() + 511) / 512)
	partition(mbr[462:478], 0x00, 0xef, efi*4, efiSectors)
	if a := opts.Boot.Appended; len(a) > 0 {
		partition(mbr[478:494], 0x00, opts.Boot.AppendedType, total, uint32(appendedSize(a)/512))
	}
	mbr[510], mbr[511] = 0x55, 0xaa
	if _, err := f.WriteAt(mbr, 0); err != nil {
		return fmt.Errorf("writing the hybrid MBR: %w", err)
	}
	return nil
}

func partition(e []byte, status, typ byte, start, count uint32) {
	e[0] = status
	copy(e[1:4], chs(start))
	e[4] = typ
	copy(e[5:8], chs(start+count-1))
	binary.LittleEndian.PutUint32(e[8:12], start)
	binary.LittleEndian.PutUint32(e[12:16], count)
}

// chs encodes a sector address in isohybrid's geometry, saturating at the
// largest address CHS can hold.
func chs(lba uint32) []byte {
	c := lba / (mbrHeads * mbrSectors)
	h := (lba / mbrSectors) % mbrHeads
	s := lba%mbrSectors + 1
	if c > 1023 {
		c, h, s = 1023, mbrHeads-1, mbrSectors
	}
	return []byte{byte(h), byte(s&0x3f) | byte((c>>2)&0xc0), byte(c)}
}
