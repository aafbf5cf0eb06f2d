package main

import (
	"bufio"
	"net"
	"net/url"
	"runtime"
	"sync"
	"syscall"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// paho.mqtt.golang reads a packet with three Read calls on the raw connection (the first
// byte, each byte of the remaining length, the body) and writes each packet with one Write.
// On a plain TCP connection that is three read(2) and one write(2) system calls per message,
// which would make the load generator the bottleneck long before the broker. bufferedConn is
// the transport handed to paho through its documented SetCustomOpenConnectionFn hook: reads
// come from a bufio.Reader (one read(2) drains whatever the kernel holds), and writes are
// appended to a buffer that a flusher goroutine writes out whenever it gets to run, so
// everything paho wrote since the last flush leaves in one write(2). Write never waits for
// the socket unless the buffer holds more than flushAt bytes (then it flushes itself, which
// is the back-pressure). Close flushes first, so a DISCONNECT written just before it and the
// PUBLISHes before that are never lost. MQTT is untouched: paho encodes and decodes it all.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader

	mu      sync.Mutex // guards pending and spare
	pending []byte
	spare   []byte
	err     error

	wmu  sync.Mutex // one flush at a time, in order
	kick chan struct{}
	done chan struct{}
	once sync.Once
}

const flushAt = 64 << 10

// yields is how many times the flusher lets others run before it writes.
var yields = 1

func newBufferedConn(c net.Conn, readBuffer int) *bufferedConn {
	b := &bufferedConn{
		Conn: c,
		r:    bufio.NewReaderSize(c, readBuffer),
		kick: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	go b.flusher()
	return b
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *bufferedConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	b.pending = append(b.pending, p...)
	size := len(b.pending)
	b.mu.Unlock()
	if size >= flushAt {
		if err := b.flush(); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	select {
	case b.kick <- struct{}{}:
	default:
	}
	return len(p), nil
}

// flush writes everything pending so far with one Write on the socket.
func (b *bufferedConn) flush() error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.mu.Lock()
	data := b.pending
	b.pending = b.spare[:0]
	b.spare = nil
	err := b.err
	b.mu.Unlock()
	if err != nil || len(data) == 0 {
		b.mu.Lock()
		b.spare = data[:0]
		b.mu.Unlock()
		return err
	}
	_, err = b.Conn.Write(data)
	b.mu.Lock()
	if err != nil && b.err == nil {
		b.err = err
	}
	b.spare = data[:0]
	b.mu.Unlock()
	return err
}

func (b *bufferedConn) flusher() {
	for {
		select {
		case <-b.kick:
			// let the goroutines that write (and the publishers behind them) run first, so
			// one write(2) carries more packets; on one CPU this is a trip around the
			// scheduler's queue, with several CPUs it returns at once
			for range yields {
				runtime.Gosched()
			}
			_ = b.flush()
		case <-b.done:
			return
		}
	}
}

func (b *bufferedConn) Close() error {
	_ = b.Conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_ = b.flush()
	b.once.Do(func() { close(b.done) })
	return b.Conn.Close()
}

// setLowat asks the kernel to report the socket readable only once n bytes are waiting
// (SO_RCVLOWAT; 1 is the default), what bench.workers does for its subscribers: a
// subscriber that reads a large chunk at a time spends its CPU on messages, not on read(2).
// Lowering it wakes a reader whose socket already holds that much.
func (b *bufferedConn) setLowat(n int) error {
	sc, ok := b.Conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
	})
	if err != nil {
		return err
	}
	return serr
}

// conns maps a client id to its connection, so a scenario can tune a subscriber's socket
// once it has subscribed.
var (
	connsMu sync.Mutex
	conns   = map[string]*bufferedConn{}
)

func connOf(clientID string) *bufferedConn {
	connsMu.Lock()
	defer connsMu.Unlock()
	return conns[clientID]
}

// dialer opens the TCP connection (TCP_NODELAY, as Go sets by default and as bench.workers
// does) and wraps it; readBuffer is the read buffer size of each connection.
func dialer(readBuffer int) mqtt.OpenConnectionFunc {
	return func(uri *url.URL, options mqtt.ClientOptions) (net.Conn, error) {
		d := net.Dialer{Timeout: options.ConnectTimeout}
		c, err := d.Dial("tcp", uri.Host)
		if err != nil {
			return nil, err
		}
		if tcp, ok := c.(*net.TCPConn); ok {
			_ = tcp.SetNoDelay(true)
		}
		b := newBufferedConn(c, readBuffer)
		connsMu.Lock()
		conns[options.ClientID] = b
		connsMu.Unlock()
		return b, nil
	}
}
