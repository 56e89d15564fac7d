package vsite

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"time"
)

// bmcCA is the CA a site makes for its Redfish BMCs, and the one server
// certificate it signs for them all, naming every BMC address. The keys
// stay in memory.
type bmcCA struct {
	pem  []byte // the CA's certificate
	cert tls.Certificate
}

// bmcValidity is how long the CA and the certificate last: longer than
// any site lives.
const bmcValidity = 30 * 24 * time.Hour

func newBMCCA(addrs []netip.Addr) (*bmcCA, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("BMC CA: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "bootstick virtual site BMC CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(bmcValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("BMC CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("BMC CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("BMC certificate: %w", err)
	}
	var ips []net.IP
	for _, a := range addrs {
		ips = append(ips, a.AsSlice())
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: addrs[0].String()},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(bmcValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("BMC certificate: %w", err)
	}
	return &bmcCA{
		pem:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		cert: tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key},
	}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// tlsConfig is the BMCs' server side: TLS 1.2 or later, with the chain.
func (c *bmcCA) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{c.cert}}
}
