// Package bmcprobe asks a BMC whether it is there, without credentials:
// a registration error alone does not tell a BMC that does not answer
// from one that refuses the user name and password.
//
// IPMI: "Get Channel Authentication Capabilities" over RMCP (UDP), which
// every IPMI 1.5/2.0 BMC answers before any session. Redfish: GET of the
// service root (/redfish/v1/), which needs no login.
package bmcprobe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Result is what a probe found.
type Result int

const (
	// Unknown: the address's scheme is not one the probe speaks.
	Unknown Result = iota
	// Answers: something speaking the BMC's protocol answers there.
	Answers
	// Silent: nothing answers there (no route, closed port, timeout).
	Silent
)

// getChannelAuthCaps is an RMCP packet with an IPMI 1.5 session-less
// message: Get Channel Authentication Capabilities (NetFn App, cmd 0x38)
// for the current channel with the IPMI 2.0 bit, at Administrator level.
var getChannelAuthCaps = []byte{
	0x06, 0x00, 0xff, 0x07, // RMCP: version 6, sequence 0xff (no ack), class IPMI
	0x00, 0, 0, 0, 0, 0, 0, 0, 0, // session: auth type none, sequence 0, id 0
	0x09,             // message length
	0x20, 0x18, 0xc8, // BMC address, NetFn App (0x06<<2), checksum
	0x81, 0x00, 0x38, // remote console address, sequence, command
	0x8e, 0x04, // channel 0x0e (this one) | IPMI 2.0, privilege Administrator
	0xb5, // checksum
}

// Probe asks the BMC at address (a BareMetalHost's bmc.address) whether
// it is there, waiting at most timeout.
func Probe(ctx context.Context, address string, timeout time.Duration) (Result, error) {
	u, err := url.Parse(address)
	if err != nil || u.Host == "" {
		return Unknown, fmt.Errorf("BMC address %q is not a URL", address)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	scheme := u.Scheme
	switch {
	case scheme == "ipmi":
		port := u.Port()
		if port == "" {
			port = "623"
		}
		return probeIPMI(ctx, net.JoinHostPort(u.Hostname(), port))
	case strings.HasPrefix(scheme, "redfish") || strings.HasPrefix(scheme, "idrac-redfish") || strings.HasPrefix(scheme, "ilo5-redfish"):
		proto := "https"
		if strings.HasSuffix(scheme, "+http") {
			proto = "http"
		}
		return probeRedfish(ctx, proto+"://"+u.Host+"/redfish/v1/")
	}
	return Unknown, nil
}

func probeIPMI(ctx context.Context, addr string) (Result, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return Silent, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	buf := make([]byte, 512)
	// UDP may lose a packet: ask up to three times within the time given.
	for try := 0; try < 3; try++ {
		if _, err := conn.Write(getChannelAuthCaps); err != nil {
			return Silent, err
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		if dl, ok := ctx.Deadline(); ok && dl.Before(time.Now().Add(time.Second)) {
			conn.SetReadDeadline(dl)
		}
		n, err := conn.Read(buf)
		if err == nil && n >= 4 && buf[0] == 0x06 && buf[3]&0x1f == 0x07 {
			return Answers, nil
		}
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			return Silent, err // refused: nothing listens there
		}
		if ctx.Err() != nil {
			break
		}
	}
	return Silent, errors.New("no answer")
}

func probeRedfish(ctx context.Context, root string) (Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, root, nil)
	if err != nil {
		return Unknown, err
	}
	// Only whether something answers is asked: no credentials are sent.
	// Certificates are verified as always; a BMC whose certificate this
	// machine does not trust (most are self-signed) still answered.
	resp, err := http.DefaultClient.Do(req)
	var certErr *tls.CertificateVerificationError
	switch {
	case err == nil:
		resp.Body.Close()
		return Answers, nil
	case errors.As(err, &certErr):
		return Answers, nil
	}
	return Silent, err
}
