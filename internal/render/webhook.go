package render

import (
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

func init() {
	// The baremetal-operator's webhook code logs through controller-
	// runtime's logger; bootstick keeps its own logs, so it is silenced.
	logf.SetLogger(logr.Discard())
}

// CheckWebhook runs the baremetal-operator's own admission check
// (BareMetalHost.ValidateCreate, from the metal3 apis module at the version
// the stick deploys) on every rendered BareMetalHost, so that a site that
// validates is never refused when it is applied. The webhook's messages
// name fields and BMC addresses, never Secret values.
func CheckWebhook(objs []Object) error {
	var errs []error
	for _, o := range objs {
		bmh, ok := o.(*metal3.BareMetalHost)
		if !ok {
			continue
		}
		if _, err := bmh.ValidateCreate(); err != nil {
			errs = append(errs, fmt.Errorf("host %s: the baremetal-operator would refuse it: %w", bmh.Name, err))
		}
	}
	return errors.Join(errs...)
}
