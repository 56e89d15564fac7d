package site

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxBMCCAFile bounds bootstrap.bmcCAFile: a few hundred certificates.
const maxBMCCAFile = 1 << 20

// BMCCA reads bootstrap.bmcCAFile (relative to siteDir) and returns its
// certificates as PEM; nil when the site names none. Only CERTIFICATE
// blocks that parse are accepted: a private key, or anything else, is
// refused without being quoted.
func (b Bootstrap) BMCCA(siteDir string) ([]byte, error) {
	if b.BMCCAFile == "" {
		return nil, nil
	}
	path := b.BMCCAFile
	if !filepath.IsAbs(path) {
		path = filepath.Join(siteDir, path)
	}
	data, err := readRegular(path, maxBMCCAFile)
	if err != nil {
		return nil, err
	}
	return certificatesPEM(data)
}

// certificatesPEM checks that data is one or more PEM certificates and
// returns them re-encoded (comments and text between blocks dropped).
func certificatesPEM(data []byte) ([]byte, error) {
	var out bytes.Buffer
	rest := data
	for n := 1; ; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			if bytes.Contains([]byte(block.Type), []byte("PRIVATE KEY")) {
				return nil, fmt.Errorf("block %d is a private key: remove it at once and give only the CA's certificate", n)
			}
			return nil, fmt.Errorf("block %d is a %s, not a CERTIFICATE: give only certificates", n, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("certificate %d does not parse (%v)", n, err)
		}
		if err := pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}); err != nil {
			return nil, err
		}
	}
	if out.Len() == 0 {
		return nil, errors.New("no PEM certificate in it (-----BEGIN CERTIFICATE-----)")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("text after its last certificate that is not PEM: give only PEM certificates")
	}
	return out.Bytes(), nil
}

// validateBMCCA reports a bootstrap.bmcCAFile that cannot be read or is
// not certificates.
func (s *Site) validateBMCCA() field.ErrorList {
	if _, err := s.Bootstrap.BMCCA(s.Dir); err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("bootstrap", "bmcCAFile"), s.Bootstrap.BMCCAFile, err.Error())}
	}
	return nil
}
