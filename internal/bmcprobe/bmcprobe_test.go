package bmcprobe

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A fake BMC that answers RMCP the way a BMC does; the real one
// (virtualbmc) is probed by the virtual site's test.
func TestIPMIAnswersAndSilence(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n == len(getChannelAuthCaps) {
				pc.WriteTo([]byte{0x06, 0x00, 0xff, 0x07, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}, from)
			}
		}
	}()
	ctx := context.Background()
	if r, err := Probe(ctx, "ipmi://"+pc.LocalAddr().String(), 3*time.Second); r != Answers {
		t.Errorf("a BMC that answers: %v %v", r, err)
	}
	// A port where nothing listens.
	closed, _ := net.ListenPacket("udp", "127.0.0.1:0")
	addr := closed.LocalAddr().String()
	closed.Close()
	if r, _ := Probe(ctx, "ipmi://"+addr, 3*time.Second); r != Silent {
		t.Errorf("nothing at %s: %v", addr, r)
	}
	if r, _ := Probe(ctx, "idrac-virtualmedia://192.0.2.1/x", time.Second); r != Unknown {
		t.Errorf("a scheme the probe does not speak: %v", r)
	}
}

func TestRedfishAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			t.Error("the probe sent credentials")
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	if r, err := Probe(context.Background(), "redfish+http://"+host+"/redfish/v1/Systems/1", 3*time.Second); r != Answers {
		t.Errorf("a Redfish service that answers: %v %v", r, err)
	}
}

// A self-signed BMC answers, and the probe does not switch verification
// off to find out.
func TestRedfishSelfSignedAnswers(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the probe finished a TLS handshake with a certificate it cannot trust")
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	if r, err := Probe(context.Background(), "redfish://"+host+"/redfish/v1/Systems/1", 3*time.Second); r != Answers {
		t.Errorf("a Redfish service with a self-signed certificate: %v %v", r, err)
	}
}
