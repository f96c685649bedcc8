package inboxcli

import (
	"testing"

	"github.com/txinbox/inbox/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
