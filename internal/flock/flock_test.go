package flock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

func TestTryWaitHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	a, err := Try(path)
	if err != nil {
		t.Fatal(err)
	}
	if !Held(path) {
		t.Error("Held = false while held")
	}
	if _, err := Try(path); !errors.Is(err, ErrLocked) {
		t.Errorf("second Try = %v, want ErrLocked", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Wait(ctx, path); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with an ended context = %v", err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := Wait(context.Background(), path)
		if err == nil {
			err = l.Release()
		}
		got <- err
	}()
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("Wait after release: %v", err)
	}
	if Held(path) {
		t.Error("Held = true after every holder released")
	}
}
