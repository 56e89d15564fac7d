package qemu

import "testing"

// TestConsoleText: what OVMF, SeaBIOS and a Linux console draw with
// (colours, cursor moves, mode sets, character sets, resets) goes, the
// words stay.
func TestConsoleText(t *testing.T) {
	in := "\x1b[=3h\x1b[=3hBdsDxe: starting Boot0001 \"UEFI QEMU DVD-ROM\"\r\n\x1b[2J\x1b[1;1HSeaBIOS\x1b(B\x1b[0;1;39m ok\x1b[0m\x1bc\x1b[?25l."
	want := "BdsDxe: starting Boot0001 \"UEFI QEMU DVD-ROM\"\r\nSeaBIOS ok."
	if got := ConsoleText([]byte(in)); got != want {
		t.Errorf("ConsoleText = %q, want %q", got, want)
	}
}
