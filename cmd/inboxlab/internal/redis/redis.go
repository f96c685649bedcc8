// Package redis is the little of a Redis client that 'inboxlab bench' needs
// for its redis-setnx row: commands over RESP2, on a fixed pool of
// connections with one command in flight on each, which is how go-redis
// sends a SET NX. It stands in for go-redis, whose compilation was the
// largest and the most memory-hungry of the inbox command's.
package redis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Error is an error reply of the server, such as "ERR unknown command".
type Error string

func (e Error) Error() string { return "redis: " + string(e) }

// maxBulk bounds a bulk reply, as the server bounds its strings (512 MB).
const maxBulk = 512 << 20

// maxArray bounds the elements of an array reply this client accepts.
const maxArray = 1 << 20

// Client is a pool of connections to one server. It is safe for concurrent
// use: each command takes a connection for its round trip.
type Client struct {
	addr  string
	conns chan *conn // nil entries are connections to dial
}

type conn struct {
	nc net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
}

// Dial opens a pool of size connections to addr (host:port) and checks
// that the server answers PING on each.
func Dial(ctx context.Context, addr string, size int) (*Client, error) {
	if size < 1 {
		size = 1
	}
	c := &Client{addr: addr, conns: make(chan *conn, size)}
	for range size {
		c.conns <- nil
	}
	for range size {
		if _, err := c.Do(ctx, "PING"); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Close closes the idle connections. Commands running meanwhile close
// theirs when they end.
func (c *Client) Close() {
	for {
		select {
		case cn := <-c.conns:
			if cn != nil {
				cn.nc.Close()
			}
		default:
			return
		}
	}
}

// Do sends one command and returns its reply: a string for a simple
// string, an int64 for an integer, a []byte or nil for a bulk string, a
// []any for an array, and an Error for an error reply.
func (c *Client) Do(ctx context.Context, args ...string) (any, error) {
	var cn *conn
	select {
	case cn = <-c.conns:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	reply, err := c.roundTrip(ctx, &cn, args)
	c.conns <- cn
	return reply, err
}

// roundTrip runs a command on *cnp, dialling it if it is nil, and sets it
// to nil when the connection can no longer be trusted.
func (c *Client) roundTrip(ctx context.Context, cnp **conn, args []string) (any, error) {
	if *cnp == nil {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return nil, err
		}
		*cnp = &conn{nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc)}
	}
	cn := *cnp
	// A cancelled context interrupts a read or write in progress.
	stop := context.AfterFunc(ctx, func() { cn.nc.SetDeadline(time.Unix(1, 0)) })
	reply, err := cn.do(args)
	if !stop() || err != nil && !errors.As(err, new(Error)) {
		cn.nc.Close()
		*cnp = nil
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return reply, err
}

func (cn *conn) do(args []string) (any, error) {
	fmt.Fprintf(cn.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(cn.w, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := cn.w.Flush(); err != nil {
		return nil, err
	}
	return readReply(cn.r)
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("redis: malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return nil, Error(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		switch {
		case err != nil || n < -1 || n > maxBulk:
			return nil, fmt.Errorf("redis: malformed bulk length %q", body)
		case n == -1:
			return nil, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return b[:n], nil
	case '*':
		n, err := strconv.Atoi(body)
		switch {
		case err != nil || n < -1 || n > maxArray:
			return nil, fmt.Errorf("redis: malformed array length %q", body)
		case n == -1:
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			// An error inside an array is an element, not the reply's
			// failure.
			v, err := readReply(r)
			var re Error
			if errors.As(err, &re) {
				out[i] = re
				continue
			}
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	default:
		return nil, fmt.Errorf("redis: unknown reply type %q", kind)
	}
}

// SetNX sets key to value with a time to live, unless key exists, and
// reports whether it set it: SET key value NX PX ttl.
func (c *Client) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	reply, err := c.Do(ctx, "SET", key, value, "NX", "PX", strconv.FormatInt(ttl.Milliseconds(), 10))
	if err != nil {
		return false, err
	}
	switch reply {
	case "OK":
		return true, nil
	case nil:
		return false, nil
	}
	return false, fmt.Errorf("redis: SET NX: unexpected reply %v", reply)
}

// Scan returns one page of the keys that match pattern, and the cursor of
// the next page, 0 after the last: SCAN cursor MATCH pattern COUNT count.
func (c *Client) Scan(ctx context.Context, cursor uint64, pattern string, count int) ([]string, uint64, error) {
	reply, err := c.Do(ctx, "SCAN", strconv.FormatUint(cursor, 10), "MATCH", pattern, "COUNT", strconv.Itoa(count))
	if err != nil {
		return nil, 0, err
	}
	page, ok := reply.([]any)
	if !ok || len(page) != 2 {
		return nil, 0, fmt.Errorf("redis: SCAN: unexpected reply %v", reply)
	}
	cur, ok1 := page[0].([]byte)
	elems, ok2 := page[1].([]any)
	next, err := strconv.ParseUint(string(cur), 10, 64)
	if !ok1 || !ok2 || err != nil {
		return nil, 0, fmt.Errorf("redis: SCAN: unexpected reply %v", reply)
	}
	keys := make([]string, 0, len(elems))
	for _, e := range elems {
		k, ok := e.([]byte)
		if !ok {
			return nil, 0, fmt.Errorf("redis: SCAN: unexpected key %v", e)
		}
		keys = append(keys, string(k))
	}
	return keys, next, nil
}

// Unlink deletes keys without blocking the server, and returns how many
// existed.
func (c *Client) Unlink(ctx context.Context, keys ...string) (int64, error) {
	reply, err := c.Do(ctx, append([]string{"UNLINK"}, keys...)...)
	if err != nil {
		return 0, err
	}
	n, ok := reply.(int64)
	if !ok {
		return 0, fmt.Errorf("redis: UNLINK: unexpected reply %v", reply)
	}
	return n, nil
}
