package ironictls

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/netip"
	"testing"
	"time"
)

// serve starts an HTTPS server on addr (port 0) with s's certificate and
// returns its URL.
func serve(t *testing.T, s *Set, addr netip.Addr) string {
	t.Helper()
	pair, err := tls.X509KeyPair(s.Cert, s.Key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", netip.AddrPortFrom(addr, 0).String(), &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ironic")) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "https://" + l.Addr().String() + "/"
}

func get(url string, pool *x509.CertPool) error {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// TestIronicTLS: a client that trusts the CA alone (as the deploy ramdisk
// and the baremetal-operator do) reaches Ironic at its address; one that
// trusts another CA, or the system's roots, does not. The Set survives the
// Secret it is kept in, and a Set whose parts do not belong together is
// refused.
func TestIronicTLS(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	now := time.Now()
	s, err := New(rand.Reader, lo, now)
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, s, lo)
	if err := get(url, s.Pool()); err != nil {
		t.Fatalf("a client trusting the provisioning CA: %v", err)
	}
	other, err := New(rand.Reader, lo, now)
	if err != nil {
		t.Fatal(err)
	}
	var unknown x509.UnknownAuthorityError
	if err := get(url, other.Pool()); !errors.As(err, &unknown) {
		t.Errorf("a client trusting another CA: %v, want an unknown authority", err)
	}
	if err := get(url, nil); err == nil {
		t.Error("a client trusting the system's roots reached Ironic")
	}

	loaded, err := Load(s.CA, s.CAKey, s.Cert, s.Key)
	if err != nil {
		t.Fatalf("Load of a Set New made: %v", err)
	}
	if _, err := Load(s.CA, s.CAKey, other.Cert, other.Key); err == nil {
		t.Error("Load took a certificate of another CA")
	}
	if _, err := Load(s.CA, other.CAKey, s.Cert, s.Key); err == nil {
		t.Error("Load took a CA with another CA's key")
	}
	if _, err := Load(s.CA, s.CAKey, s.Cert, other.Key); err == nil {
		t.Error("Load took a certificate with another key")
	}

	// A fresh certificate for the same address stays; a new address or a
	// certificate near its end is issued again by the same CA.
	if renewed, err := loaded.Renew(rand.Reader, lo, now); err != nil || renewed {
		t.Errorf("Renew of a fresh certificate: %v, %v; want kept", renewed, err)
	}
	moved := netip.MustParseAddr("127.0.0.2")
	if renewed, err := loaded.Renew(rand.Reader, moved, now); err != nil || !renewed {
		t.Fatalf("Renew for a new address: %v, %v; want issued again", renewed, err)
	}
	if err := get(serve(t, loaded, moved), s.Pool()); err != nil {
		t.Errorf("the certificate issued again, trusted by the same CA: %v", err)
	}
	late := now.Add(certValidity - 30*24*time.Hour)
	if renewed, err := loaded.Renew(rand.Reader, moved, late); err != nil || !renewed {
		t.Errorf("Renew a month before the end: %v, %v; want issued again", renewed, err)
	}
	c, _ := parseCert(loaded.Cert)
	if !c.NotAfter.After(late.Add(renewBefore)) {
		t.Errorf("the renewed certificate ends %s", c.NotAfter)
	}
}
