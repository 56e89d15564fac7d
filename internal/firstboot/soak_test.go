//go:build !e2e

package firstboot

import "time"

// bmoSoak is how long TestBMOFirmwarePathSafe watches Ironic and BMO
// for restarts after the host is provisioned: no longer than its checks
// under `make test`; `make e2e` watches for 10 minutes (soak_e2e_test.go).
const bmoSoak time.Duration = 0
