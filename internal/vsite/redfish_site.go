package vsite

import (
	"context"
	"crypto/tls"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// startRedfish makes the site's BMC CA and serves every Redfish machine's
// BMC over HTTPS on its address and BMCPort, from a socket made inside the
// namespace; Close stops them.
func (s *Site) startRedfish() error {
	var machines []Machine
	for _, m := range s.opts.Machines {
		if m.redfish() {
			machines = append(machines, m)
		}
	}
	if len(machines) == 0 {
		return nil
	}
	ca, err := newBMCCA(s.bmcAddrs())
	if err != nil {
		return err
	}
	s.ca = ca
	if err := os.WriteFile(s.BMCCAFile(), ca.pem, 0o644); err != nil {
		return fmt.Errorf("BMC CA: %w", err)
	}
	nsPath := filepath.Join("/run/netns", s.opts.Netns)
	// Every request's context ends with the site, so that closeRedfish's
	// wait is short and no request starts a machine after Close destroyed
	// it (QEMU outlives libvirtd).
	ctx, cancel := context.WithCancel(context.Background())
	s.stopRedfish = cancel
	for _, m := range machines {
		bmc := newRedfishBMC(m, &libvirtMachine{s: s, m: m}, s.absDir())
		addr := net.JoinHostPort(s.bmcAddr(m).String(), strconv.Itoa(m.BMCPort))
		ln, err := listenIn(nsPath, addr)
		if err != nil {
			return fmt.Errorf("machine %s: Redfish BMC on %s in %s: %w", m.Name, addr, s.opts.Netns, err)
		}
		logf, err := os.OpenFile(s.BMCLog(m.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			ln.Close()
			return fmt.Errorf("machine %s: Redfish BMC log: %w", m.Name, err)
		}
		s.redfishLogs = append(s.redfishLogs, logf)
		logger := log.New(logf, "", log.LstdFlags|log.Lmicroseconds|log.LUTC)
		// A real BMC waits on a slow client: a bootstrap machine that is
		// a TCG guest may take tens of seconds for a TLS handshake, or
		// leave a kept-alive connection idle for minutes and then use it.
		srv := &http.Server{
			Handler:           logRequests(bmc, logger),
			ReadHeaderTimeout: 5 * time.Minute,
			IdleTimeout:       15 * time.Minute,
			ErrorLog:          logger,
			BaseContext:       func(net.Listener) context.Context { return ctx },
		}
		s.redfish = append(s.redfish, srv)
		go srv.Serve(tls.NewListener(ln, ca.tlsConfig()))
	}
	return nil
}

// closeRedfish stops the Redfish BMCs and waits for their requests to
// end (each one's work on its machine included).
func (s *Site) closeRedfish(ctx context.Context) {
	if s.stopRedfish != nil {
		s.stopRedfish()
	}
	for _, srv := range s.redfish {
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
	}
	for _, f := range s.redfishLogs {
		f.Close()
	}
}

// BMCLog is the file where a Redfish machine's BMC logs each request
// (method, path, status, time taken: never a header, so no password or
// session token) and what its server saw go wrong (TLS handshakes,
// connections, panics).
func (s *Site) BMCLog(name string) string {
	return filepath.Join(s.opts.Dir, name+".redfish.log")
}

// logRequests logs each request h serves to l.
func logRequests(h http.Handler, l *log.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		l.Printf("%s %s %s: %d in %v", r.RemoteAddr, r.Method, r.URL.Path, sw.status, time.Since(start).Round(time.Millisecond))
	})
}

// statusWriter keeps the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// BMCCA is the PEM certificate of the CA that signed the Redfish BMCs'
// certificate (whose SANs are the BMCs' addresses), for Ironic and tests to trust; nil
// when the site has no Redfish BMC. BMCCAFile holds the same.
func (s *Site) BMCCA() []byte {
	if s.ca == nil {
		return nil
	}
	return append([]byte(nil), s.ca.pem...)
}

// BMCCAFile is the file of BMCCA, in Dir (there when the site has a
// Redfish BMC).
func (s *Site) BMCCAFile() string {
	return filepath.Join(s.opts.Dir, "bmc-ca.pem")
}

// absDir is Dir, absolute: where the BMCs keep inserted images and the
// machines find their QEMU.
func (s *Site) absDir() string {
	dir, err := filepath.Abs(s.opts.Dir)
	if err != nil {
		return s.opts.Dir
	}
	return dir
}
