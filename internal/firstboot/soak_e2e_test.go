//go:build e2e

package firstboot

import "time"

// bmoSoak: under `make e2e`, TestBMOFirmwarePathSafe watches Ironic
// and BMO for 10 minutes after the host is provisioned.
const bmoSoak = 10 * time.Minute
