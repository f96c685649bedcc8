package transporttest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxtransport"
)

// The kit of an adapter's own tests: the waits and the running consumers
// that the suite uses, for the cases that are an adapter's alone.

// Eventually polls cond until it holds, failing t after two minutes.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	eventually(t, what, func() (bool, error) { return cond(), nil })
}

// WaitFor polls cond until it holds, failing t on an error of cond or
// after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		require.NoError(t, err, what)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// WaitClosed waits for ch to be closed, failing t after two minutes.
func WaitClosed(t testing.TB, what string, ch <-chan struct{}) {
	t.Helper()
	waitClosed(t, what, ch)
}

// Running is a consumer that Start runs.
type Running struct {
	t      testing.TB
	cancel context.CancelFunc
	done   chan error
	close  func()
	once   sync.Once
	err    error
}

// Start runs run on a context of its own, derived from ctx, until Stop, or
// until t ends; close, if set, is called once run has returned.
func Start(t testing.TB, ctx context.Context, run func(context.Context) error, close func()) *Running {
	ctx, cancel := context.WithCancel(ctx)
	r := &Running{t: t, cancel: cancel, done: make(chan error, 1), close: close}
	go func() { r.done <- run(ctx) }()
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

// Stop cancels the consumer's context, waits for its Run to return (failing
// t after two minutes), calls close, and returns Run's error.
func (r *Running) Stop() error {
	r.t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(wait):
			r.t.Errorf("Run did not return within %v of its context's cancellation", wait)
		}
		if r.close != nil {
			r.close()
		}
	})
	return r.err
}

// Returned waits for the consumer's Run to return by itself and returns
// its error, failing t after two minutes.
func (r *Running) Returned() error {
	r.t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for Stop
		return err
	case <-time.After(wait):
		r.t.Fatalf("Run did not return within %v", wait)
		return nil
	}
}

// Closing returns a Runner that runs run, then calls close once: a
// harness's consumer over a connection of its own.
func Closing(run func(context.Context) error, close func()) Runner {
	return &closing{run: run, close: close}
}

type closing struct {
	run   func(context.Context) error
	close func()
	once  sync.Once
}

func (c *closing) Run(ctx context.Context) error {
	defer c.once.Do(c.close)
	return c.run(ctx)
}

// T returns the test the consumer runs in.
func (r *Running) T() testing.TB { return r.t }

// ConfigCase is a case of CheckConfig: Adjust changes a valid
// configuration, and its check must fail with an error that contains
// Want, or pass when Want is "".
type ConfigCase[C any] struct {
	Name   string
	Adjust func(*C)
	Want   string
}

// CheckConfig runs cases, in parallel, on the configuration valid returns:
// check completes and validates it, as the transport's New does.
func CheckConfig[C any](t *testing.T, valid func() *C, check func(*C) error, cases []ConfigCase[C]) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tc.Adjust(c)
			err := check(c)
			if tc.Want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.Want)
		})
	}
}

// Settings are the knobs of an adapter's own test consumers: quick
// retries, a bounded shutdown, logs to t.
func Settings(t testing.TB) inboxtransport.Settings {
	return inboxtransport.Settings{
		RetryBackoff:    100 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second,
		Logger:          slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}
