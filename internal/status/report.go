package status

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bootstick/bootstick/internal/pipeline"
)

// Report is what `firstboot status` shows.
type Report struct {
	// Phase is "not started", "running", "interrupted", "failed" or "done".
	Phase     string       `json:"phase"`
	HolderPID int          `json:"holderPID,omitempty"` // the running firstboot
	Started   time.Time    `json:"started,omitzero"`
	Finished  time.Time    `json:"finished,omitzero"`
	Steps     []StepReport `json:"steps"`
	LastError *ErrorReport `json:"lastError,omitempty"`
	// Problems are other things found wrong, e.g. corrupted blobs.
	Problems []string `json:"problems,omitempty"`
	// Notes are what the site asks that this stick cannot fully serve
	// (a host that requires SR-IOV or QAT).
	Notes []string `json:"notes,omitempty"`
	// Firewall says whether the provisioning network's firewall is in
	// the kernel; empty before firstboot's firewall step loaded it.
	Firewall string `json:"firewall,omitempty"`
	// DataDisk says how the data disk keeps its secrets (encrypted, and
	// where its key lives); empty where there is no data disk.
	DataDisk string `json:"dataDisk,omitempty"`
	// Cluster is the node and its pods; nil before kubeadm init.
	Cluster *Cluster `json:"cluster,omitempty"`
	// Hosts are the site's hosts with their provisioning state.
	Hosts []Host `json:"hosts,omitempty"`
}

// Cluster is what the API server says about the node and its pods.
type Cluster struct {
	// Error is set when the API server could not be asked.
	Error string `json:"error,omitempty"`
	Node  string `json:"node,omitempty"`
	// NodeAddress is the node's InternalIP: the address of its default
	// route, or its provisioning address on a site with no router.
	NodeAddress string `json:"nodeAddress,omitempty"`
	// NodeReady is the node's Ready condition.
	NodeReady bool `json:"nodeReady"`
	// PodsNotReady are namespace/name (phase) of every pod not ready.
	PodsNotReady []string `json:"podsNotReady"`
	// Services are the appliance's own: Ironic, the baremetal-operator
	// and the BPA.
	Services []Service `json:"services,omitempty"`
	// DHCP is which machines the provisioning network's DHCP answers; nil
	// without a site (no Ironic configuration).
	DHCP *DHCP `json:"dhcp,omitempty"`
}

// DHCP is which machines Ironic's dnsmasq answers.
type DHCP struct {
	// Hosts is the site's bootstrap.provisioning.dhcpHosts, as Ironic
	// runs with it: "site" (the MACs of Answers only) or "any" (every
	// MAC but those of Refuses).
	Hosts string `json:"hosts"`
	// Answers and Refuses are the boot MACs of the host list on the data
	// disk: the site's hosts (and those being deprovisioned), and the
	// MACs it never answers (a virtual-media host with a static address,
	// a host removed from the site).
	Answers []string `json:"answers"`
	Refuses []string `json:"refuses"`
	// Error is set when the host list could not be read.
	Error string `json:"error,omitempty"`
}

// line is the DHCP for people.
func (d *DHCP) line() string {
	if d.Error != "" {
		return "DHCP: " + d.Error
	}
	if d.Hosts == "any" {
		return fmt.Sprintf("DHCP: any machine (dhcpHosts: any): answers every MAC but %d refused", len(d.Refuses))
	}
	return fmt.Sprintf("DHCP: the site's hosts only (dhcpHosts: %s): answers %d MACs, refuses %d and every other MAC, each refusal logged as \"ignored\" (kubectl -n ironic logs deploy/ironic -c dnsmasq)",
		d.Hosts, len(d.Answers), len(d.Refuses))
}

// Service is one of the appliance's Deployments.
type Service struct {
	Name string `json:"name"` // what people call it: Ironic
	// Deployment is namespace/name.
	Deployment string `json:"deployment"`
	// State is "ready", "not ready" or "not deployed".
	State    string `json:"state"`
	Restarts int32  `json:"restarts"`
	Detail   string `json:"detail,omitempty"`
}

// Host is one site host: from the site (name, BMC without credentials,
// boot MAC) and from its BareMetalHost (state, error).
type Host struct {
	Name string `json:"name"`
	Role string `json:"role,omitempty"`
	BMC  string `json:"bmc"`
	MAC  string `json:"mac"`
	// BMCType is the Ironic hardware type the BMC is driven with (ipmi,
	// redfish, idrac), BootMode the site's (UEFI, UEFISecureBoot, legacy), and
	// BootInterface how Ironic boots the host (ipxe, redfish-virtual-media).
	BMCType       string `json:"bmcType,omitempty"`
	BootMode      string `json:"bootMode,omitempty"`
	BootInterface string `json:"bootInterface,omitempty"`
	State         string `json:"state"`
	// Since is when the host entered State (zero: unknown), and
	// SecondsInState how long ago that was when the report was made.
	Since          time.Time `json:"since,omitzero"`
	SecondsInState float64   `json:"secondsInState,omitempty"`
	// ErrorType and Error are the baremetal-operator's (with Ironic's
	// message); Reason says in words what to do.
	ErrorType string `json:"errorType,omitempty"`
	Error     string `json:"error,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// Node is where the BPA is with the host once it is provisioned
	// (Installing with its phase, Unreachable, Ready, Error), and
	// NodeError its last error.
	Node      string `json:"node,omitempty"`
	NodeError string `json:"nodeError,omitempty"`
}

// StepReport is one step.
type StepReport struct {
	Name            string    `json:"name"`
	State           string    `json:"state"`
	DurationSeconds float64   `json:"durationSeconds,omitempty"`
	Started         time.Time `json:"started,omitzero"`
	Ended           time.Time `json:"ended,omitzero"`
	Attempts        int       `json:"attempts,omitempty"`
	Skipped         bool      `json:"skipped,omitempty"`
	Error           string    `json:"error,omitempty"`
}

// ErrorReport is the last failure and what to do about it.
type ErrorReport struct {
	Step  string `json:"step"`
	Error string `json:"error"`
	Hint  string `json:"hint,omitempty"`
}

// Input is what a report is built from.
type Input struct {
	State *pipeline.State
	// Running is true when a run holds the lock; HolderPID is its pid.
	Running   bool
	HolderPID int
	Problems  []string
}

// Build makes the report.
func Build(in Input) Report {
	st := in.State
	r := Report{Started: st.Started, Finished: st.Finished, Problems: in.Problems, Steps: []StepReport{}}
	if in.Running {
		r.HolderPID = in.HolderPID
	}
	anyStarted, allDone, failed, interrupted := false, len(st.Steps) > 0, false, false
	for _, s := range st.Steps {
		state := s.State
		if state == pipeline.StateRunning && !in.Running {
			state, interrupted = "interrupted", true
		}
		if state != pipeline.StatePending {
			anyStarted = true
		}
		if s.State != pipeline.StateDone {
			allDone = false
		}
		if s.State == pipeline.StateFailed {
			failed = true
		}
		r.Steps = append(r.Steps, StepReport{Name: s.Name, State: state, DurationSeconds: s.Duration.Seconds(),
			Started: s.Started, Ended: s.Ended, Attempts: s.Attempts, Skipped: s.Skipped, Error: s.Error})
	}
	switch {
	case in.Running:
		r.Phase = "running"
	case allDone:
		r.Phase = "done"
	case failed:
		r.Phase = "failed"
	case interrupted:
		r.Phase = "interrupted"
	case anyStarted:
		r.Phase = "incomplete"
	default:
		r.Phase = "not started"
	}
	if last := st.LastError(); last != nil {
		hint := last.Hint
		if hint == "" {
			hint = "fix the cause, then run `firstboot run` again: finished steps are not repeated"
		}
		r.LastError = &ErrorReport{Step: last.Name, Error: last.Error, Hint: hint}
	}
	return r
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report for people.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "firstboot: %s", r.Phase)
	if r.HolderPID > 0 {
		fmt.Fprintf(&b, " (pid %d)", r.HolderPID)
	}
	b.WriteString("\n\n")
	width := 4
	for _, s := range r.Steps {
		width = max(width, len(s.Name))
	}
	var total float64
	for i, s := range r.Steps {
		dur := ""
		if s.DurationSeconds > 0 {
			dur = fmtSeconds(s.DurationSeconds)
			total += s.DurationSeconds
		}
		note := ""
		if s.Skipped {
			note = "  (found in place)"
		}
		if s.Attempts > 1 {
			note += fmt.Sprintf("  (%d attempts)", s.Attempts)
		}
		line := fmt.Sprintf("  %2d  %-*s  %-11s  %7s%s", i+1, width, s.Name, s.State, dur, note)
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	if total > 0 {
		fmt.Fprintf(&b, "      %-*s  %-11s  %7s\n", width, "", "total", fmtSeconds(total))
	}
	if r.LastError != nil {
		fmt.Fprintf(&b, "\nlast error, in step %s:\n  %s\nhint: %s\n", r.LastError.Step, r.LastError.Error, r.LastError.Hint)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "\nproblem: %s\n", p)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nnote: %s\n", n)
	}
	if r.Firewall != "" {
		fmt.Fprintf(&b, "\nfirewall: %s\n", r.Firewall)
	}
	if r.DataDisk != "" {
		fmt.Fprintf(&b, "data disk: %s\n", r.DataDisk)
	}
	if c := r.Cluster; c != nil {
		b.WriteString("\n")
		switch {
		case c.Error != "":
			fmt.Fprintf(&b, "cluster: not reachable: %s\n", c.Error)
		default:
			ready := "NotReady"
			if c.NodeReady {
				ready = "Ready"
			}
			node := c.Node
			if c.NodeAddress != "" {
				node += " at " + c.NodeAddress
			}
			fmt.Fprintf(&b, "node %s: %s\n", node, ready)
			for _, sv := range c.Services {
				fmt.Fprintf(&b, "%s (%s): %s, %d restarts", sv.Name, sv.Deployment, sv.State, sv.Restarts)
				if sv.Detail != "" {
					fmt.Fprintf(&b, " (%s)", sv.Detail)
				}
				b.WriteString("\n")
			}
			if c.DHCP != nil {
				b.WriteString(c.DHCP.line() + "\n")
			}
			if len(c.PodsNotReady) == 0 {
				b.WriteString("pods: all ready\n")
			} else {
				fmt.Fprintf(&b, "pods not ready (%d):\n", len(c.PodsNotReady))
				for _, p := range c.PodsNotReady {
					fmt.Fprintf(&b, "  %s\n", p)
				}
			}
		}
	}
	if len(r.Hosts) > 0 {
		b.WriteString("\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "HOST\tROLE\tBMC\tTYPE\tBOOT\tMAC\tSTATE\tFOR\tNODE\tERROR")
		for _, h := range r.Hosts {
			state, took := h.State, "-"
			if state == "" {
				state = "-"
			}
			if h.SecondsInState > 0 {
				took = fmtSeconds(h.SecondsInState)
			}
			why := h.Reason
			if why == "" {
				why = h.Error
			}
			if why == "" {
				why = h.NodeError
			}
			node := h.Node
			if node == "" {
				node = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", h.Name, h.Role, h.BMC, orDash(h.BMCType),
				bootWords(h.BootMode, h.BootInterface), h.MAC, state, took, node, why)
		}
		tw.Flush()
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// bootWords is a host's boot mode and Ironic boot interface: "UEFI/ipxe".
func bootWords(mode, iface string) string {
	if mode == "" && iface == "" {
		return "-"
	}
	return orDash(mode) + "/" + orDash(iface)
}

func fmtSeconds(s float64) string {
	if s < 10 {
		return fmt.Sprintf("%.1fs", s)
	}
	return (time.Duration(s) * time.Second).Round(time.Second).String()
}
