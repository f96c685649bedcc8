package command_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/command"
)

func TestText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"plain text, café", "plain text, café"},
		{"\x1b[2Jclear", `\x1b[2Jclear`},
		{"bell\a and tab\t and newline\n", `bell\x07 and tab\x09 and newline\x0a`},
		{"del\x7f", `del\x7f`},
		{"c1 \u009b csi", `c1 \u009b csi`},
		{"abc\u202edcba", `abc\u202edcba`},
		{"bad \xff byte", `bad \xff byte`},
	} {
		got := command.Text(c.in)
		require.Equal(t, c.want, got, "%q", c.in)
		require.False(t, strings.ContainsFunc(got, func(r rune) bool { return r < ' ' || r == 0x7f }), "%q", got)
	}
}

func TestPayload(t *testing.T) {
	t.Parallel()
	require.Equal(t, `(text, 7 bytes) {"a":1}`, command.Payload([]byte(`{"a":1}`), 100))
	require.Equal(t, `(text, 1 byte) x`, command.Payload([]byte(`x`), 100))
	require.Equal(t, `(text, 4 bytes) \x1b[2J`, command.Payload([]byte("\x1b[2J"), 100))
	require.Equal(t, `(base64, 3 bytes) AP8B`, command.Payload([]byte{0, 0xff, 1}, 100))
	require.Equal(t, `(text, 10 bytes) 01234…`, command.Payload([]byte("0123456789"), 5))
	require.Equal(t, `(none)`, command.Payload(nil, 5))
}

// A command's error can quote stored text (a dead letter's error, a name):
// it is printed on one line with its control characters escaped.
func TestErrorsAreEscaped(t *testing.T) {
	t.Parallel()
	p := &command.Program{Name: "inbox", Commands: map[string]command.Command{
		"show": {Run: func(ctx context.Context, e *command.Env, args []string) error {
			return errors.New("dead letter of bill\x1b[2Jing:\nboom\a")
		}},
	}}
	var out, errOut bytes.Buffer
	code := p.Main(context.Background(), []string{"show"}, &command.Env{Stdout: &out, Stderr: &errOut})
	require.Equal(t, 1, code)
	require.Equal(t, `inbox show: dead letter of bill\x1b[2Jing: boom\x07`+"\n", errOut.String())
}
