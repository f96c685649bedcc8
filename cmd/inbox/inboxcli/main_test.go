package inboxcli_test

import (
	"os"
	"testing"

	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/internal/testdb"
)

// runMainEnv makes this test binary the inbox command, for the tests that
// need a process of its own: it runs inboxcli.Run on its arguments.
const runMainEnv = "INBOXCLI_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		inboxcli.Run()
	}
	testdb.Main(m)
}
