package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The local Appium supervisor replaces a dead server within two checks, but
// leaves a busy one (no /status answer, process alive, port open) alone until
// it has been silent for HungAfter.
func TestAppiumWatchBusyIsNotDead(t *testing.T) {
	busy := errors.New("status: context deadline exceeded")
	watch := func(alive *atomic.Bool, answering *atomic.Bool, restarts *atomic.Int32) appiumWatch {
		return appiumWatch{
			Interval: 2 * time.Second, HungAfter: time.Minute,
			Status: func(context.Context) error {
				if answering.Load() {
					return nil
				}
				time.Sleep(2 * time.Second) // the probe's own timeout
				return busy
			},
			Alive: alive.Load,
			Restart: func(context.Context) error {
				restarts.Add(1)
				answering.Store(true)
				alive.Store(true)
				return nil
			},
			Logf: t.Logf,
		}
	}
	t.Run("busy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var alive, answering atomic.Bool
			var restarts atomic.Int32
			alive.Store(true)
			ctx, cancel := context.WithCancel(t.Context())
			go watch(&alive, &answering, &restarts).run(ctx)
			time.Sleep(50 * time.Second) // silent, alive: busy
			synctest.Wait()
			if n := restarts.Load(); n != 0 {
				t.Fatalf("a busy server was replaced %d times within 50 s", n)
			}
			answering.Store(true) // it answers again: the silence is forgotten
			time.Sleep(10 * time.Second)
			answering.Store(false)
			time.Sleep(50 * time.Second)
			synctest.Wait()
			if n := restarts.Load(); n != 0 {
				t.Fatalf("replaced %d times: silences apart must not add up", n)
			}
			time.Sleep(20 * time.Second) // now silent for over a minute: hung
			synctest.Wait()
			if n := restarts.Load(); n != 1 {
				t.Fatalf("a server silent for over HungAfter was replaced %d times, want 1", n)
			}
			cancel()
		})
	})
	t.Run("dead", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var alive, answering atomic.Bool
			var restarts atomic.Int32
			ctx, cancel := context.WithCancel(t.Context())
			go watch(&alive, &answering, &restarts).run(ctx)
			time.Sleep(9 * time.Second) // two checks of 4 s (interval + probe) and a bit
			synctest.Wait()
			if n := restarts.Load(); n != 1 {
				t.Fatalf("a dead server was replaced %d times after two checks, want 1", n)
			}
			cancel()
		})
	})
}
