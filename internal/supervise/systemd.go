package supervise

import (
	"context"
	"fmt"
	"strings"

	"github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// Systemd runs services as transient systemd units.
type Systemd struct{}

func (*Systemd) Kind() string { return "systemd" }

func unitName(name string) string { return name + ".service" }

func (m *Systemd) Start(ctx context.Context, s Service) error {
	if err := s.validate(); err != nil {
		return err
	}
	conn, err := dbus.NewWithContext(ctx)
	if err != nil {
		return fmt.Errorf("starting %s: connecting to systemd: %w", s.Name, err)
	}
	defer conn.Close()
	unit := unitName(s.Name)
	if active, err := unitActive(ctx, conn, unit); err != nil {
		return fmt.Errorf("starting %s: %w", s.Name, err)
	} else if active {
		return nil
	}
	// A transient unit that failed stays loaded until reset.
	conn.ResetFailedUnitContext(ctx, unit)
	props := []dbus.Property{
		dbus.PropDescription(s.Description),
		dbus.PropExecStart(s.Command, false),
		{Name: "Restart", Value: godbus.MakeVariant("always")},
		{Name: "RestartUSec", Value: godbus.MakeVariant(uint64(2_000_000))},
		{Name: "KillMode", Value: godbus.MakeVariant("process")},
	}
	if len(s.Env) > 0 {
		props = append(props, dbus.Property{Name: "Environment", Value: godbus.MakeVariant(s.Env)})
	}
	ch := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, unit, "replace", props, ch); err != nil {
		return fmt.Errorf("starting %s: %w", unit, err)
	}
	select {
	case res := <-ch:
		if res != "done" {
			return fmt.Errorf("starting %s: systemd job %s (see journalctl -u %s)", unit, res, unit)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (m *Systemd) Stop(ctx context.Context, name string) error {
	conn, err := dbus.NewWithContext(ctx)
	if err != nil {
		return fmt.Errorf("stopping %s: connecting to systemd: %w", name, err)
	}
	defer conn.Close()
	unit := unitName(name)
	ch := make(chan string, 1)
	if _, err := conn.StopUnitContext(ctx, unit, "replace", ch); err != nil {
		if strings.Contains(err.Error(), "not loaded") {
			return nil
		}
		return fmt.Errorf("stopping %s: %w", unit, err)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	conn.ResetFailedUnitContext(ctx, unit)
	return nil
}

func (m *Systemd) Active(ctx context.Context, name string) (bool, error) {
	conn, err := dbus.NewWithContext(ctx)
	if err != nil {
		return false, fmt.Errorf("connecting to systemd: %w", err)
	}
	defer conn.Close()
	return unitActive(ctx, conn, unitName(name))
}

func unitActive(ctx context.Context, conn *dbus.Conn, unit string) (bool, error) {
	p, err := conn.GetUnitPropertyContext(ctx, unit, "ActiveState")
	if err != nil {
		return false, fmt.Errorf("asking systemd about %s: %w", unit, err)
	}
	s, _ := p.Value.Value().(string)
	return s == "active" || s == "activating" || s == "reloading", nil
}
