//go:build !bootsticktest

package firstboot

import (
	"context"

	"github.com/bootstick/bootstick/internal/pipeline"
)

// testHook is nil in a release build: test hooks are compiled in only with
// the bootsticktest tag (see testhook.go).
func testHook(context.Context) pipeline.Observer { return nil }

// testIronicSettings is nil in a release build.
func testIronicSettings() map[string]string { return nil }
