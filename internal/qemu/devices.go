package qemu

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// overlay makes a qcow2 file over image at path, unless there is one.
func overlay(image, path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	abs, err := filepath.Abs(image)
	if err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", abs, path).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu: the stick's overlay (apt-get install qemu-utils): %v: %s", err, out)
	}
	return nil
}

// startTPM starts a software TPM 2.0 with its state in state, and returns
// its control socket for QEMU. The socket is made here and handed to swtpm
// already listening, so QEMU never races swtpm's start. swtpm ends when
// QEMU closes the socket (--terminate), or with us.
func startTPM(state, dir string) (string, error) {
	if _, err := exec.LookPath("swtpm"); err != nil {
		return "", fmt.Errorf("qemu: swtpm is missing (apt-get install swtpm): %w", err)
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return "", fmt.Errorf("qemu: TPM state: %w", err)
	}
	sock := filepath.Join(dir, "swtpm.sock")
	_ = os.Remove(sock)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return "", fmt.Errorf("qemu: TPM socket: %w", err)
	}
	l.SetUnlinkOnClose(false)
	f, err := l.File()
	l.Close() // f holds its own descriptor of the listening socket
	if err != nil {
		return "", fmt.Errorf("qemu: TPM socket: %w", err)
	}
	defer f.Close()
	cmd := exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+state,
		"--ctrl", "type=unixio,fd=3", "--terminate",
		"--log", "file="+filepath.Join(dir, "swtpm.log"))
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("qemu: swtpm: %w", err)
	}
	go cmd.Wait()
	return sock, nil
}

// dataDisk returns the data disk's file: a fresh sparse Dir/data.img, or
// DataDiskFile, created only when missing.
func dataDisk(o Options) (string, error) {
	path := o.DataDiskFile
	if path == "" {
		path = filepath.Join(o.Dir, "data.img")
		_ = os.Remove(path)
	} else if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if o.DataDisk <= 0 {
		return "", fmt.Errorf("%s is missing and DataDisk gives no size to create it", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	err = f.Truncate(o.DataDisk)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", err
	}
	return path, nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}
