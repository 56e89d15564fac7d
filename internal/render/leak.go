package render

import (
	"encoding/base64"
	"strings"
)

// LeakNeedles returns the strings that give a secret away in text: each
// password as is and base64-encoded, and the private key's PEM body lines
// and its base64 encoding. Tests grep output, errors and logs for them.
func LeakNeedles(passwords []string, privateKey []byte) []string {
	var out []string
	for _, p := range passwords {
		out = append(out, p, base64.StdEncoding.EncodeToString([]byte(p)))
	}
	if len(privateKey) > 0 {
		for _, line := range strings.Split(string(privateKey), "\n") {
			if len(line) >= 20 && !strings.HasPrefix(line, "-----") {
				out = append(out, line)
			}
		}
		enc := base64.StdEncoding.EncodeToString(privateKey)
		out = append(out, enc[:40], enc[len(enc)/2:len(enc)/2+40])
	}
	return out
}
