package inboxcli

import (
	"context"
	"fmt"
	"strings"

	"github.com/txinbox/inbox/inboxdriver"
)

// checkPooler looks for a transaction pooler in front of the database
// (inboxdriver.PoolingProber: session state set on one connection shows on
// another, or leaves its own), and checks that the exec mode in use works
// behind one. The probe is the behaviour itself, not a name: PgBouncer,
// pgcat, Odyssey and RDS Proxy all hand server connections out per
// transaction, none of them says so to an ordinary client, and a
// server_version or application_name hint would be missing or wrong as
// often as not.
func (d *doctor) checkPooler(ctx context.Context) {
	if d.dialect() != inboxdriver.DialectPostgres {
		d.set("pooler", checkSkip, "only Postgres is reached through a transaction pooler here", "")
		return
	}
	p, ok := d.s.admin.(inboxdriver.PoolingProber)
	if !ok {
		d.set("pooler", checkSkip, "this store cannot probe for a pooler", "")
		return
	}
	got, err := p.PoolingProbe(ctx)
	if err != nil {
		d.set("pooler", checkFail, "cannot probe for a transaction pooler: "+errText(err), "")
		return
	}
	mode := ""
	if got.ExecMode != "" {
		mode = fmt.Sprintf(" (exec mode %s)", got.ExecMode)
	}
	switch {
	case got.Transaction && !got.ExecModeSafe:
		d.set("pooler", checkFail,
			fmt.Sprintf("a transaction pooler (such as PgBouncer with pool_mode=transaction) is in front of the database, and exec mode %s prepares statements on server connections that it hands to other clients", got.ExecMode),
			fmt.Sprintf("set default_query_exec_mode=%s in the URL, or leave it out and the CLI picks cache_describe; in applications, set pgx's ConnConfig.DefaultQueryExecMode to one of %s (docs/PRODUCTION.md)",
				got.SafeExecModes[0], strings.Join(got.SafeExecModes, ", ")))
	case got.Transaction:
		d.set("pooler", checkOK,
			fmt.Sprintf("a transaction pooler is in front of the database, and exec mode %s works behind it; applications need a pooler-safe exec mode too (cache_describe, exec or simple_protocol), and no startup parameters the pooler refuses (docs/PRODUCTION.md)", got.ExecMode), "")
	case !got.ExecModeSafe:
		d.set("pooler", checkOK, "no transaction pooler seen: session state stayed with its connection"+mode+"; behind one, this exec mode would fail", "")
	default:
		d.set("pooler", checkOK, "no transaction pooler seen: session state stayed with its connection"+mode, "")
	}
}
