// Package sitestep is firstboot's site step: load the site file, keep the
// SSH key pair (and, when there, the age identity) on the data disk, render
// the site's objects and apply them idempotently, then report each
// BareMetalHost's provisioning state. Nothing it logs, returns or writes
// besides the key files carries a secret.
package sitestep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/atomicfile"
	"github.com/bootstick/bootstick/internal/bpa/install"
	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/osimage"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sshkeys"
)

// Options are the site step's inputs.
type Options struct {
	// Site is the site file.
	Site string
	// Images are the bundle's OS images (nil: no bundle known).
	Images []osimage.Image
	// KeyDir keeps the SSH key pair (made there, 0600, when missing).
	KeyDir string
	// AgeIdentity is an age identity file; used when it exists.
	AgeIdentity string
	// ImageBaseURL is where bundled OS images are served; default from the site.
	ImageBaseURL string
	// Install is what the BPA installs from the stick; nil when the
	// bundle has none (render then writes no install ConfigMap).
	Install *install.Config
}

// Host is what status shows of a host besides its live state: nothing
// secret (the BMC address without any user information).
type Host struct {
	Name string `json:"name"`
	Role string `json:"role"`
	BMC  string `json:"bmc"`
	MAC  string `json:"mac"`
	// BootMode is the site's (UEFI, legacy).
	BootMode string `json:"bootMode,omitempty"`
	// Requires are the devices its requirements ask for that no device
	// plugin on the stick serves (site.Requirements.Devices).
	Requires []string `json:"requires,omitempty"`
	// LastErrorType and LastError are the operator's last error for the
	// host, kept by Follow: the operator clears its message each time it
	// tries again.
	LastErrorType string    `json:"lastErrorType,omitempty"`
	LastError     string    `json:"lastError,omitempty"`
	LastErrorAt   time.Time `json:"lastErrorAt,omitzero"`
}

// Load reads and validates the site with the age identity, when there is one.
func Load(o Options) (*site.Site, error) {
	opts := site.Options{BundledImages: o.Images}
	if o.Install != nil {
		opts.Plugins = o.Install.PluginNames()
	}
	if o.AgeIdentity != "" {
		if _, err := os.Stat(o.AgeIdentity); err == nil {
			ids, err := site.LoadIdentities(o.AgeIdentity)
			if err != nil {
				return nil, err
			}
			opts.Identities = ids
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reading age identity: %w", err)
		}
	}
	return site.Load(o.Site, opts)
}

// Check loads the site and checks, offline and changing nothing, that
// what it renders passes the baremetal-operator's admission rules: what
// Apply checks before it makes any key or applies any object.
func Check(o Options) (*site.Site, error) {
	s, err := Load(o)
	if err != nil {
		return nil, err
	}
	if err := render.Check(s, render.Options{Images: o.Images, ImageBaseURL: o.ImageBaseURL, Install: o.Install}); err != nil {
		return nil, fmt.Errorf("site %s: %w", o.Site, err)
	}
	return s, nil
}

// Apply loads and checks the site (Check), renders it with the data
// disk's SSH key and applies every object with server-side apply.
// Applying again changes nothing. Hosts past bootstrap.provisioningLimit
// are applied held (see Pacer), which Follow releases. It returns the
// hosts for status, in the site's order, and the pacer.
func Apply(ctx context.Context, c *kube.Client, o Options) ([]Host, *Pacer, error) {
	log := logctx.From(ctx)
	s, err := Check(o)
	if err != nil {
		return nil, nil, err
	}
	existing, err := hoststate.List(ctx, c)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the hosts already there: %w", err)
	}
	key, created, err := sshkeys.LoadOrGenerate(o.KeyDir)
	if err != nil {
		return nil, nil, err
	}
	if created {
		log.Info("generated the hosts' SSH key pair", "dir", o.KeyDir, "public", key.Public)
	}
	names := make([]string, len(s.Hosts))
	for i, h := range s.Hosts {
		names[i] = h.Name
	}
	hostKeys, made, err := sshkeys.LoadOrGenerateHosts(o.KeyDir, names)
	if err != nil {
		return nil, nil, err
	}
	if len(made) > 0 {
		log.Info("generated SSH host keys", "hosts", strings.Join(made, ", "))
	}
	objs, err := render.Render(s, render.Options{SSHKey: key, Images: o.Images, ImageBaseURL: o.ImageBaseURL, HostKeys: hostKeys, Install: o.Install})
	if err != nil {
		return nil, nil, err
	}
	us, err := render.Unstructured(objs)
	if err != nil {
		return nil, nil, err
	}
	p := &Pacer{c: c, limit: s.Bootstrap.ProvisioningLimit, order: names}
	if p.limit <= 0 {
		p.limit = DefaultLimit
	}
	p.hold(us, startHeld(names, existing, p.limit))
	if err := c.Apply(ctx, us); err != nil {
		return nil, nil, fmt.Errorf("applying the site's objects: %w", err)
	}
	log.Info(fmt.Sprintf("applied the site: %d objects for %d hosts", len(objs), len(s.Hosts)))
	if held := p.Held(); len(held) > 0 {
		log.Info(fmt.Sprintf("%d hosts wait for a slot: bootstrap.provisioningLimit lets %d at work at once", len(held), p.limit),
			"held", strings.Join(held, ", "))
	}
	hosts := make([]Host, 0, len(s.Hosts))
	for _, h := range s.Hosts {
		hosts = append(hosts, Host{Name: h.Name, Role: string(h.Role), BMC: site.RedactUserinfo(h.BMC.Address), MAC: h.BootMACAddress,
			BootMode: h.BootMode, Requires: h.Requirements.Devices()})
	}
	for _, n := range s.Notes() {
		log.Warn(n)
	}
	return hosts, p, nil
}

func orNone(s string) string {
	if s == "" {
		return "(none yet)"
	}
	return s
}

// WriteHosts records the hosts for status, atomically.
func WriteHosts(path string, hosts []Host) error {
	data, err := json.MarshalIndent(hosts, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, append(data, '\n'), 0o600)
}

// ReadHosts reads what WriteHosts wrote; a missing file is no hosts.
func ReadHosts(path string) ([]Host, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var hosts []Host
	if err := json.Unmarshal(data, &hosts); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return hosts, nil
}

// FollowOptions tune Follow.
type FollowOptions struct {
	// NoOperator is how long to wait for a first provisioning state: none
	// means no baremetal-operator acts on the hosts (reported, not an
	// error).
	NoOperator time.Duration
	// ErrorSettle is how long a host's error must hold before the host
	// counts as failed: the operator retries, and a passing error clears.
	ErrorSettle time.Duration
	// Registering is how long a host may stay registering with no error
	// before it counts as failed (StuckRegistering). Zero: no limit.
	Registering time.Duration
	// Poll is the interval between looks (default 10 s). A look lists
	// and decodes every BareMetalHost, inspection data and all; a host's
	// state changes over minutes. At 2 s, firstboot was among the
	// appliance's busiest processes in Journey B (39 % of a CPU in one
	// sample, beside the kubelet and the API server it kept busy).
	Poll time.Duration
	// Progress gets the hosts counted by state each time that changes.
	Progress func(string)
	// OnError gets a host each time its error message changes to a new
	// one.
	OnError func(hoststate.Host)
	// Pacer, from Apply, releases the held hosts as others are done; nil
	// holds none.
	Pacer *Pacer
	// Hosts, when not nil, are the hosts to follow, by name (the site's);
	// Follow leaves out every other BareMetalHost but Removed's.
	Hosts []string
	// Removed are hosts Prune deleted whose BareMetalHosts the operator
	// is deprovisioning: each is done once its BareMetalHost is gone, or
	// failed as the others. Until then it counts as at work.
	Removed []string
}

// Follow watches the BareMetalHosts until each is provisioned or failed:
// failing (an error, or the operator's error count above zero while it
// retries) for ErrorSettle, or begun failing a second time; a removed one
// (FollowOptions.Removed) until it is gone. It logs every change of state
// or error, and returns the last states, each failed host with its last
// error message.
func Follow(ctx context.Context, c *kube.Client, o FollowOptions) ([]hoststate.Host, error) {
	log := logctx.From(ctx)
	if o.Poll == 0 {
		o.Poll = 10 * time.Second
	}
	removed := map[string]bool{}
	for _, n := range o.Removed {
		removed[n] = true
	}
	var follows map[string]bool // nil: every host
	if o.Hosts != nil {
		follows = maps.Clone(removed)
		for _, n := range o.Hosts {
			follows[n] = true
		}
	}
	start := time.Now()
	last := map[string]string{}
	erredSince := map[string]time.Time{}
	failures := map[string]int{}            // times a host began failing
	lastSeen := map[string]hoststate.Host{} // its last error, kept across retries
	lastCount := ""
	tick := time.NewTicker(o.Poll)
	defer tick.Stop()
	var states []hoststate.Host
	for {
		now, err := hoststate.List(ctx, c)
		if err != nil {
			log.Warn("reading the hosts' states; trying again", "err", err)
		} else {
			states = now
			if follows != nil {
				states = slices.DeleteFunc(states, func(h hoststate.Host) bool { return !follows[h.Name] })
			}
			settled, anyState := 0, false
			done := map[string]bool{}
			for i, h := range states {
				st := h.State + "/" + h.ErrorType + "/" + h.Error
				if last[h.Name] != st {
					last[h.Name] = st
					log.Info("host", "name", h.Name, "state", orNone(h.State), "error", h.Error)
				}
				anyState = anyState || h.State != ""
				failing := h.ErrorCount > 0 || h.Error != ""
				switch {
				case !failing:
					delete(erredSince, h.Name)
				case erredSince[h.Name].IsZero():
					erredSince[h.Name] = time.Now()
					failures[h.Name]++
				}
				if h.Error != "" {
					if lastSeen[h.Name].Error != h.Error && o.OnError != nil {
						o.OnError(h)
					}
					lastSeen[h.Name] = h
				} else if failing {
					// The operator cleared its message to try again.
					states[i].ErrorType, states[i].Error = lastSeen[h.Name].ErrorType, lastSeen[h.Name].Error
				}
				if why := StuckRegistering(h, o.Registering); why != "" {
					states[i].ErrorType, states[i].Error = "registration error", why
					settled++
					done[h.Name] = true
					continue
				}
				switch {
				case h.State == "provisioned" && !failing && !removed[h.Name]:
					settled++
					done[h.Name] = true
				case failing && (time.Since(erredSince[h.Name]) >= o.ErrorSettle || failures[h.Name] >= 2):
					// The operator retries from the start after some
					// failures (a deploy that failed is cleaned up and
					// begun again, its error count reset): a host that
					// fails twice is failed, however short each error.
					settled++
					done[h.Name] = true
				}
			}
			if _, err := o.Pacer.release(ctx, states, func(h hoststate.Host) bool { return done[h.Name] }); err != nil {
				log.Warn("releasing held hosts; trying again", "err", err)
			}
			if count := CountStates(states); count != lastCount && o.Progress != nil {
				lastCount = count
				o.Progress(count)
			}
			if settled == len(states) {
				return states, nil
			}
			if !anyState && time.Since(start) >= o.NoOperator {
				return states, nil
			}
		}
		select {
		case <-ctx.Done():
			return states, ctx.Err()
		case <-tick.C:
		}
	}
}

// RegisteringLimit is how long a host may stay registering with no error
// before firstboot counts it as failed.
const RegisteringLimit = 5 * time.Minute

// StuckRegistering says why a host that has been registering for limit
// or longer with no error counts as failed: the operator reports some
// failures (Ironic refusing the node) only in its own log. It is empty
// for any other host, and when limit is zero.
func StuckRegistering(h hoststate.Host, limit time.Duration) string {
	if limit <= 0 || h.State != "registering" || h.Error != "" || h.ErrorCount > 0 || h.Since.IsZero() || time.Since(h.Since) < limit {
		return ""
	}
	return fmt.Sprintf("registering for %v with no error reported: the baremetal-operator may be failing to create the node in Ironic (see its log: kubectl -n baremetal-operator-system logs deploy/baremetal-operator)",
		time.Since(h.Since).Round(time.Second))
}

// Waiting is the state status gives a host the site step holds back.
const Waiting = "waiting"

// StateOf is a host's state for people: the operator's, or Waiting for a
// host held back.
func StateOf(h hoststate.Host) string {
	if h.State == "" && h.Paused == HoldValue {
		return Waiting
	}
	return h.State
}

// CountStates counts hosts by state, in the order a host goes through
// them: "hosts: 1 provisioned, 2 inspecting (1 with an error)".
func CountStates(states []hoststate.Host) string {
	order := []string{"provisioned", "provisioning", "available", "preparing", "inspecting", "registering", Waiting, "deprovisioning", "deleting", "unmanaged", "externally provisioned", "powering off before delete", ""}
	n, errs := map[string]int{}, 0
	for _, h := range states {
		n[StateOf(h)]++
		if h.Error != "" || h.ErrorCount > 0 {
			errs++
		}
	}
	var parts []string
	seen := map[string]bool{}
	add := func(st string) {
		if n[st] > 0 && !seen[st] {
			seen[st] = true
			parts = append(parts, fmt.Sprintf("%d %s", n[st], orNone(st)))
		}
	}
	for _, st := range order {
		add(st)
	}
	rest := make([]string, 0, len(n))
	for st := range n {
		rest = append(rest, st)
	}
	sort.Strings(rest)
	for _, st := range rest {
		add(st)
	}
	out := "hosts: " + strings.Join(parts, ", ")
	if len(states) == 0 {
		out = "hosts: none"
	}
	if errs > 0 {
		out += fmt.Sprintf(" (%d with an error: firstboot status)", errs)
	}
	return out
}
