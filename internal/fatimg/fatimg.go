// Package fatimg makes small FAT images (the EFI system partitions of the
// stick and of the compute OS image) with go-diskfs, reproducibly.
package fatimg

import (
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/fat12"
	"github.com/diskfs/go-diskfs/filesystem/fat16"
)

// envMu serializes the SOURCE_DATE_EPOCH dance below: go-diskfs's FAT code
// reads the date from the environment.
var envMu sync.Mutex

// Build builds a FAT12 (or, when larger, FAT16) image holding files,
// with go-diskfs, stamped with epoch.
func Build(files map[string][]byte, epoch time.Time) ([]byte, error) {
	var total int64
	for _, d := range files {
		total += int64(len(d))
	}
	// Room for the FATs, folders and cluster slack, in whole MiB.
	size := (total + total/8 + 512<<10 + (1<<20 - 1)) / (1 << 20) * (1 << 20)

	tmp, err := os.CreateTemp("", "bootstick-efi-*.img")
	if err != nil {
		return nil, fmt.Errorf("building a FAT image: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := tmp.Truncate(size); err != nil {
		return nil, fmt.Errorf("building a FAT image: %w", err)
	}

	envMu.Lock()
	old, had := os.LookupEnv("SOURCE_DATE_EPOCH")
	_ = os.Setenv("SOURCE_DATE_EPOCH", strconv.FormatInt(epoch.Unix(), 10))
	err = func() error {
		b := file.New(tmp, false)
		var fs filesystem.FileSystem
		var err error
		if size <= fat12.Fat12MaxSize {
			fs, err = fat12.Create(b, size, 0, 512, "EFIBOOT", true)
		} else {
			fs, err = fat16.Create(b, size, 0, 512, "EFIBOOT", true)
		}
		if err != nil {
			return err
		}
		names := make([]string, 0, len(files))
		for name := range files {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			data := files[name]
			if err := fs.Mkdir("/" + path.Dir(name)); err != nil {
				return err
			}
			f, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
			if err != nil {
				return err
			}
			if _, err := f.Write(data); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
		return nil
	}()
	if had {
		_ = os.Setenv("SOURCE_DATE_EPOCH", old)
	} else {
		_ = os.Unsetenv("SOURCE_DATE_EPOCH")
	}
	envMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("building a FAT image: %w", err)
	}
	return os.ReadFile(tmp.Name())
}
