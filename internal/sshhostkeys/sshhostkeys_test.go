package sshhostkeys

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// boot lays out a live system's /etc/ssh as the stick carries it: the
// keys baked in when the root file system was built.
func boot(t *testing.T, root string) string {
	t.Helper()
	etc := filepath.Join(root, "etc", "ssh")
	os.RemoveAll(etc)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ssh_host_ed25519_key", "ssh_host_ed25519_key.pub", "ssh_host_rsa_key", "ssh_host_rsa_key.pub"} {
		if err := os.WriteFile(filepath.Join(etc, f), []byte("baked into the stick: "+f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(etc, "sshd_config"), []byte("# not a key\n"), 0o644)
	return etc
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFirstBootThenReboot(t *testing.T) {
	root := t.TempDir()
	disk := filepath.Join(t.TempDir(), "data") // not mounted yet
	store := filepath.Join(disk, "ssh-host-keys")

	// First boot, before firstboot formats the data disk: new keys.
	etc := boot(t, root)
	res, err := Ensure(etc, store, false)
	if err != nil || res != Generated {
		t.Fatalf("first boot: %v, %v", res, err)
	}
	key := read(t, filepath.Join(etc, "ssh_host_ed25519_key"))
	if bytes.HasPrefix(key, []byte("baked")) || !bytes.Contains(key, []byte("OPENSSH PRIVATE KEY")) {
		t.Fatalf("the ed25519 key was not replaced:\n%s", key)
	}
	if _, err := os.Stat(filepath.Join(etc, "ssh_host_rsa_key")); err == nil {
		t.Error("the baked rsa key is still there (every stick of one cache shares it)")
	}
	if _, err := os.Stat(store); err == nil {
		t.Error("keys were kept on a data disk that is not there")
	}
	if _, err := os.Stat(filepath.Join(etc, "sshd_config")); err != nil {
		t.Errorf("sshd_config went: %v", err)
	}

	// firstboot's data-disk step keeps them.
	if err := os.MkdirAll(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Save(etc, store); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(store); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(store, "ssh_host_ed25519_key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kept private key: %v %v", fi, err)
	}

	// Reboot: the stick's baked keys again, replaced by the kept ones.
	etc = boot(t, root)
	res, err = Ensure(etc, store, true)
	if err != nil || res != Restored {
		t.Fatalf("reboot: %v, %v", res, err)
	}
	if got := read(t, filepath.Join(etc, "ssh_host_ed25519_key")); !bytes.Equal(got, key) {
		t.Error("the reboot did not restore the first boot's key")
	}
	kept, _ := Keys(store)
	have, _ := Keys(etc)
	if len(have) != len(kept) {
		t.Errorf("after the reboot /etc/ssh has %v, the disk %v", have, kept)
	}

	// Saving again changes nothing.
	before := read(t, filepath.Join(store, "ssh_host_ed25519_key"))
	boot(t, root)
	Ensure(etc, filepath.Join(t.TempDir(), "other"), true)
	if err := Save(etc, store); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read(t, filepath.Join(store, "ssh_host_ed25519_key")), before) {
		t.Error("Save replaced keys the disk already kept")
	}
}

func TestGeneratedKeysAreKeptWhenTheDiskIsThere(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(t.TempDir(), "ssh-host-keys")
	etc := boot(t, root)
	if _, err := Ensure(etc, store, true); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read(t, filepath.Join(store, "ssh_host_ed25519_key.pub")), read(t, filepath.Join(etc, "ssh_host_ed25519_key.pub"))) {
		t.Error("the new keys were not kept on the disk")
	}
}

func TestIncompleteStoreIsNotRestored(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(t.TempDir(), "ssh-host-keys")
	os.MkdirAll(store, 0o700)
	// A private key without its public half (an interrupted copy).
	os.WriteFile(filepath.Join(store, "ssh_host_ed25519_key"), []byte("half"), 0o600)
	etc := boot(t, root)
	res, err := Ensure(etc, store, true)
	if err != nil || res != Generated {
		t.Fatalf("%v, %v", res, err)
	}
	if bytes.Equal(read(t, filepath.Join(etc, "ssh_host_ed25519_key")), []byte("half")) {
		t.Error("half a key set was restored")
	}
	// Save completes the store with the new set.
	if err := Save(etc, store); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read(t, filepath.Join(store, "ssh_host_ed25519_key")), read(t, filepath.Join(etc, "ssh_host_ed25519_key"))) {
		t.Error("Save left the half set")
	}
}

func TestSaveWithoutKeys(t *testing.T) {
	if err := Save(t.TempDir(), filepath.Join(t.TempDir(), "s")); err == nil {
		t.Error("Save with no host keys: no error")
	}
}
