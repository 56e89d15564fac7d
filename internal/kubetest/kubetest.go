// Package kubetest starts a real etcd and kube-apiserver, built by the
// toolchain, on loopback for API-level tests.
//
// Both processes are killed when the test ends, however it ends: t.Cleanup
// stops them gracefully, and the kernel kills them (Pdeathsig) if the test
// binary itself dies, say on a -timeout panic.
package kubetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/command"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/toolchain"
)

// Env is a running etcd and kube-apiserver.
type Env struct {
	// Config authenticates as a cluster admin (system:masters).
	Config *rest.Config
	// Client is a typed client for Config.
	Client *kubernetes.Clientset
	// Dir holds certificates, data and logs.
	Dir string
	// Kubeconfig is the path of a kubeconfig file for Config.
	Kubeconfig string

	procs []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan error
}

// Options tune Start.
type Options struct {
	// BinDir holds etcd and kube-apiserver; the toolchain's by default.
	BinDir string
	// ExtraArgs are added to kube-apiserver's flags.
	ExtraArgs []string
}

// Start starts etcd and kube-apiserver and waits until the apiserver is
// ready. It fails the test (never skips it) when the binaries are missing.
func Start(t testing.TB, opts ...Options) *Env {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.BinDir == "" {
		tc, err := toolchain.Open(cas.DefaultRoot())
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		o.BinDir = tc.BinDir()
	}
	env, err := start(t.TempDir(), o)
	if env != nil {
		t.Cleanup(func() {
			if t.Failed() {
				env.dumpLogs(t)
			}
			env.Stop()
		})
	}
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return env
}

func start(dir string, o Options) (*Env, error) {
	env := &Env{Dir: dir}
	pki, err := writePKI(dir)
	if err != nil {
		return env, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return env, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	if err := env.spawn("etcd", filepath.Join(o.BinDir, "etcd"),
		"--data-dir", filepath.Join(dir, "etcd"),
		"--name", "kubetest",
		"--listen-client-urls", etcdURL,
		"--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-cluster", fmt.Sprintf("kubetest=http://127.0.0.1:%d", etcdPeer),
		"--unsafe-no-fsync",
		"--log-level", "warn",
	); err != nil {
		return env, err
	}
	if err := env.waitHTTP(etcdURL+"/health", http.DefaultClient, 30*time.Second); err != nil {
		return env, err
	}

	args := []string{
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(apiPort),
		"--tls-cert-file", pki.servingCert,
		"--tls-private-key-file", pki.servingKey,
		"--client-ca-file", pki.caCert,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", pki.saKey,
		"--service-account-signing-key-file", pki.saKey,
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--authorization-mode", "Node,RBAC",
		"--allow-privileged=true",
		"--disable-admission-plugins", "ServiceAccount",
		"--v", "1",
	}
	args = append(args, o.ExtraArgs...)
	if err := env.spawn("kube-apiserver", filepath.Join(o.BinDir, "kube-apiserver"), args...); err != nil {
		return env, err
	}
	host := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	env.Config = &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   pki.caPEM,
			CertData: pki.clientCertPEM,
			KeyData:  pki.clientKeyPEM,
		},
		QPS:   200,
		Burst: 400,
	}
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		return env, err
	}
	if err := env.waitHTTP(host+"/readyz", hc, 90*time.Second); err != nil {
		return env, err
	}
	env.Client, err = kubernetes.NewForConfig(env.Config)
	if err != nil {
		return env, err
	}
	env.Kubeconfig = filepath.Join(dir, "kubeconfig")
	return env, os.WriteFile(env.Kubeconfig, kubeconfig(host, pki), 0o600)
}

func (e *Env) spawn(name, bin string, args ...string) error {
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s: %w: run `make toolchain`", name, err)
	}
	logPath := filepath.Join(e.Dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); lf.Close() }()
	e.procs = append(e.procs, p)
	return nil
}

// waitHTTP polls url until it answers 200, a process exits, or the time is
// up.
func (e *Env) waitHTTP(url string, c *http.Client, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		for _, p := range e.procs {
			select {
			case err := <-p.done:
				p.done <- err
				return fmt.Errorf("%s exited while starting (%v):\n%s", p.name, err, tailFile(p.log, 30))
			default:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		cancel()
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s (last: %s)", url, limit, last)
}

// Stop stops the processes, newest first: SIGTERM, then SIGKILL after 10 s.
func (e *Env) Stop() {
	for i := len(e.procs) - 1; i >= 0; i-- {
		p := e.procs[i]
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case err := <-p.done:
			p.done <- err
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			err := <-p.done
			p.done <- err
		}
	}
	e.procs = nil
}

// Running reports which of the processes are still running.
func (e *Env) Running() []int {
	var pids []int
	for _, p := range e.procs {
		select {
		case err := <-p.done:
			p.done <- err
		default:
			pids = append(pids, p.cmd.Process.Pid)
		}
	}
	return pids
}

func (e *Env) dumpLogs(t testing.TB) {
	for _, p := range e.procs {
		t.Logf("last lines of %s:\n%s", p.name, tailFile(p.log, 40))
	}
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return command.Tail(string(b), n)
}

// freePorts asks the kernel for n free loopback ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

type pki struct {
	caCert, servingCert, servingKey, saKey string
	caPEM, clientCertPEM, clientKeyPEM     []byte
}

// writePKI makes a CA, a serving certificate for 127.0.0.1, an admin
// client certificate and a service-account key.
func writePKI(dir string) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubetest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, subj pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) ([]byte, []byte, error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      subj,
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		kb, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
	}
	servingCert, servingKey, err := issue(2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}, []string{"localhost", "kubernetes", "kubernetes.default.svc"})
	if err != nil {
		return nil, err
	}
	clientCert, clientKey, err := issue(3, pkix.Name{CommonName: "kubetest-admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	p := &pki{
		caCert:        filepath.Join(dir, "ca.crt"),
		servingCert:   filepath.Join(dir, "apiserver.crt"),
		servingKey:    filepath.Join(dir, "apiserver.key"),
		saKey:         filepath.Join(dir, "sa.key"),
		caPEM:         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		clientCertPEM: clientCert,
		clientKeyPEM:  clientKey,
	}
	for path, data := range map[string][]byte{
		p.caCert:      p.caPEM,
		p.servingCert: servingCert,
		p.servingKey:  servingKey,
		p.saKey:       pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return p, nil
}

func kubeconfig(host string, p *pki) []byte {
	enc := base64.StdEncoding.EncodeToString
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: kubetest
  context: {cluster: kubetest, user: admin}
current-context: kubetest
`, host, enc(p.caPEM), enc(p.clientCertPEM), enc(p.clientKeyPEM)))
}
