package inboxtransport_test

import (
	"testing"
	"time"

	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/inboxtransport/transporttest"
)

// TestSettings: the shared knobs' defaults, and each one's error names it,
// as every transport's Config reports it.
func TestSettings(t *testing.T) {
	t.Parallel()
	d := inboxtransport.Settings{}.WithDefaults()
	if d.Workers != 2 || d.MaxBatch != 50 || d.MaxDeliveries != 5 || d.RetryBackoff != time.Second ||
		d.MaxRetryBackoff != time.Minute || d.ShutdownTimeout != 10*time.Second || d.ReplayInterval != 10*time.Second ||
		d.StreakLimit != 5 || d.StreakPause != 5*time.Second || d.MaxCrashes != 3 {
		t.Fatalf("defaults: %+v", d)
	}
	if s := (inboxtransport.Settings{RetryBackoff: 2 * time.Minute}).WithDefaults(); s.MaxRetryBackoff != 2*time.Minute {
		t.Errorf("MaxRetryBackoff defaults to at least RetryBackoff, got %v", s.MaxRetryBackoff)
	}
	if s := (inboxtransport.Settings{ShutdownTimeout: -1, ReplayInterval: -1, StreakLimit: -1, MaxCrashes: -1}).WithDefaults(); s.ShutdownTimeout != -1 || s.ReplayInterval != -1 || s.StreakLimit != -1 || s.MaxCrashes != -1 {
		t.Errorf("a negative ShutdownTimeout, ReplayInterval, StreakLimit or MaxCrashes stays negative (at once, off, no breaker, no bound), got %+v", s)
	}
	valid := func() *inboxtransport.Settings { return &inboxtransport.Settings{} }
	check := func(s *inboxtransport.Settings) error { return s.WithDefaults().Validate() }
	transporttest.CheckConfig(t, valid, check, []transporttest.ConfigCase[inboxtransport.Settings]{
		{Name: "defaults", Adjust: func(*inboxtransport.Settings) {}},
		{Name: "workers", Adjust: func(s *inboxtransport.Settings) { s.Workers = -1 }, Want: "Config.Workers"},
		{Name: "batch", Adjust: func(s *inboxtransport.Settings) { s.MaxBatch = -1 }, Want: "Config.MaxBatch"},
		{Name: "deliveries", Adjust: func(s *inboxtransport.Settings) { s.MaxDeliveries = -1 }, Want: "Config.MaxDeliveries"},
		{Name: "backoff", Adjust: func(s *inboxtransport.Settings) { s.RetryBackoff = -time.Second }, Want: "Config.RetryBackoff"},
		{Name: "backoff cap", Adjust: func(s *inboxtransport.Settings) { s.RetryBackoff, s.MaxRetryBackoff = time.Minute, time.Second }, Want: "Config.MaxRetryBackoff"},
		{Name: "no breaker", Adjust: func(s *inboxtransport.Settings) { s.StreakLimit = -1 }},
		{Name: "streak pause", Adjust: func(s *inboxtransport.Settings) { s.StreakPause = -time.Second }, Want: "Config.StreakPause"},
	})
}
