package site

import "log/slog"

// Secret is a string that never prints: fmt, slog and errors show
// "<redacted>". Use Reveal to get the value.
type Secret string

const redacted = "<redacted>"

// Reveal returns the secret value.
func (s Secret) Reveal() string { return string(s) }

// String implements fmt.Stringer.
func (s Secret) String() string { return redacted }

// GoString implements fmt.GoStringer, for %#v.
func (s Secret) GoString() string { return redacted }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText hides the value from encoders that use it (JSON, slog).
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
