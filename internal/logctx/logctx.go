// Package logctx carries the logger in the context: libraries take it
// with From(ctx) and never keep one of their own, and a caller scopes it
// (a step's name, say) with With.
package logctx

import (
	"context"
	"log/slog"
)

type key struct{}

// With returns ctx carrying l.
func With(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, key{}, l)
}

// From returns the logger ctx carries, or slog.Default().
func From(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(key{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return slog.Default()
}

// Discard is a logger that writes nothing, for callers that want quiet.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
