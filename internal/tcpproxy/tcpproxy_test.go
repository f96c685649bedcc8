package tcpproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echo starts a loopback server that writes back what it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, line string) (string, error) {
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// TestProxyForwardsCutsAndRefuses: bytes go through; Cut ends the
// connections in flight; Refuse turns new ones away until it is lifted.
func TestProxyForwardsCutsAndRefuses(t *testing.T) {
	t.Parallel()
	p, err := Start(echo(t))
	require.NoError(t, err)
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	got, err := roundTrip(c, "hello")
	require.NoError(t, err)
	require.Equal(t, "hello\n", got)
	require.Equal(t, 1, p.Accepted())

	p.Cut()
	_, err = roundTrip(c, "again")
	require.Error(t, err, "the cut connection is closed")
	c.Close()

	p.Refuse(true)
	c, err = net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	_, err = roundTrip(c, "refused")
	require.Error(t, err, "a refused connection is closed at once")
	c.Close()
	require.Equal(t, 1, p.Accepted())

	p.Refuse(false)
	c, err = net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	got, err = roundTrip(c, "back")
	require.NoError(t, err)
	require.Equal(t, "back\n", got)
	require.Equal(t, 2, p.Accepted())
}

// TestProxyClose: Close ends the connections and the listener.
func TestProxyClose(t *testing.T) {
	t.Parallel()
	p, err := Start(echo(t))
	require.NoError(t, err)
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = roundTrip(c, "x")
	require.NoError(t, err)
	p.Close()
	_, err = roundTrip(c, "y")
	require.Error(t, err)
	_, err = net.Dial("tcp", p.Addr())
	require.Error(t, err, "the listener is closed")
}
