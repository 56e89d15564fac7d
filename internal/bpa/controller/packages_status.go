package controller

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// statusEqual compares two statuses but for their times.
func statusEqual(a, b *bpa.ContainerPackagesStatus) bool {
	strip := func(s *bpa.ContainerPackagesStatus) *bpa.ContainerPackagesStatus {
		c := s.DeepCopy()
		for i := range c.Packages {
			c.Packages[i].LastTransitionTime = nil
		}
		for i := range c.Conditions {
			c.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		return c
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}

// set records a package's state, and an Event when it changed to one
// worth telling.
func (x *packagesPass) set(name string, state bpa.PackageState, version, msg string) {
	prev := x.previous(name)
	st := bpa.PackageStatus{Name: name, State: state, Version: version, Message: redact(msg), LastTransitionTime: prev.LastTransitionTime,
		Applied: prev.Applied || x.next[name].Applied}
	if prev.State != state || st.LastTransitionTime == nil {
		t := metav1.NewTime(x.r.now())
		st.LastTransitionTime = &t
	}
	x.next[name] = st
	if prev.State == state && prev.Message == st.Message {
		return
	}
	switch state {
	case bpa.PackageReady:
		x.event(false, ReasonPackageReady, "Install", fmt.Sprintf("package %s %s is ready on cluster %s", name, version, x.cp.Spec.Cluster))
	case bpa.PackageRefused:
		x.event(true, ReasonPackageRefused, "Install", fmt.Sprintf("package %s: %s", name, msg))
	case bpa.PackageFailed:
		x.event(true, ReasonPackageFailed, "Install", fmt.Sprintf("package %s: %s", name, msg))
	}
}

func (x *packagesPass) previous(name string) bpa.PackageStatus {
	for _, p := range x.cp.Status.Packages {
		if p.Name == name {
			return p
		}
	}
	return bpa.PackageStatus{}
}

func (x *packagesPass) event(warning bool, reason, action, msg string) {
	recordEvent(x.r.Recorder, &corev1.ObjectReference{APIVersion: bpa.GroupVersion.String(), Kind: "ContainerPackages",
		Namespace: x.cp.Namespace, Name: x.cp.Name, UID: x.cp.UID}, warning, reason, action, msg)
}

// waitAll marks every named package as waiting for msg, but those
// already applied or Ready, which stay as the last pass saw them (a cluster that
// is not Ready for a while, a host of it provisioned again, does not
// undo them).
func (x *packagesPass) waitAll(named []string, msg string) {
	for _, n := range named {
		if prev := x.previous(n); prev.Applied || prev.State == bpa.PackageReady {
			x.next[n] = prev
			continue
		}
		x.set(n, bpa.PackageWaiting, x.previous(n).Version, msg)
	}
}

// holdRemovals keeps each applied package no longer named as one to
// remove, saying why it cannot be yet.
func (x *packagesPass) holdRemovals(named []string, why string) {
	for _, p := range x.cp.Status.Packages {
		if p.Applied && !slices.Contains(named, p.Name) {
			msg := "to be removed, which cannot be yet: " + why
			if x.cp.DeletionTimestamp != nil {
				msg += fmt.Sprintf(". To leave it on the cluster and let this object go: kubectl -n %s patch containerpackages %s --type json -p '[{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}]'",
					x.cp.Namespace, x.cp.Name)
			}
			x.set(p.Name, bpa.PackageRemoving, p.Version, msg)
		}
	}
}
