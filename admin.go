package inbox

import (
	"errors"
	"log/slog"

	"github.com/txinbox/inbox/inboxdriver"
)

// Admin is the operator's side of an inbox: statistics, dead letters and
// their replay requests, the effects ledger, purges and partitions. It
// needs no handler and no transaction type, so a tool can hold one over
// any store. Client.Admin returns a client's. It is safe for concurrent
// use.
type Admin struct {
	driver inboxdriver.Admin
	config Config
	logger *slog.Logger
}

// NewAdmin returns an Admin over driver, any store's driver. config may be
// nil; its zero fields take their defaults.
func NewAdmin(driver inboxdriver.Admin, config *Config) (*Admin, error) {
	if driver == nil {
		return nil, errors.New("inbox: NewAdmin: driver is nil")
	}
	cfg := config.withDefaults()
	if err := cfg.validate(driver.Tables()); err != nil {
		return nil, err
	}
	if err := cfg.validatePartitions(driver); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Admin{driver: driver, config: cfg, logger: logger}, nil
}

// Config returns the configuration with defaults applied.
func (a *Admin) Config() Config { return a.config }

// classify wraps err, from the store, with the sentinel of its class, so
// that callers can test it with errors.Is.
func (a *Admin) classify(err error) error {
	if err == nil {
		return nil
	}
	if perr := partitionError(err); perr != nil {
		return perr
	}
	switch a.driver.Classify(err) {
	case inboxdriver.ClassConflict:
		if !errors.Is(err, ErrConflict) {
			return marked(ErrConflict, err)
		}
	case inboxdriver.ClassLockTimeout:
		if !errors.Is(err, ErrLockTimeout) {
			return marked(ErrLockTimeout, err)
		}
	case inboxdriver.ClassUnavailable:
		if !errors.Is(err, ErrUnavailable) {
			return marked(ErrUnavailable, err)
		}
	case inboxdriver.ClassDenied:
		if !errors.Is(err, ErrPermissionDenied) {
			return marked(ErrPermissionDenied, err)
		}
	case inboxdriver.ClassNotMigrated:
		if !errors.Is(err, ErrNotMigrated) {
			return marked(ErrNotMigrated, err)
		}
	}
	return err
}
