//go:build bootsticktest

package firstboot

import (
	"context"
	"os"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/pipeline"
)

// testPauseEnv names a step that pauses right after it starts (its state
// recorded as running): the kill test sets it so that SIGKILL lands inside
// even the steps that take milliseconds. Only a binary built with the
// bootsticktest tag has it; a release build has no test hook.
const testPauseEnv = "BOOTSTICK_TEST_PAUSE_STEP"

func testHook(ctx context.Context) pipeline.Observer {
	name := os.Getenv(testPauseEnv)
	if name == "" {
		return nil
	}
	log := logctx.From(ctx)
	return pipeline.ObserverFunc(func(ev pipeline.Event) {
		if ev.Step == name && ev.Phase == pipeline.PhaseStarted {
			log.Warn("pausing for a test", "step", name, "env", testPauseEnv)
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Minute):
			}
		}
	})
}

// testIronicSettings are settings a test gives Ironic's ConfigMap.
func testIronicSettings() map[string]string {
	if v := os.Getenv(testIronicEnvVar); v != "" {
		return map[string]string{"IRONIC_INSPECT_TIMEOUT": v}
	}
	return nil
}
