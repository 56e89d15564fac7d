// Package luks keeps the data disk inside a LUKS2 volume whose one key is
// sealed to the machine's TPM 2.0 with systemd-cryptenroll, and unlocks it
// with systemd-cryptsetup, as an /etc/crypttab line with tpm2-device=auto
// would. The key is random, made in memory, and handed to cryptsetup
// through a file on /run (tmpfs) that is removed at once: it never reaches
// a disk, and once the TPM holds it no keyslot is left that anything else
// opens.
//
// PCR 7 is the only PCR the key is bound to. It measures the Secure Boot
// policy (on or off, and the keys in PK, KEK, db and dbx), which changes
// only when someone changes the firmware's trust. PCRs 0, 2 and 4 (the
// firmware's code, option ROMs, the boot loader and kernel) would also
// change with a firmware update or a newer stick, and lock the data disk
// of a healthy appliance away. The disk moved to another machine does not
// unseal whatever its PCRs say: the sealed key is bound to this TPM's
// storage root key, which never leaves the chip.
package luks

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/bootstick/bootstick/internal/command"
)

// TPMDevice is the kernel's TPM 2.0 resource manager: a machine with a
// TPM 2.0 (and its driver) has it.
const TPMDevice = "/dev/tpmrm0"

// PCRs are the PCRs the key is sealed to (see the package's comment).
const PCRs = "7"

// KeySize is a key's size in bytes, as long as LUKS2's default volume key
// (512 bits).
const KeySize = 64

// HasTPM reports whether the machine has a TPM 2.0 to seal a key to.
func HasTPM() bool {
	_, err := os.Stat(TPMDevice)
	return err == nil
}

// Mapper is the unlocked volume's device for name.
func Mapper(name string) string { return filepath.Join("/dev/mapper", name) }

// IsOpen reports whether name is unlocked.
func IsOpen(name string) bool {
	_, err := os.Stat(Mapper(name))
	return err == nil
}

// NewKey is a random key for a volume.
func NewKey() ([]byte, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("making the data disk's key: %w", err)
	}
	return key, nil
}

// Format makes dev a LUKS2 volume labelled label that key opens. With
// tpm, the key is sealed to the TPM and its own keyslot wiped: the TPM is
// then the only way in. keyDir is a folder on a tmpfs (e.g. /run/bootstick)
// where the key lives for the seconds cryptsetup needs it.
func Format(ctx context.Context, dev, label, keyDir string, key []byte, tpm bool) error {
	if tpm && !HasTPM() {
		return fmt.Errorf("sealing the data disk's key: this machine has no TPM 2.0 (%s)", TPMDevice)
	}
	keyFile, done, err := tmpKey(keyDir, key)
	if err != nil {
		return err
	}
	defer done()
	// The key is random and as long as the volume key: stretching it
	// (argon2id's seconds of work and a GiB of memory) would add nothing.
	if _, err := command.Run(ctx, command.Options{}, "cryptsetup", "luksFormat", "--batch-mode",
		"--type", "luks2", "--label", label, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000",
		"--key-file", keyFile, dev); err != nil {
		return fmt.Errorf("making %s a LUKS2 volume: %w", dev, err)
	}
	if !tpm {
		return nil
	}
	// The key goes into the TPM, and its own keyslot (0) is wiped.
	if _, err := command.Run(ctx, command.Options{}, cryptenroll(), "--unlock-key-file="+keyFile,
		"--tpm2-device=auto", "--tpm2-pcrs="+PCRs, "--wipe-slot=0", dev); err != nil {
		return fmt.Errorf("sealing the key of %s to the TPM: %w", dev, err)
	}
	return nil
}

// tmpKey writes key to a new file in keyDir (0600, in a 0700 folder) and
// returns it with the function that removes it.
func tmpKey(keyDir string, key []byte) (string, func(), error) {
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		return "", nil, fmt.Errorf("staging the data disk's key: %w", err)
	}
	dir, err := os.MkdirTemp(keyDir, "luks-")
	if err != nil {
		return "", nil, fmt.Errorf("staging the data disk's key: %w", err)
	}
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("staging the data disk's key: %w", err)
	}
	return keyFile, func() { os.RemoveAll(dir) }, nil
}

// OpenWithKey unlocks dev as Mapper(name) with key (given on cryptsetup's
// standard input); an open volume is left as it is.
func OpenWithKey(ctx context.Context, dev, name string, key []byte) (string, error) {
	if IsOpen(name) {
		return Mapper(name), nil
	}
	if _, err := command.Run(ctx, command.Options{Stdin: bytes.NewReader(key), Tail: 4}, "cryptsetup", "open", "--type", "luks2", "--key-file=-", "--perf-no_read_workqueue", "--perf-no_write_workqueue", dev, name); err != nil {
		return "", fmt.Errorf("unlocking the data disk %s with the key on the stick: %w\nthis stick's key does not open it: boot the stick that formatted it, or erase the disk (wipefs -a %s) to start over", dev, err, dev)
	}
	return Mapper(name), nil
}

// Open unlocks dev as Mapper(name) with the TPM; an open volume is left
// as it is.
func Open(ctx context.Context, dev, name string) (string, error) {
	if IsOpen(name) {
		return Mapper(name), nil
	}
	if !HasTPM() {
		return "", fmt.Errorf("unlocking the data disk %s: its key is sealed to a TPM 2.0, and this machine has none (%s); boot the machine that sealed it, or erase the disk (wipefs -a %s) to start over", dev, TPMDevice, dev)
	}
	if _, err := command.Run(ctx, command.Options{Tail: 4}, cryptsetupHelper(), "attach", name, dev, "-", "tpm2-device=auto,headless=true,"+noQueues); err != nil {
		return "", fmt.Errorf("unlocking the data disk %s with the TPM: %w\nthis TPM does not unseal its key: the disk was sealed on another machine, or PCR 7 changed (Secure Boot turned on or off, or its keys changed); boot the machine that sealed it, or erase the disk (wipefs -a %s) to start over", dev, err, dev)
	}
	return Mapper(name), nil
}

// noQueues has dm-crypt encrypt and decrypt in the caller's context rather
// than in its workqueues (crypttab's no-read-workqueue and
// no-write-workqueue, cryptsetup's --perf-no_*_workqueue): with AES-NI
// that is quicker, and etcd's fsyncs wait less.
const noQueues = "no-read-workqueue,no-write-workqueue"

// Close locks name again; a closed volume is left as it is.
func Close(ctx context.Context, name string) error {
	if !IsOpen(name) {
		return nil
	}
	if _, err := command.Run(ctx, command.Options{}, cryptsetupHelper(), "detach", name); err != nil {
		return fmt.Errorf("locking the data disk: %w", err)
	}
	return nil
}

// SetLabel relabels the LUKS2 header.
func SetLabel(ctx context.Context, dev, label string) error {
	if _, err := command.Run(ctx, command.Options{}, "cryptsetup", "config", "--label", label, dev); err != nil {
		return fmt.Errorf("labelling %s: %w", dev, err)
	}
	return nil
}

// Header is what a LUKS2 header says about how the volume opens.
type Header struct {
	// Keyslots are the keyslots in use, by number.
	Keyslots []string
	// TPM2PCRs are the PCRs of the systemd-tpm2 token; nil when the
	// volume has none.
	TPM2PCRs []int
	// TPM2Keyslots are the keyslots that token opens.
	TPM2Keyslots []string
}

// SealedOnly reports whether the TPM's token is the only way in: one
// keyslot, and the token opens it.
func (h Header) SealedOnly() bool {
	return len(h.Keyslots) == 1 && slices.Equal(h.Keyslots, h.TPM2Keyslots)
}

// ReadHeader reads dev's LUKS2 header (luksDump's JSON metadata).
func ReadHeader(ctx context.Context, dev string) (Header, error) {
	out, err := command.Output(ctx, command.Options{}, "cryptsetup", "luksDump", "--dump-json-metadata", dev)
	if err != nil {
		return Header{}, fmt.Errorf("reading the LUKS2 header of %s: %w", dev, err)
	}
	return parseHeader(out)
}

func parseHeader(data []byte) (Header, error) {
	var meta struct {
		Keyslots map[string]json.RawMessage `json:"keyslots"`
		Tokens   map[string]struct {
			Type     string   `json:"type"`
			Keyslots []string `json:"keyslots"`
			PCRs     []int    `json:"tpm2-pcrs"`
		} `json:"tokens"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return Header{}, fmt.Errorf("reading a LUKS2 header: %w", err)
	}
	var h Header
	for k := range meta.Keyslots {
		h.Keyslots = append(h.Keyslots, k)
	}
	slices.Sort(h.Keyslots)
	for _, t := range meta.Tokens {
		if t.Type == "systemd-tpm2" {
			h.TPM2PCRs = t.PCRs
			h.TPM2Keyslots = slices.Sorted(slices.Values(t.Keyslots))
			if h.TPM2PCRs == nil {
				h.TPM2PCRs = []int{}
			}
		}
	}
	return h, nil
}

// cryptenroll and cryptsetupHelper are systemd's programs (Debian's
// systemd-cryptsetup package): on PATH since systemd 256, in
// /usr/lib/systemd before.
func cryptenroll() string { return systemdProgram("systemd-cryptenroll") }

func cryptsetupHelper() string { return systemdProgram("systemd-cryptsetup") }

func systemdProgram(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p, err := exec.LookPath(filepath.Join("/usr/lib/systemd", name)); err == nil {
		return p
	}
	return name // the error names it
}
