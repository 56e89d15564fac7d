package iso

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"
)

const (
	vdStart      = 16
	vdBoot       = 0
	vdPrimary    = 1
	vdSupplement = 2
	vdTerminator = 255
)

// appendedSize is the appended partition's size: whole MiBs.
func appendedSize(a []byte) int64 { return (int64(len(a)) + alignment - 1) / alignment * alignment }

// fixup post-processes an image go-diskfs has just finalized: it moves the
// El Torito boot record to sector 17, stamps every date with the epoch,
// normalizes Rock Ridge link counts of files, and adds the hybrid MBR. It
// returns the padded size the image must have.
func fixup(f *os.File, opts Options) (int64, error) {
	epoch := opts.Epoch
	if epoch.IsZero() {
		epoch = time.Unix(0, 0)
	}
	epoch = epoch.UTC()

	vds, err := readVDs(f)
	if err != nil {
		return 0, err
	}
	// El Torito: "The Boot Record Volume Descriptor shall be in sector 17",
	// and SeaBIOS reads only that sector. go-diskfs puts the Joliet SVD
	// first; the order of the others does not matter.
	ordered := make([][]byte, 0, len(vds))
	for _, want := range []func(t byte) bool{
		func(t byte) bool { return t == vdPrimary },
		func(t byte) bool { return t == vdBoot },
		func(t byte) bool { return t != vdPrimary && t != vdBoot && t != vdTerminator },
		func(t byte) bool { return t == vdTerminator },
	} {
		for _, vd := range vds {
			if want(vd[0]) {
				ordered = append(ordered, vd)
			}
		}
	}
	if len(ordered) == 0 || ordered[0][0] != vdPrimary {
		return 0, fmt.Errorf("no primary volume descriptor in the image")
	}

	fx := &fixer{f: f, epoch: epoch, seen: map[uint32]bool{}}
	for _, vd := range ordered {
		if vd[0] != vdPrimary && vd[0] != vdSupplement {
			continue
		}
		copy(vd[813:830], decDate(epoch))
		copy(vd[830:847], decDate(epoch))
		copy(vd[847:864], decDate(time.Time{}))
		copy(vd[864:881], decDate(time.Time{}))
		root := vd[156 : 156+34]
		copy(root[18:25], recDate(epoch))
		loc := binary.LittleEndian.Uint32(root[2:6])
		size := binary.LittleEndian.Uint32(root[10:14])
		if err := fx.walkDir(loc, size, vd[0] == vdPrimary); err != nil {
			return 0, err
		}
	}
	for i, vd := range ordered {
		if _, err := f.WriteAt(vd, int64(vdStart+i)*sectorSize); err != nil {
			return 0, err
		}
	}

	blocks := binary.LittleEndian.Uint32(ordered[0][80:84])
	size := int64(blocks) * sectorSize
	padded := (size + alignment - 1) / alignment * alignment

	if opts.Boot != nil && opts.Boot.MBR != "" {
		if err := writeHybridMBR(f, opts, ordered, padded); err != nil {
			return 0, err
		}
		if a := opts.Boot.Appended; len(a) > 0 {
			if _, err := f.WriteAt(a, padded); err != nil {
				return 0, fmt.Errorf("writing the appended partition: %w", err)
			}
			padded += appendedSize(a)
		}
	}
	return padded, nil
}

func readVDs(f *os.File) ([][]byte, error) {
	var vds [][]byte
	for i := 0; i < 32; i++ {
		b := make([]byte, sectorSize)
		if _, err := f.ReadAt(b, int64(vdStart+i)*sectorSize); err != nil {
			return nil, fmt.Errorf("reading volume descriptor %d: %w", i, err)
		}
		if string(b[1:6]) != "CD001" {
			return nil, fmt.Errorf("volume descriptor %d has no CD001 mark: the image was not written completely", i)
		}
		vds = append(vds, b)
		if b[0] == vdTerminator {
			return vds, nil
		}
	}
	return nil, fmt.Errorf("no volume descriptor set terminator in the first 32 descriptors")
}

type fixer struct {
	f     *os.File
	epoch time.Time
	seen  map[uint32]bool
}

// walkDir rewrites the dates in a directory extent and recurses into its
// subdirectories. susp says whether records carry SUSP/Rock Ridge entries.
func (fx *fixer) walkDir(loc, size uint32, susp bool) error {
	if fx.seen[loc] {
		return nil
	}
	fx.seen[loc] = true
	buf := make([]byte, int(size))
	off := int64(loc) * sectorSize
	if _, err := fx.f.ReadAt(buf, off); err != nil {
		return fmt.Errorf("reading directory at sector %d: %w", loc, err)
	}
	type sub struct{ loc, size uint32 }
	var subs []sub
	for pos := 0; pos < len(buf); {
		l := int(buf[pos])
		if l == 0 {
			pos = (pos/sectorSize + 1) * sectorSize
			continue
		}
		if pos+l > len(buf) || l < 34 {
			return fmt.Errorf("bad directory record at sector %d offset %d", loc, pos)
		}
		rec := buf[pos : pos+l]
		copy(rec[18:25], recDate(fx.epoch))
		nameLen := int(rec[32])
		isDir := rec[25]&2 != 0
		dot := nameLen == 1 && (rec[33] == 0 || rec[33] == 1)
		if susp {
			su := 33 + nameLen
			if nameLen%2 == 0 {
				su++
			}
			if su < l {
				if err := fx.patchSUSP(rec[su:], isDir); err != nil {
					return err
				}
			}
		}
		if isDir && !dot {
			subs = append(subs, sub{binary.LittleEndian.Uint32(rec[2:6]), binary.LittleEndian.Uint32(rec[10:14])})
		}
		pos += l
	}
	if _, err := fx.f.WriteAt(buf, off); err != nil {
		return err
	}
	for _, s := range subs {
		if err := fx.walkDir(s.loc, s.size, susp); err != nil {
			return err
		}
	}
	return nil
}

// patchSUSP rewrites TF timestamps and, for non-directories, the PX link
// count (go-diskfs copies the workspace's, which counts our hard links).
func (fx *fixer) patchSUSP(b []byte, isDir bool) error {
	for len(b) >= 4 {
		sig, l := string(b[0:2]), int(b[2])
		if l < 4 || l > len(b) {
			return nil // padding or the end of the area
		}
		e := b[:l]
		switch sig {
		case "TF":
			flags := e[4]
			width := 7
			stamp := recDate(fx.epoch)
			if flags&0x80 != 0 {
				width, stamp = 17, decDate(fx.epoch)
			}
			p := 5
			for bit := 0; bit < 7; bit++ {
				if flags&(1<<bit) != 0 && p+width <= l {
					copy(e[p:p+width], stamp)
					p += width
				}
			}
		case "PX":
			if !isDir && l >= 20 {
				binary.LittleEndian.PutUint32(e[12:16], 1)
				binary.BigEndian.PutUint32(e[16:20], 1)
			}
		case "CE":
			if l >= 28 {
				loc := binary.LittleEndian.Uint32(e[4:8])
				off := binary.LittleEndian.Uint32(e[12:16])
				n := binary.LittleEndian.Uint32(e[20:24])
				cb := make([]byte, n)
				at := int64(loc)*sectorSize + int64(off)
				if _, err := fx.f.ReadAt(cb, at); err != nil {
					return fmt.Errorf("reading continuation area at sector %d: %w", loc, err)
				}
				if err := fx.patchSUSP(cb, isDir); err != nil {
					return err
				}
				if _, err := fx.f.WriteAt(cb, at); err != nil {
					return err
				}
			}
		case "ST":
			return nil
		}
		b = b[l:]
	}
	return nil
}

// recDate is the 7-byte recording date of a directory record (ECMA-119
// 9.1.5), in UTC.
func recDate(t time.Time) []byte {
	t = t.UTC()
	return []byte{byte(t.Year() - 1900), byte(t.Month()), byte(t.Day()), byte(t.Hour()), byte(t.Minute()), byte(t.Second()), 0}
}

// decDate is the 17-byte volume descriptor date (ECMA-119 8.4.26.1); the
// zero time is "not specified".
func decDate(t time.Time) []byte {
	if t.IsZero() {
		return append([]byte("0000000000000000"), 0)
	}
	t = t.UTC()
	return append([]byte(fmt.Sprintf("%04d%02d%02d%02d%02d%02d%02d", t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond()/1e7)), 0)
}
