package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// throughput is a throughput scenario: N publishers, M subscribers, one topic shape.
type throughput struct {
	name        string
	publishers  int
	subscribers int
	qos         byte
	topic       string // %d is the publisher number
	filter      string
}

var (
	fanIn  = throughput{"fan-in", 4, 1, 0, "bench/in/%d", "bench/in/+"}
	fanOut = throughput{"fan-out", 1, 16, 0, "bench/out", "bench/out"}
	qos1   = throughput{"qos1", 4, 1, 1, "bench/q1/%d", "bench/q1/+"}
)

func (t throughput) topicOf(i int) string {
	if strings.Contains(t.topic, "%d") {
		return fmt.Sprintf(t.topic, i)
	}
	return t.topic
}

// publishSize is the length of a PUBLISH of payloadSize bytes on topic (MQTT 3.1.1).
func publishSize(topic string, qos byte) int {
	body := 2 + len(topic) + payloadSize
	if qos > 0 {
		body += 2
	}
	header := 2
	for n := body; n >= 128; n >>= 7 {
		header++
	}
	return header + body
}

// counters are one atomic counter per client; total sums them.
type counters []atomic.Int64

func (c counters) total() int64 {
	var n int64
	for i := range c {
		n += c[i].Load()
	}
	return n
}

// spawn runs fn in a goroutine; a failure in it is recorded like a lost connection.
func spawn(wg *sync.WaitGroup, what string, fn func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			if r := recover(); r != nil {
				lostMu.Lock()
				if lostErr == nil {
					lostErr = fmt.Errorf("%s: %v", what, r)
				}
				lostMu.Unlock()
			}
		}()
		fn()
	}()
}

// waitGroup waits for wg at most d; false if it timed out.
func waitGroup(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// waitQuiet waits until count() stops moving for quiet (at most limit).
func waitQuiet(count func() int64, quiet, limit time.Duration) {
	last := count()
	since := time.Now()
	end := since.Add(limit)
	for {
		time.Sleep(20 * time.Millisecond)
		now := time.Now()
		if current := count(); current != last {
			last, since = current, now
		}
		if now.Sub(since) >= quiet || now.After(end) {
			return
		}
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// runThroughput: subscribers first, then publishers; go; warm up; measure a fixed window;
// stop the publishers and drain, so lost is exact.
func runThroughput(spec throughput, o *options) map[string]any {
	tag := strings.ReplaceAll(spec.name, "-", "")
	sent := make(counters, spec.publishers)
	delivered := make(counters, spec.subscribers)
	var errorCount atomic.Int64
	fanout := int64(spec.subscribers)
	limit := int64(o.window)

	subs := make([]mqtt.Client, spec.subscribers)
	for i := range subs {
		id := fmt.Sprintf("bench-%s-sub-%d", tag, i)
		subs[i] = connect(o, id, o.readBuffer)
		counter := &delivered[i]
		subscribe(subs[i], spec.filter, spec.qos, func(_ mqtt.Client, m mqtt.Message) {
			if m.Qos() != spec.qos || m.Retained() || m.Duplicate() || len(m.Payload()) != payloadSize {
				errorCount.Add(1)
			}
			counter.Add(1)
		})
	}
	// like bench.loadgen: wake a QoS 0 subscriber only for a good chunk, well below what the
	// window lets through; QoS 1 after 16 messages (the brokers keep up to 64 in flight)
	size := publishSize(spec.topicOf(0), spec.qos)
	lowat := min(o.lowat, o.window*size/4)
	if spec.qos > 0 {
		lowat = 16 * size
	}
	subConns := make([]*bufferedConn, spec.subscribers)
	for i := range subs {
		subConns[i] = connOf(fmt.Sprintf("bench-%s-sub-%d", tag, i))
		if lowat > 1 {
			if err := subConns[i].setLowat(lowat); err != nil {
				fail("SO_RCVLOWAT: %v", err)
			}
		}
	}
	pubs := make([]mqtt.Client, spec.publishers)
	for i := range pubs {
		pubs[i] = connect(o, fmt.Sprintf("bench-%s-pub-%d", tag, i), 4<<10)
	}

	var stopPub atomic.Bool
	var wg sync.WaitGroup
	payload := make([]byte, payloadSize)
	for i := range payload {
		payload[i] = 'x'
	}
	// full is the closed loop: more than `window` messages per subscriber on their way
	full := func() bool {
		return limit > 0 && sent.total()*fanout-delivered.total() > limit*fanout
	}
	for i, c := range pubs {
		topic := spec.topicOf(i)
		counter := &sent[i]
		what := fmt.Sprintf("bench-%s-pub-%d", tag, i)
		if spec.qos == 0 {
			spawn(&wg, what, func() { publishQoS0(c, topic, payload, counter, &stopPub, full) })
		} else {
			inflight, conn := o.inflight, connOf(what)
			spawn(&wg, what, func() {
				publishQoS1(c, conn, topic, payload, inflight, counter, &stopPub, full)
			})
		}
	}
	sentTotal, deliveredTotal := sent.total, delivered.total
	time.Sleep(seconds(o.warmup))
	first := takeSample(o, sentTotal, deliveredTotal)
	time.Sleep(seconds(o.duration))
	last := takeSample(o, sentTotal, deliveredTotal)
	checkLost(spec.name)
	stopPub.Store(true)
	if !waitGroup(&wg, 30*time.Second) {
		fail("%s: the publishers did not stop within 30 s", spec.name)
	}
	checkLost(spec.name)
	for _, c := range subConns { // whatever is left is read now, however little
		_ = c.setLowat(1)
	}
	waitQuiet(deliveredTotal, 500*time.Millisecond, 10*time.Second)
	totalSent, totalDelivered := sent.total(), delivered.total()
	checkLost(spec.name)
	disconnectAll(subs)

	span := last.at.Sub(first.at).Seconds()
	inWindow := last.delivered - first.delivered
	brokerSeconds := last.brokerCPU - first.brokerCPU
	var perCPU any
	if brokerSeconds > 0 {
		perCPU = int64(math.Round(float64(inWindow) / brokerSeconds))
	}
	result := map[string]any{
		"scenario":                   spec.name,
		"publishers":                 spec.publishers,
		"subscribers":                spec.subscribers,
		"qos":                        spec.qos,
		"delivered_per_s":            int64(math.Round(float64(inWindow) / span)),
		"delivered_per_broker_cpu_s": perCPU,
		"sent_per_s":                 int64(math.Round(float64(last.sent-first.sent) / span)),
		"window_s":                   round(span, 3),
		"delivered_in_window":        inWindow,
		"total_sent":                 totalSent,
		"total_delivered":            totalDelivered,
		"lost":                       totalSent*fanout - totalDelivered,
		"errors":                     errorCount.Load(),
		"loadgen_processes":          1,
	}
	for k, v := range cpuReport(first, last) {
		result[k] = v
	}
	return result
}

// publishQoS0 publishes back to back within the window; at the end it waits until its last
// PUBLISH is written, then disconnects.
func publishQoS0(c mqtt.Client, topic string, payload []byte, sent *atomic.Int64,
	stop *atomic.Bool, full func() bool) {
	var last mqtt.Token
	for !stop.Load() {
		if full() {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		last = c.Publish(topic, 0, false, payload)
		sent.Add(1)
	}
	if last != nil {
		waitToken(last, 10*time.Second, topic)
	}
	c.Disconnect(1000)
}

// publishQoS1 keeps `inflight` PUBLISHes outstanding: the next goes out when the oldest is
// acknowledged (a broker acknowledges in order). Like bench.workers.qos1_publisher, its socket
// wakes it once a quarter of the window is acknowledged (SO_RCVLOWAT), so between 3/4 of
// `inflight` and `inflight` stay in flight. It only ever waits for a PUBACK while all of them
// are outstanding (more than a quarter); when the shared window is full it sleeps instead.
// At the end the threshold goes back to one byte and it waits for every PUBACK.
func publishQoS1(c mqtt.Client, conn *bufferedConn, topic string, payload []byte, inflight int,
	sent *atomic.Int64, stop *atomic.Bool, full func() bool) {
	quarter := max(1, inflight/4)
	if quarter > 1 {
		if err := conn.setLowat(4 * quarter); err != nil {
			fail("SO_RCVLOWAT: %v", err)
		}
	}
	ring := make([]mqtt.Token, 0, inflight)
	for !stop.Load() {
		for len(ring) > 0 && isDone(ring[0]) {
			ring = ring[1:]
		}
		if len(ring) == inflight {
			waitToken(ring[0], 10*time.Second, topic)
			continue
		}
		if full() {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		if cap(ring) == len(ring) { // slid to the end of its array: move back to the start
			ring = append(make([]mqtt.Token, 0, inflight), ring...)
		}
		ring = append(ring, c.Publish(topic, 1, false, payload))
		sent.Add(1)
	}
	_ = conn.setLowat(1)
	for _, t := range ring {
		waitToken(t, 10*time.Second, topic)
	}
	c.Disconnect(1000)
}

func disconnectAll(clients []mqtt.Client) {
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); c.Disconnect(250) }()
	}
	waitGroup(&wg, 30*time.Second)
}

// percentile is the nearest-rank q quantile of an ascending, non-empty slice.
func percentile(ordered []int64, q float64) int64 {
	i := int(math.Ceil(q*float64(len(ordered)))) - 1
	return ordered[max(0, min(len(ordered)-1, i))]
}

// runLatency: a paced QoS 1 publisher and a QoS 1 subscriber; the latency of every message
// sent inside the window.
func runLatency(o *options) map[string]any {
	base := time.Now()
	mono := func() int64 { return int64(time.Since(base)) }
	var mu sync.Mutex
	var sentAt, latency []int64
	var delivered, sent atomic.Int64
	var errorCount atomic.Int64
	sub := connect(o, "bench-lat-sub", o.readBuffer)
	subscribe(sub, "bench/lat", 1, func(_ mqtt.Client, m mqtt.Message) {
		now := mono()
		p := m.Payload()
		if m.Qos() != 1 || len(p) != payloadSize {
			errorCount.Add(1)
			return
		}
		ts := int64(binary.BigEndian.Uint64(p[0:8]))
		mu.Lock()
		sentAt = append(sentAt, ts)
		latency = append(latency, now-ts)
		mu.Unlock()
		delivered.Add(1)
	})
	pub := connect(o, "bench-lat-pub", 4<<10)
	var stopPub atomic.Bool
	var wg sync.WaitGroup
	interval := time.Duration(1e9 / o.latencyRate)
	spawn(&wg, "bench-lat-pub", func() {
		next := mono()
		var seq int64
		var tokens []mqtt.Token
		for !stopPub.Load() {
			now := mono()
			if now < next {
				time.Sleep(time.Duration(next - now))
				continue
			}
			payload := make([]byte, payloadSize)
			binary.BigEndian.PutUint64(payload[0:8], uint64(mono()))
			binary.BigEndian.PutUint64(payload[8:16], uint64(seq))
			tokens = append(tokens, pub.Publish("bench/lat", 1, false, payload))
			seq++
			sent.Store(seq)
			next += int64(interval)
			for len(tokens) > 0 && isDone(tokens[0]) {
				tokens = tokens[1:]
			}
		}
		for _, t := range tokens {
			waitToken(t, 10*time.Second, "bench-lat-pub")
		}
		pub.Disconnect(1000)
	})
	time.Sleep(seconds(o.warmup))
	first := takeSample(o, sent.Load, delivered.Load)
	start := mono()
	time.Sleep(seconds(o.latencyDuration))
	end := mono()
	last := takeSample(o, sent.Load, delivered.Load)
	checkLost("latency")
	stopPub.Store(true)
	if !waitGroup(&wg, 30*time.Second) {
		fail("latency: the publisher did not stop within 30 s")
	}
	waitQuiet(delivered.Load, 500*time.Millisecond, 5*time.Second)
	checkLost("latency")
	sub.Disconnect(250)

	mu.Lock()
	var window []int64
	for i, ts := range sentAt {
		if start <= ts && ts < end {
			window = append(window, latency[i])
		}
	}
	received := int64(len(latency))
	mu.Unlock()
	if len(window) == 0 {
		fail("latency: no latency samples in the measured window")
	}
	sort.Slice(window, func(i, j int) bool { return window[i] < window[j] })
	ms := func(ns int64) float64 { return round(float64(ns)/1e6, 3) }
	result := map[string]any{
		"scenario":            "latency",
		"rate":                o.latencyRate,
		"samples":             len(window),
		"p50_ms":              ms(percentile(window, 0.50)),
		"p99_ms":              ms(percentile(window, 0.99)),
		"max_ms":              ms(window[len(window)-1]),
		"total_sent":          sent.Load(),
		"total_delivered":     received,
		"lost":                sent.Load() - received,
		"errors":              errorCount.Load(),
		"delivered_in_window": last.delivered - first.delivered,
	}
	for k, v := range cpuReport(first, last) {
		result[k] = v
	}
	return result
}

// isDone tells whether a token has completed, without waiting.
func isDone(t mqtt.Token) bool {
	select {
	case <-t.Done():
		return true
	default:
		return false
	}
}
