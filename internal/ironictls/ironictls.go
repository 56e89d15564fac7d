// Package ironictls makes the provisioning plane's TLS: a CA the bootstrap
// machine makes at its first boot, and the certificate Ironic's API serves
// on the provisioning address, signed by it. The deploy ramdisk trusts
// that CA alone when it looks itself up and heartbeats (package ramdisk's
// extra archive carries it), and the baremetal-operator verifies Ironic
// against it. The CA's key signs Ironic's certificate and nothing else; it
// lives only in a Secret (etcd, encrypted, on the sealed data disk).
package ironictls

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"time"
)

// Validity: the CA outlives any site; Ironic's certificate is issued again
// well before it ends (Renew), at any firstboot run. NotBefore is a day
// back, so a host whose clock the site's NTP has not set yet (it runs
// behind) still accepts a certificate made today.
const (
	caValidity   = 20 * 365 * 24 * time.Hour
	certValidity = 5 * 365 * 24 * time.Hour
	renewBefore  = 365 * 24 * time.Hour
	backdate     = 24 * time.Hour
)

// Set is the CA and Ironic's serving certificate, PEM. Key and CAKey are
// secrets: they never reach a log, an error or a ConfigMap.
type Set struct {
	CA, CAKey  []byte
	Cert, Key  []byte
	certParsed *x509.Certificate
}

// New makes a CA and a certificate for Ironic at addr.
func New(rnd io.Reader, addr netip.Addr, now time.Time) (*Set, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rnd)
	if err != nil {
		return nil, fmt.Errorf("making the provisioning CA's key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(rnd),
		Subject:               pkix.Name{CommonName: "bootstick provisioning CA"},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rnd, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("making the provisioning CA: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(caKey)
	if err != nil {
		return nil, fmt.Errorf("making the provisioning CA: %w", err)
	}
	s := &Set{CA: pemBlock("CERTIFICATE", der), CAKey: pemBlock("PRIVATE KEY", kder)}
	if err := s.issue(rnd, addr, now); err != nil {
		return nil, err
	}
	return s, nil
}

// Load reads a Set back (from the Secret that keeps it) and checks that
// its parts belong together: the certificate is the CA's and the keys are
// theirs.
func Load(ca, caKey, cert, key []byte) (*Set, error) {
	caPair, err := tls.X509KeyPair(ca, caKey)
	if err != nil {
		return nil, fmt.Errorf("the provisioning CA and its key: %w", err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("Ironic's certificate: %w", err)
	}
	s := &Set{CA: ca, CAKey: caKey, Cert: cert, Key: key, certParsed: pair.Leaf}
	if err := s.certParsed.CheckSignatureFrom(caPair.Leaf); err != nil {
		return nil, fmt.Errorf("Ironic's certificate is not the provisioning CA's: %w", err)
	}
	return s, nil
}

// Renew issues Ironic's certificate again, with the same CA, when it does
// not name addr (the site's provisioning address changed) or ends within
// a year of now. It says whether it did.
func (s *Set) Renew(rnd io.Reader, addr netip.Addr, now time.Time) (bool, error) {
	c := s.certParsed
	if c != nil && now.Add(renewBefore).Before(c.NotAfter) && now.After(c.NotBefore) && names(c, addr) {
		return false, nil
	}
	return true, s.issue(rnd, addr, now)
}

// issue signs a new certificate for Ironic's API at addr with the CA.
func (s *Set) issue(rnd io.Reader, addr netip.Addr, now time.Time) error {
	ca, err := parseCert(s.CA)
	if err != nil {
		return fmt.Errorf("the provisioning CA: %w", err)
	}
	caPair, err := tls.X509KeyPair(s.CA, s.CAKey)
	if err != nil {
		return fmt.Errorf("the provisioning CA's key: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rnd)
	if err != nil {
		return fmt.Errorf("making Ironic's key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(rnd),
		Subject:      pkix.Name{CommonName: "ironic " + addr.String()},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{addr.AsSlice()},
	}
	der, err := x509.CreateCertificate(rnd, tmpl, ca, &key.PublicKey, caPair.PrivateKey.(crypto.Signer))
	if err != nil {
		return fmt.Errorf("signing Ironic's certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("signing Ironic's certificate: %w", err)
	}
	s.Cert, s.Key = pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder)
	s.certParsed, err = x509.ParseCertificate(der)
	return err
}

// Pool is the CA as a certificate pool (what a client verifies Ironic
// with).
func (s *Set) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(s.CA)
	return p
}

func names(c *x509.Certificate, addr netip.Addr) bool {
	for _, ip := range c.IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok && a.Unmap() == addr.Unmap() {
			return true
		}
	}
	return false
}

func parseCert(p []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

func pemBlock(typ string, der []byte) []byte {
	var b bytes.Buffer
	_ = pem.Encode(&b, &pem.Block{Type: typ, Bytes: der})
	return b.Bytes()
}

func serial(rnd io.Reader) *big.Int {
	n, err := rand.Int(rnd, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil || n.Sign() == 0 {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
