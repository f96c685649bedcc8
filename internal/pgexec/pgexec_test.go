package pgexec

import "testing"

func TestWithPoolerSafe(t *testing.T) {
	for in, want := range map[string]string{
		"":                                  "default_query_exec_mode=cache_describe",
		"postgres://u@h:5432/db":            "postgres://u@h:5432/db?default_query_exec_mode=cache_describe",
		"postgres://u@h/db?sslmode=disable": "postgres://u@h/db?default_query_exec_mode=cache_describe&sslmode=disable",
		"postgres://u@h/db?default_query_exec_mode=exec": "postgres://u@h/db?default_query_exec_mode=exec",
		"host=h dbname=db": "host=h dbname=db default_query_exec_mode=cache_describe",
		"host=h default_query_exec_mode=simple_protocol": "host=h default_query_exec_mode=simple_protocol",
	} {
		if got := WithPoolerSafe(in); got != want {
			t.Errorf("WithPoolerSafe(%q) = %q, want %q", in, got, want)
		}
	}
}
