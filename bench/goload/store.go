package main

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// runIdle opens N connections that only CONNECT (at most idleConcurrency handshakes at a
// time) and reads the broker's RSS before and after.
func runIdle(o *options) map[string]any {
	count := o.idleConnections
	rssBefore, haveBefore := rssKiB(o.brokerPID)
	limit := 60*time.Second + time.Duration(count)*20*time.Millisecond
	clients := make([]mqtt.Client, count)
	var failed atomic.Int64
	slots := make(chan struct{}, max(1, o.idleConcurrency))
	var wg sync.WaitGroup
	start := time.Now()
	for i := range count {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer func() {
				if r := recover(); r != nil {
					failed.Add(1)
				}
			}()
			// a small read buffer: an idle connection reads one CONNACK
			clients[i] = connect(o, fmt.Sprintf("bench-idle-%d", i), 512)
		}()
	}
	if !waitGroup(&wg, limit) {
		fail("idle connections: timed out after %s", limit)
	}
	connectSeconds := time.Since(start).Seconds()
	time.Sleep(seconds(o.idleSettle))
	rssAfter, haveAfter := rssKiB(o.brokerPID)
	var connected []mqtt.Client
	for _, c := range clients {
		if c != nil {
			connected = append(connected, c)
		}
	}
	result := map[string]any{
		"scenario":           "idle",
		"connections":        count,
		"connacked":          len(connected),
		"failed":             failed.Load(),
		"connect_s":          round(connectSeconds, 3),
		"rss_before_kib":     nil,
		"rss_after_kib":      nil,
		"kib_per_connection": nil,
	}
	if haveBefore {
		result["rss_before_kib"] = rssBefore
	}
	if haveAfter {
		result["rss_after_kib"] = rssAfter
	}
	if haveBefore && haveAfter && len(connected) > 0 {
		result["kib_per_connection"] = round(float64(rssAfter-rssBefore)/float64(len(connected)), 3)
	}
	disconnectAll(connected)
	return result
}

func retainedTopic(i int) string { return fmt.Sprintf("bench/ret/%06d", i) }

// runRetained stores N retained QoS 1 messages (every PUBACK received), then times a `#`
// subscriber at QoS 0 until it holds every one of them.
func runRetained(o *options) map[string]any {
	count := o.retained
	limit := 60*time.Second + time.Duration(count)*5*time.Millisecond
	var errorCount atomic.Int64
	payload := []byte(strings.Repeat("r", payloadSize))

	pub := connect(o, "bench-ret-pub", 64<<10)
	start := time.Now()
	deadline := start.Add(limit)
	inflight := max(1, o.retainedInflight)
	ring := make([]mqtt.Token, 0, count)
	acked := 0
	for i := range count {
		if i-acked >= inflight {
			waitToken(ring[acked], time.Until(deadline), "storing retained messages")
			acked++
		}
		ring = append(ring, pub.Publish(retainedTopic(i), 1, true, payload))
	}
	for ; acked < len(ring); acked++ {
		waitToken(ring[acked], time.Until(deadline), "storing retained messages")
	}
	storeSeconds := time.Since(start).Seconds()
	checkLost("retained")
	pub.Disconnect(1000)

	sub := connect(o, "bench-ret-sub", o.readBuffer)
	var mu sync.Mutex
	topics := make(map[string]struct{}, count)
	var publishes, lastSeen atomic.Int64
	var finished time.Time
	done := make(chan struct{})
	t0 := time.Now()
	tok := sub.Subscribe("#", 0, func(_ mqtt.Client, m mqtt.Message) {
		publishes.Add(1)
		lastSeen.Store(int64(time.Since(t0)))
		if !m.Retained() || !strings.HasPrefix(m.Topic(), "bench/ret/") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, seen := topics[m.Topic()]; seen {
			return
		}
		topics[m.Topic()] = struct{}{}
		if len(topics) == count {
			finished = time.Now()
			close(done)
		}
	})
	// like bench.workers.retained_subscriber: give up when nothing arrives for 5 s
	quiet := 5 * time.Second
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(100 * time.Millisecond):
			idle := time.Since(t0) - time.Duration(lastSeen.Load())
			if idle > quiet || time.Now().After(deadline) {
				waiting = false
			}
		}
	}
	if !tok.WaitTimeout(setupTimeout) || tok.Error() != nil ||
		tok.(*mqtt.SubscribeToken).Result()["#"] != 0 {
		errorCount.Add(1)
	}
	checkLost("retained")
	mu.Lock()
	delivered := len(topics)
	end := finished
	mu.Unlock()
	if end.IsZero() {
		end = time.Now()
	}
	elapsed := end.Sub(t0).Seconds()
	sub.Disconnect(250)
	var perSecond any
	if elapsed > 0 {
		perSecond = int64(math.Round(float64(delivered) / elapsed))
	}
	return map[string]any{
		"scenario":           "retained",
		"retained":           count,
		"store_s":            round(storeSeconds, 3),
		"delivered":          delivered,
		"publishes_received": publishes.Load(),
		"delivery_s":         round(elapsed, 4),
		"delivered_per_s":    perSecond,
		"errors":             errorCount.Load(),
	}
}
