package controller

import (
	"regexp"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// EventRecorderName is who the BPA's Events say reported them.
const EventRecorderName = "bpa-operator"

// Reasons of the BPA's Events on a Provisioning. A refusal's reason is
// the one its ClusterReady condition gives (NoMaster, NoInstallConfig,
// BadInstallConfig, UnknownPlugin, NoSSHKey, BadSSHKey,
// OnlyMasterReprovisioned); a removal's, its NodesRemoved condition's
// (see cleanup.go).
const (
	ReasonPhaseStarted     = "PhaseStarted"
	ReasonPhaseFinished    = "PhaseFinished"
	ReasonPhaseFailed      = "PhaseFailed"
	ReasonHostUnreachable  = "HostUnreachable"
	ReasonKubeconfigStored = "KubeconfigStored"
	ReasonDeleting         = "Deleting"
)

// maxNote is the longest note the events API takes (1 kB).
const maxNote = 1024

// secretShapes are the shapes of what must never reach an Event, even if
// a message should quote one by mistake: kubeadm bootstrap tokens,
// certificate keys (64 hex digits), PEM blocks (keys, certificates) and
// base64 runs long enough to hold a key or a kubeconfig's certificates.
var secretShapes = []*regexp.Regexp{
	regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`),
	regexp.MustCompile(`\b[0-9a-fA-F]{64}\b`),
	regexp.MustCompile(`(?s)-----BEGIN [A-Z ]+-----.*?(-----END [A-Z ]+-----|$)`),
	regexp.MustCompile(`[A-Za-z0-9+/=]{80,}`),
}

// redact masks anything in msg shaped like a secret, and cuts it to what
// an Event holds. The messages it gets are already the status's, which
// never hold secrets; this is the second lock on that door, as Events are
// readable by more people than Secrets are.
func redact(msg string) string {
	for _, re := range secretShapes {
		msg = re.ReplaceAllString(msg, "[redacted]")
	}
	if len(msg) > maxNote {
		cut := maxNote - len("…")
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return strings.TrimSpace(msg)
}

// event records an Event on obj (the Provisioning). action is what the
// BPA was doing (a phase's name, "Refuse", "Delete"). With no recorder
// (a reconciler made by hand in a test) it records nothing.
func (r *Reconciler) event(obj runtime.Object, warning bool, reason, action, msg string) {
	recordEvent(r.Recorder, obj, warning, reason, action, msg)
}

// recordEvent records an Event on obj with rec, redacted; nothing with no
// recorder.
func recordEvent(rec events.EventRecorder, obj runtime.Object, warning bool, reason, action, msg string) {
	if rec == nil {
		return
	}
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	rec.Eventf(obj, nil, typ, reason, action, "%s", redact(msg))
}

// ref names p for an Event without reading fields a pass writes
// concurrently (its resourceVersion moves with each status write).
func ref(p *bpa.Provisioning) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: bpa.GroupVersion.String(), Kind: "Provisioning", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}
