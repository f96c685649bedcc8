package inboxadmin_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxadmin"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
)

// The admin page mounted under /admin of an application's own server. The
// Authorize hook is where the application checks its user; writes are
// refused without one.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "inboxadmin-example")
	defer os.RemoveAll(dir)
	db, _ := inboxsqlite.Open(filepath.Join(dir, "app.db"))
	defer db.Close()
	d, _ := inboxsql.New(db, inboxsqlite.Engine, nil)
	m, _ := inboxmigrate.New(d)
	if _, err := m.Up(ctx); err != nil {
		fmt.Println(err)
		return
	}
	client, _ := inbox.NewClient(d, nil)
	_, _ = client.Process(ctx, "billing", inbox.Message{ID: "0190f5b4-8c6e-7000-8000-000000000001"},
		inbox.HandlerFunc[*sql.Tx](func(context.Context, *sql.Tx, inbox.Message) error { return nil }))

	admin, err := inboxadmin.New(client, &inboxadmin.Config{
		Prefix: "/admin",
		Authorize: func(r *http.Request, a inboxadmin.Action) error {
			if a.Write() && r.Header.Get("X-Role") != "operator" {
				return errors.New("operators only")
			}
			return nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/", admin)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, _ := http.Get(srv.URL + "/admin/?format=json")
	var ov inboxadmin.OverviewJSON
	_ = json.NewDecoder(resp.Body).Decode(&ov)
	resp.Body.Close()
	for _, c := range ov.Consumers {
		fmt.Printf("%s: %d rows, headroom negative: %v\n", c.Consumer, c.Rows, c.HeadroomS < 0)
	}
	fmt.Println(resp.Header.Get("X-Frame-Options"))

	resp, _ = http.Post(srv.URL+"/admin/deadletters/1/delete", "", nil)
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// billing: 1 rows, headroom negative: true
	// DENY
	// 403
}
