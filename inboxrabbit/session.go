package inboxrabbit

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DialFunc opens a connection to the broker. The consumer calls it when it
// starts and again after each loss of its connection or channel; it owns
// the connections it returns and closes them. amqp091-go does not
// reconnect by itself: this is how the consumer does.
type DialFunc func(ctx context.Context) (*amqp.Connection, error)

// DialURL returns a DialFunc that dials url with config, with
// amqp.DialConfig. Its dial and handshake are bounded by config.Dial (30
// seconds by default), not by the context.
func DialURL(url string, config amqp.Config) DialFunc {
	return func(context.Context) (*amqp.Connection, error) {
		return amqp.DialConfig(url, config)
	}
}

// session is one connection and the channel the consumer consumes on. A
// delivery can be acknowledged only on the channel it arrived on (delivery
// tags are the channel's), so each delivery keeps its session, and acks
// for a session that died are skipped: the broker requeued those
// deliveries when the channel closed, and the inbox skips their
// redeliveries. This is the generation fence.
type session struct {
	gen        uint64
	conn       *amqp.Connection
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	// ready holds up to Prefetch deliveries that arrived and wait for a
	// worker. amqp091-go hands deliveries over one at a time through an
	// unbuffered channel, so a worker that took one would find none
	// ready behind it and process a batch of one; a pump moves them here
	// as they arrive, so that a worker fills its batch from what is
	// already here, without waiting. It is closed when deliveries is.
	ready chan amqp.Delivery

	// dead is set, and done closed, once the channel or the connection
	// closed, for whatever reason.
	dead    atomic.Bool
	done    chan struct{}
	watched sync.WaitGroup

	// timers are the pending retries of this session's deliveries.
	mu     sync.Mutex
	timers map[*time.Timer]struct{}
	closed bool

	// handed are the delivery tags that Receive handed to the loop and
	// that were not settled yet. The broker delivers a channel's tags in
	// increasing order, and Receive hands them on in that order, so a tag
	// handed later is higher than every tag handed before it.
	handedMu sync.Mutex
	handed   map[uint64]struct{}
}

// hand records d as handed to the loop.
func (s *session) hand(d *delivery) {
	s.handedMu.Lock()
	defer s.handedMu.Unlock()
	if s.handed == nil {
		s.handed = make(map[uint64]struct{})
	}
	s.handed[d.raw.DeliveryTag] = struct{}{}
}

// settled forgets d, which was acknowledged, nacked or requeued.
func (s *session) settled(d *delivery) {
	s.handedMu.Lock()
	defer s.handedMu.Unlock()
	delete(s.handed, d.raw.DeliveryTag)
}

// ackAll acknowledges ds, deliveries of this session, with one multiple
// ack of the highest tag when that names exactly ds: every handed tag up
// to it is one of ds (none is held for a retry, or in another worker's
// batch); the deliveries the broker sent after it are not yet handed,
// and all have higher tags. It reports false, and acknowledges nothing,
// when it cannot.
func (s *session) ackAll(ds []*delivery) (bool, error) {
	if len(ds) < 2 {
		return false, nil
	}
	s.handedMu.Lock()
	defer s.handedMu.Unlock()
	top := ds[0]
	for _, d := range ds {
		if _, ok := s.handed[d.raw.DeliveryTag]; !ok {
			return false, nil
		}
		if d.raw.DeliveryTag > top.raw.DeliveryTag {
			top = d
		}
	}
	below := 0
	for tag := range s.handed {
		if tag <= top.raw.DeliveryTag {
			below++
		}
	}
	if below != len(ds) {
		return false, nil
	}
	err := top.raw.Ack(true)
	for _, d := range ds {
		delete(s.handed, d.raw.DeliveryTag)
	}
	return true, err
}

// connect dials, opens a channel with the prefetch and starts consuming.
func (c *Consumer[TTx]) connect(ctx context.Context) (*session, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	if conn == nil {
		return nil, fmt.Errorf("dial: the DialFunc returned no connection")
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("open a channel: %w", err)
	}
	if err := ch.Qos(c.config.Prefetch, 0, false); err != nil {
		conn.Close()
		return nil, fmt.Errorf("set the prefetch: %w", err)
	}
	s := &session{
		gen:    c.gen.Add(1),
		conn:   conn,
		ch:     ch,
		done:   make(chan struct{}),
		timers: map[*time.Timer]struct{}{},
	}
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	s.watched.Go(func() {
		var cause *amqp.Error
		select {
		case cause = <-chClosed:
		case cause = <-connClosed:
		}
		s.dead.Store(true)
		close(s.done)
		if cause != nil {
			c.logger.WarnContext(ctx, "inboxrabbit: lost the channel; its unacknowledged deliveries go back to the queue",
				"queue", c.config.Queue, "generation", s.gen, "err", cause)
		}
	})
	tag := ""
	if c.config.ConsumerTag != "" {
		tag = c.config.ConsumerTag + "-" + strconv.FormatUint(s.gen, 10)
	}
	s.deliveries, err = ch.Consume(c.config.Queue, tag, false, false, false, false, nil)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("consume %s: %w", c.config.Queue, err)
	}
	s.ready = make(chan amqp.Delivery, c.config.Prefetch)
	s.watched.Go(func() {
		// The broker sends at most Prefetch unacknowledged deliveries,
		// so ready never blocks the pump for long; when the channel
		// closes, deliveries is closed and so is ready. Deliveries left
		// in ready are requeued by the broker with the channel.
		defer close(s.ready)
		for d := range s.deliveries {
			select {
			case s.ready <- d:
			case <-s.done:
				return
			}
		}
	})
	return s, nil
}

// later runs f after d, unless the session is closed first.
func (s *session) later(d time.Duration, f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		s.mu.Lock()
		_, pending := s.timers[t]
		delete(s.timers, t)
		s.mu.Unlock()
		if pending {
			f()
		}
	})
	s.timers[t] = struct{}{}
}

// close stops the pending retries and closes the channel and the
// connection. The broker requeues every delivery not acknowledged.
func (s *session) close() {
	s.mu.Lock()
	s.closed = true
	for t := range s.timers {
		t.Stop()
	}
	clear(s.timers)
	s.mu.Unlock()
	s.dead.Store(true)
	_ = s.ch.Close()
	_ = s.conn.Close()
	s.watched.Wait()
}
