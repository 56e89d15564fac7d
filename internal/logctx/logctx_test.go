package logctx

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestFromCarriesTheLogger(t *testing.T) {
	if From(context.Background()) != slog.Default() {
		t.Error("From without a logger is not slog.Default()")
	}
	var b bytes.Buffer
	ctx := With(context.Background(), slog.New(slog.NewTextHandler(&b, nil)).With("step", "x"))
	From(ctx).Info("hello")
	if !strings.Contains(b.String(), "step=x") || !strings.Contains(b.String(), "hello") {
		t.Errorf("logged %q", b.String())
	}
}
