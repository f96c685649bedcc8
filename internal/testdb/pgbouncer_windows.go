package testdb

import (
	"errors"
	"testing"
)

// PgBouncer skips t, or fails it in CI: the tests run PgBouncer on Unix
// only.
func PgBouncer(t testing.TB, mode string) string {
	t.Helper()
	Require(t, "pgbouncer", errors.New("the tests run PgBouncer on Unix only"))
	return ""
}
