// Command goclients drives the Eclipse Paho Go clients against an MQTT broker, one scenario per
// run, and prints what it did and received as JSON lines on stdout ({"event": ..., ...}).
//
//	goclients -broker 127.0.0.1:1883 -topic c28/x -count 50 [-store DIR] SCENARIO
//
// Scenarios with "v3-" use paho.mqtt.golang (MQTT 3.1.1), "v5-" paho.golang's autopaho (MQTT 5).
// The scenarios that outlive a broker restart print "ready" when the broker may be stopped;
// v3-filestore and v5-restart then print "lost" once the clients noticed and "stored" when the
// messages published meanwhile are in the client's store, after which the broker is started
// again on the same address. Every wait is bounded by -timeout; a scenario that runs out of
// time reports what it had and exits with status 1. GOCLIENTS_DEBUG=1 sends both libraries'
// debug logs to stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/autopaho/queue/file"
	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"
)

var (
	broker  = flag.String("broker", "127.0.0.1:1883", "broker host:port")
	prefix  = flag.String("topic", "goclients", "topic and client id prefix")
	count   = flag.Int("count", 50, "messages per topic")
	store   = flag.String("store", "", "directory of the client's persistent store")
	timeout = flag.Duration("timeout", 60*time.Second, "bound of every wait")
	outMu   sync.Mutex
)

func emit(event string, fields map[string]any) {
	if fields == nil {
		fields = map[string]any{}
	}
	fields["event"] = event
	line, err := json.Marshal(fields)
	if err != nil {
		panic(err)
	}
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Println(string(line))
}

func fail(format string, args ...any) {
	emit("error", map[string]any{"message": fmt.Sprintf(format, args...)})
	os.Exit(1)
}

// received is one message as the application saw it.
type received struct {
	payload string
	qos     byte
	retain  bool
	at      time.Time
	props   map[string]any // MQTT 5 properties the tests look at
}

// collector records messages by topic and wakes waiters on each one.
type collector struct {
	mu     sync.Mutex
	topics map[string][]received
	wake   chan struct{}
}

func newCollector() *collector {
	return &collector{topics: map[string][]received{}, wake: make(chan struct{}, 1)}
}

func (c *collector) add(topic string, r received) {
	r.at = time.Now()
	c.mu.Lock()
	c.topics[topic] = append(c.topics[topic], r)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *collector) v3(_ mqtt.Client, m mqtt.Message) {
	c.add(m.Topic(), received{payload: string(m.Payload()), qos: m.Qos(), retain: m.Retained()})
}

func (c *collector) v5(p autopaho.PublishReceived) (bool, error) {
	props := map[string]any{}
	if pp := p.Packet.Properties; pp != nil {
		if pp.ContentType != "" {
			props["content_type"] = pp.ContentType
		}
		if pp.PayloadFormat != nil {
			props["payload_format"] = *pp.PayloadFormat
		}
		if pp.MessageExpiry != nil {
			props["message_expiry"] = *pp.MessageExpiry
		}
		for _, u := range pp.User {
			props["user:"+u.Key] = u.Value
		}
	}
	c.add(p.Packet.Topic, received{payload: string(p.Packet.Payload), qos: p.Packet.QoS,
		retain: p.Packet.Retain, props: props})
	return true, nil
}

// arrival is when payload first arrived on topic (the zero time if it did not).
func (c *collector) arrival(topic, payload string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.topics[topic] {
		if r.payload == payload {
			return r.at
		}
	}
	return time.Time{}
}

// distinct is how many different payloads arrived on topic.
func (c *collector) distinct(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range c.topics[topic] {
		seen[r.payload] = true
	}
	return len(seen)
}

// wait until every topic of want has at least that many distinct payloads.
func (c *collector) wait(want map[string]int) bool {
	deadline := time.After(*timeout)
	for {
		done := true
		for topic, n := range want {
			if c.distinct(topic) < n {
				done = false
			}
		}
		if done {
			return true
		}
		select {
		case <-c.wake:
		case <-deadline:
			return false
		}
	}
}

// report prints one "received" line per topic: how many, how many distinct, whether in the
// order published, and the QoS levels and retain flags seen.
func (c *collector) report(topics ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, topic := range topics {
		msgs := c.topics[topic]
		seen := map[string]bool{}
		qos := map[byte]bool{}
		retained := 0
		inOrder := true
		last := -1
		payloads := []string{}
		props := []map[string]any{}
		for _, r := range msgs {
			if !seen[r.payload] {
				seen[r.payload] = true
				if n, err := strconv.Atoi(r.payload); err == nil {
					if n <= last {
						inOrder = false
					}
					last = n
				}
			}
			qos[r.qos] = true
			if r.retain {
				retained++
			}
			payloads = append(payloads, r.payload)
			props = append(props, r.props)
		}
		levels := []int{}
		for q := range qos {
			levels = append(levels, int(q))
		}
		sort.Ints(levels)
		fields := map[string]any{"topic": topic, "count": len(msgs), "distinct": len(seen),
			"in_order": inOrder, "qos": levels, "retained": retained}
		fields["payloads"] = payloads
		if len(msgs) <= 10 {
			fields["properties"] = props
		}
		emit("received", fields)
	}
}

func topic(name string) string { return *prefix + "/" + name }

func waitToken(what string, t mqtt.Token) {
	if !t.WaitTimeout(*timeout) {
		fail("%s: no answer within %s", what, *timeout)
	}
	if t.Error() != nil {
		fail("%s: %v", what, t.Error())
	}
}

// -- paho.mqtt.golang (MQTT 3.1.1) ------------------------------------------------------------

func v3options(id string, clean bool) *mqtt.ClientOptions {
	return mqtt.NewClientOptions().AddBroker("tcp://" + *broker).SetClientID(*prefix + "-" + id).
		SetProtocolVersion(4).SetCleanSession(clean).SetAutoReconnect(false).
		SetKeepAlive(30 * time.Second).SetConnectTimeout(*timeout).SetOrderMatters(true)
}

// through points the client at addr instead of the broker.
func through(o *mqtt.ClientOptions, addr string) *mqtt.ClientOptions {
	o.Servers = nil
	return o.AddBroker("tcp://" + addr)
}

// v3connect connects and returns the client and CONNACK's session present flag.
func v3connect(o *mqtt.ClientOptions) (mqtt.Client, bool) {
	client := mqtt.NewClient(o)
	token := client.Connect()
	waitToken("connect "+o.ClientID, token)
	return client, token.(*mqtt.ConnectToken).SessionPresent()
}

func v3publish(client mqtt.Client, name string, qos byte, n int) {
	tokens := make([]mqtt.Token, 0, n)
	for i := 0; i < n; i++ {
		tokens = append(tokens, client.Publish(topic(name), qos, false, strconv.Itoa(i)))
	}
	for _, t := range tokens {
		waitToken("publish "+name, t)
	}
}

func v3subscribe(client mqtt.Client, c *collector, subs map[string]byte) {
	filters := map[string]byte{}
	for name, qos := range subs {
		filters[topic(name)] = qos
	}
	token := client.SubscribeMultiple(filters, c.v3)
	waitToken("subscribe", token)
	granted := map[string]int{}
	for filter, code := range token.(*mqtt.SubscribeToken).Result() {
		granted[filter] = int(code)
	}
	emit("suback", map[string]any{"granted": granted})
}

// v3QoS: QoS 0, 1 and 2 each on its own topic, and a QoS 2 publish to a QoS 1 subscription.
func v3QoS() {
	c := newCollector()
	sub, _ := v3connect(v3options("sub", true))
	v3subscribe(sub, c, map[string]byte{"q0": 0, "q1": 1, "q2": 2, "down": 1})
	pub, _ := v3connect(v3options("pub", true))
	want := map[string]int{}
	for _, p := range []struct {
		name string
		qos  byte
	}{{"q0", 0}, {"q1", 1}, {"q2", 2}, {"down", 2}} {
		v3publish(pub, p.name, p.qos, *count)
		want[topic(p.name)] = *count
	}
	ok := c.wait(want)
	c.report(topic("q0"), topic("q1"), topic("q2"), topic("down"))
	pub.Disconnect(250)
	sub.Disconnect(250)
	done(ok)
}

// v3Session: a clean-session-false subscriber is away while QoS 1 and 2 messages are published;
// it gets them when it comes back. A clean session afterwards ends the stored session.
func v3Session() {
	c := newCollector()
	first, present := v3connect(v3options("sub", false))
	emit("connack", map[string]any{"connection": 1, "session_present": present})
	v3subscribe(first, c, map[string]byte{"s1": 1, "s2": 2})
	first.Disconnect(250)
	pub, _ := v3connect(v3options("pub", true))
	v3publish(pub, "s1", 1, *count)
	v3publish(pub, "s2", 2, *count)
	// The stored session's messages come before any Subscribe call: the default handler gets them.
	back, present := v3connect(v3options("sub", false).SetDefaultPublishHandler(c.v3))
	emit("connack", map[string]any{"connection": 2, "session_present": present})
	ok := c.wait(map[string]int{topic("s1"): *count, topic("s2"): *count})
	c.report(topic("s1"), topic("s2"))
	back.Disconnect(250)
	clean, present := v3connect(v3options("sub", true))
	emit("connack", map[string]any{"connection": 3, "session_present": present})
	clean.Disconnect(250)
	again, present := v3connect(v3options("sub", false))
	emit("connack", map[string]any{"connection": 4, "session_present": present})
	again.Disconnect(250)
	pub.Disconnect(250)
	done(ok)
}

// downUp counts connection losses and (re)connections of a client.
type downUp struct {
	mu       sync.Mutex
	lost, up int
	wake     chan struct{}
}

func newDownUp() *downUp { return &downUp{wake: make(chan struct{}, 1)} }

func (d *downUp) change(lost, up int) {
	d.mu.Lock()
	d.lost += lost
	d.up += up
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *downUp) waitFor(lost, up int) bool {
	deadline := time.After(*timeout)
	for {
		d.mu.Lock()
		ok := d.lost >= lost && d.up >= up
		d.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-d.wake:
		case <-deadline:
			return false
		}
	}
}

func (d *downUp) counts() (int, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost, d.up
}

func reconnecting(o *mqtt.ClientOptions, d *downUp) *mqtt.ClientOptions {
	return o.SetAutoReconnect(true).SetMaxReconnectInterval(200 * time.Millisecond).
		SetConnectionLostHandler(func(mqtt.Client, error) { d.change(1, 0) }).
		SetOnConnectHandler(func(mqtt.Client) { d.change(0, 1) })
}

func countFiles(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		fail("read %s: %v", dir, err)
	}
	return len(entries)
}

// resendOrder is the order of the message ids in the file store, which is the order in which
// the client sends them again when it reconnects (it reads the same directory the same way).
func resendOrder() []int {
	fs := mqtt.NewFileStore(*store)
	fs.Open()
	defer fs.Close()
	ids := []int{}
	for _, key := range fs.All() {
		var id int
		if _, err := fmt.Sscanf(key, "o.%d", &id); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// v3FileStore: the publisher keeps its outgoing QoS 1 and 2 messages in a FileStore; the broker
// stops, the messages are published while it is down, and both clients reconnect on their own
// once it is back. The subscriber's session (clean session false) lives in the broker.
func v3FileStore() {
	if *store == "" {
		fail("-store is required")
	}
	c := newCollector()
	subState, pubState := newDownUp(), newDownUp()
	sub, _ := v3connect(reconnecting(v3options("sub", false), subState).SetDefaultPublishHandler(c.v3))
	v3subscribe(sub, c, map[string]byte{"f1": 1, "f2": 2})
	pub, _ := v3connect(reconnecting(v3options("pub", false), pubState).
		SetStore(mqtt.NewFileStore(*store)))
	emit("ready", nil)
	if !subState.waitFor(1, 1) || !pubState.waitFor(1, 1) {
		fail("the broker did not go away")
	}
	emit("lost", nil)
	tokens := []mqtt.Token{}
	for _, p := range []struct {
		name string
		qos  byte
	}{{"f1", 1}, {"f2", 2}} {
		for i := 0; i < *count; i++ {
			tokens = append(tokens, pub.Publish(topic(p.name), p.qos, false, strconv.Itoa(i)))
		}
	}
	emit("stored", map[string]any{"files": countFiles(*store), "resend_order": resendOrder()})
	for _, t := range tokens {
		waitToken("publish", t)
	}
	ok := c.wait(map[string]int{topic("f1"): *count, topic("f2"): *count})
	c.report(topic("f1"), topic("f2"))
	_, subUp := subState.counts()
	_, pubUp := pubState.counts()
	left := []string{}
	if entries, err := os.ReadDir(*store); err == nil {
		for _, e := range entries {
			left = append(left, e.Name())
		}
	}
	emit("connections", map[string]any{"subscriber": subUp, "publisher": pubUp,
		"store_files": countFiles(*store), "left": left})
	pub.Disconnect(250)
	sub.Disconnect(250)
	done(ok)
}

// cutter is a TCP relay between clients and the broker whose connections can be cut: both
// sides see the stream end without a DISCONNECT, as when a cable is pulled. Closing a client's
// own socket would not do: both paho libraries take "use of closed network connection" for a
// close they asked for and never report the connection as lost.
type cutter struct {
	listener net.Listener
	mu       sync.Mutex
	open     []net.Conn
}

func newCutter() *cutter {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("relay: %v", err)
	}
	k := &cutter{listener: l}
	go k.serve()
	return k
}

func (k *cutter) addr() string { return k.listener.Addr().String() }

func (k *cutter) serve() {
	for {
		client, err := k.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", *broker)
		if err != nil {
			_ = client.Close()
			continue
		}
		k.mu.Lock()
		k.open = append(k.open, client, server)
		k.mu.Unlock()
		go relay(client, server)
		go relay(server, client)
	}
}

func relay(from, to net.Conn) {
	_, _ = io.Copy(to, from)
	_ = to.Close()
	_ = from.Close()
}

// cut closes every relayed connection.
func (k *cutter) cut() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, conn := range k.open {
		_ = conn.Close()
	}
	k.open = nil
}

// v3Reconnect: the broker restarts; the client notices, reconnects on its own and, its session
// being clean, subscribes again from its connect handler.
func v3Reconnect() {
	c := newCollector()
	state := newDownUp()
	subscribed := make(chan struct{}, 4)
	o := reconnecting(v3options("auto", true), state)
	o.SetOnConnectHandler(func(client mqtt.Client) {
		state.change(0, 1)
		// Not in the handler itself: it runs on the client's connection goroutine, which must be
		// free to read the SUBACK.
		go func() {
			waitToken("subscribe", client.Subscribe(topic("r"), 1, c.v3))
			subscribed <- struct{}{}
		}()
	})
	client, _ := v3connect(o)
	select {
	case <-subscribed:
	case <-time.After(*timeout):
		fail("not subscribed")
	}
	waitToken("publish", client.Publish(topic("r"), 1, false, "0"))
	if !c.wait(map[string]int{topic("r"): 1}) {
		fail("nothing before the restart")
	}
	emit("ready", nil)
	if !state.waitFor(1, 2) {
		fail("no reconnection")
	}
	select {
	case <-subscribed:
	case <-time.After(*timeout):
		fail("not subscribed again")
	}
	waitToken("publish", client.Publish(topic("r"), 1, false, "1"))
	ok := c.wait(map[string]int{topic("r"): 2})
	c.report(topic("r"))
	lost, up := state.counts()
	emit("connections", map[string]any{"lost": lost, "up": up})
	client.Disconnect(250)
	done(ok)
}

// v3Will: a client that disconnects properly leaves no will; one whose connection is cut does.
func v3Will() {
	c := newCollector()
	watcher, _ := v3connect(v3options("watch", true))
	v3subscribe(watcher, c, map[string]byte{"will": 2})
	proper, _ := v3connect(v3options("proper", true).SetWill(topic("will"), "proper", 1, false))
	proper.Disconnect(250)
	k := newCutter()
	lost := newDownUp()
	broken, _ := v3connect(through(v3options("broken", true), k.addr()).
		SetWill(topic("will"), "broken", 2, false).
		SetConnectionLostHandler(func(mqtt.Client, error) { lost.change(1, 0) }))
	k.cut()
	ok := c.wait(map[string]int{topic("will"): 1})
	// A marker behind the wills: whatever will was published comes before it.
	waitToken("marker", watcher.Publish(topic("will"), 1, false, "marker"))
	ok = c.wait(map[string]int{topic("will"): 2}) && ok
	c.report(topic("will"))
	emit("client", map[string]any{"noticed_the_cut": lost.waitFor(1, 0)})
	broken.Disconnect(0)
	watcher.Disconnect(250)
	done(ok)
}

// -- paho.golang autopaho (MQTT 5) ------------------------------------------------------------

type v5opts struct {
	addr       string // the broker's address unless set
	id         string
	cleanStart bool
	expiry     uint32
	c          *collector
	state      *downUp
	queueDir   string
	will       *paho.WillMessage
	willProps  *paho.WillProperties
	disconnect byte
	down       chan struct{} // told when the connection drops; no reconnection then
	onUp       func(*autopaho.ConnectionManager, *paho.Connack)
}

// v5connect starts an autopaho connection manager and waits for its first CONNACK.
func v5connect(o v5opts) (*autopaho.ConnectionManager, *paho.Connack) {
	addr := *broker
	if o.addr != "" {
		addr = o.addr
	}
	u, err := url.Parse("mqtt://" + addr)
	if err != nil {
		fail("url: %v", err)
	}
	connacks := make(chan *paho.Connack, 16)
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     30,
		CleanStartOnInitialConnection: o.cleanStart,
		SessionExpiryInterval:         o.expiry,
		ConnectTimeout:                *timeout,
		ReconnectBackoff:              func(int) time.Duration { return 100 * time.Millisecond },
		WillMessage:                   o.will,
		WillProperties:                o.willProps,
		OnConnectionUp: func(cm *autopaho.ConnectionManager, ack *paho.Connack) {
			if o.onUp != nil {
				o.onUp(cm, ack)
			}
			if o.state != nil {
				o.state.change(0, 1)
			}
			select {
			case connacks <- ack:
			default:
			}
		},
		OnConnectionDown: func() bool {
			if o.down != nil {
				select {
				case o.down <- struct{}{}:
				default:
				}
				return false
			}
			if o.state != nil {
				o.state.change(1, 0)
				return true
			}
			return false
		},
		ClientConfig: paho.ClientConfig{ClientID: *prefix + "-" + o.id},
	}
	if os.Getenv("GOCLIENTS_DEBUG") != "" {
		cfg.Debug = log.New(os.Stderr, o.id+" ", log.Lmicroseconds)
		cfg.PahoDebug = log.New(os.Stderr, o.id+" paho ", log.Lmicroseconds)
	}
	if o.c != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){
			func(p paho.PublishReceived) (bool, error) {
				return o.c.v5(autopaho.PublishReceived{PublishReceived: p})
			}}
	}
	if o.queueDir != "" {
		q, err := file.New(o.queueDir, "queue", ".msg")
		if err != nil {
			fail("queue: %v", err)
		}
		cfg.Queue = q
	}
	if o.disconnect != 0 {
		code := o.disconnect
		cfg.DisconnectPacketBuilder = func() *paho.Disconnect { return &paho.Disconnect{ReasonCode: code} }
	}
	cm, err := autopaho.NewConnection(context.Background(), cfg)
	if err != nil {
		fail("connect %s: %v", o.id, err)
	}
	select {
	case ack := <-connacks:
		return cm, ack
	case <-time.After(*timeout):
		fail("connect %s: no CONNACK", o.id)
	}
	return nil, nil
}

func ctx() context.Context {
	c, cancel := context.WithTimeout(context.Background(), *timeout)
	_ = cancel // released when the timeout fires; runs are short
	return c
}

func v5disconnect(cm *autopaho.ConnectionManager) {
	if err := cm.Disconnect(ctx()); err != nil {
		fail("disconnect: %v", err)
	}
}

func v5subscribe(cm *autopaho.ConnectionManager, subs map[string]byte) {
	names := make([]string, 0, len(subs))
	for name := range subs {
		names = append(names, name)
	}
	sort.Strings(names)
	options := []paho.SubscribeOptions{}
	for _, name := range names {
		options = append(options, paho.SubscribeOptions{Topic: topic(name), QoS: subs[name]})
	}
	ack, err := cm.Subscribe(ctx(), &paho.Subscribe{Subscriptions: options})
	if err != nil {
		fail("subscribe: %v", err)
	}
	granted := map[string]int{}
	for i, code := range ack.Reasons {
		granted[topic(names[i])] = int(code)
	}
	emit("suback", map[string]any{"granted": granted})
}

// v5publish publishes n messages one after the other, each waiting for its acknowledgement.
func v5publish(cm *autopaho.ConnectionManager, name string, qos byte, n int) {
	reasons := map[int]int{}
	for i := 0; i < n; i++ {
		resp, err := cm.Publish(ctx(), &paho.Publish{Topic: topic(name), QoS: qos,
			Payload: []byte(strconv.Itoa(i))})
		if err != nil {
			fail("publish %s: %v", name, err)
		}
		if resp != nil {
			reasons[int(resp.ReasonCode)]++
		}
	}
	emit("published", map[string]any{"topic": topic(name), "qos": qos, "reasons": reasons})
}

func v5QoS() {
	c := newCollector()
	sub, _ := v5connect(v5opts{id: "sub", cleanStart: true, c: c})
	v5subscribe(sub, map[string]byte{"q0": 0, "q1": 1, "q2": 2, "down": 1})
	pub, _ := v5connect(v5opts{id: "pub", cleanStart: true})
	var wg sync.WaitGroup
	for _, p := range []struct {
		name string
		qos  byte
	}{{"q0", 0}, {"q1", 1}, {"q2", 2}, {"down", 2}} {
		wg.Add(1)
		go func() { defer wg.Done(); v5publish(pub, p.name, p.qos, *count) }()
	}
	wg.Wait()
	ok := c.wait(map[string]int{topic("q0"): *count, topic("q1"): *count,
		topic("q2"): *count, topic("down"): *count})
	c.report(topic("q0"), topic("q1"), topic("q2"), topic("down"))
	v5disconnect(pub)
	v5disconnect(sub)
	done(ok)
}

// v5Session: a session with an expiry interval outlives its connection and collects QoS 1 and 2
// messages; one with expiry 0 ends with its connection.
func v5Session() {
	c := newCollector()
	first, ack := v5connect(v5opts{id: "sub", cleanStart: true, expiry: 300})
	emit("connack", map[string]any{"connection": 1, "session_present": ack.SessionPresent})
	v5subscribe(first, map[string]byte{"s1": 1, "s2": 2})
	v5disconnect(first)
	pub, _ := v5connect(v5opts{id: "pub", cleanStart: true})
	v5publish(pub, "s1", 1, *count)
	v5publish(pub, "s2", 2, *count)
	back, ack := v5connect(v5opts{id: "sub", cleanStart: false, expiry: 300, c: c})
	emit("connack", map[string]any{"connection": 2, "session_present": ack.SessionPresent})
	ok := c.wait(map[string]int{topic("s1"): *count, topic("s2"): *count})
	c.report(topic("s1"), topic("s2"))
	v5disconnect(back)

	short, _ := v5connect(v5opts{id: "short", cleanStart: true, expiry: 0})
	v5subscribe(short, map[string]byte{"e": 1})
	v5disconnect(short)
	v5publish(pub, "e", 1, 1)
	gone, ack := v5connect(v5opts{id: "short", cleanStart: false, expiry: 0, c: c})
	emit("connack", map[string]any{"connection": 3, "session_present": ack.SessionPresent})
	// Subscribed afresh: only the marker published now can arrive, never the earlier message.
	v5subscribe(gone, map[string]byte{"e": 1})
	if _, err := pub.Publish(ctx(), &paho.Publish{Topic: topic("e"), QoS: 1,
		Payload: []byte("marker")}); err != nil {
		fail("marker: %v", err)
	}
	ok = c.wait(map[string]int{topic("e"): 1}) && ok
	c.report(topic("e"))
	v5disconnect(gone)
	v5disconnect(pub)
	done(ok)
}

// v5Restart: the publisher queues messages in autopaho's file queue while the broker is down;
// both clients reconnect on their own, the subscriber to the session the broker kept.
func v5Restart() {
	if *store == "" {
		fail("-store is required")
	}
	c := newCollector()
	subState, pubState := newDownUp(), newDownUp()
	acks := []bool{}
	var acksMu sync.Mutex
	sub, _ := v5connect(v5opts{id: "sub", cleanStart: true, expiry: 300, c: c, state: subState,
		onUp: func(_ *autopaho.ConnectionManager, ack *paho.Connack) {
			acksMu.Lock()
			acks = append(acks, ack.SessionPresent)
			acksMu.Unlock()
		}})
	v5subscribe(sub, map[string]byte{"f1": 1, "f2": 2})
	pub, _ := v5connect(v5opts{id: "pub", cleanStart: true, expiry: 300, state: pubState,
		queueDir: *store})
	emit("ready", nil)
	if !subState.waitFor(1, 1) || !pubState.waitFor(1, 1) {
		fail("the broker did not go away")
	}
	emit("lost", nil)
	for _, p := range []struct {
		name string
		qos  byte
	}{{"f1", 1}, {"f2", 2}} {
		for i := 0; i < *count; i++ {
			err := pub.PublishViaQueue(ctx(), &autopaho.QueuePublish{Publish: &paho.Publish{
				Topic: topic(p.name), QoS: p.qos, Payload: []byte(strconv.Itoa(i))}})
			if err != nil {
				fail("queue: %v", err)
			}
		}
	}
	emit("stored", map[string]any{"files": countFiles(*store)})
	ok := c.wait(map[string]int{topic("f1"): *count, topic("f2"): *count})
	c.report(topic("f1"), topic("f2"))
	acksMu.Lock()
	emit("connections", map[string]any{"session_present": acks})
	acksMu.Unlock()
	v5disconnect(pub)
	v5disconnect(sub)
	done(ok)
}

// v5Will: no will after DISCONNECT 0x00; a will after DISCONNECT 0x04 and after a cut
// connection, with its properties; a will with a delay is sent once the delay has passed, and
// not at all when the session is resumed before that.
func v5Will() {
	c := newCollector()
	watcher, _ := v5connect(v5opts{id: "watch", cleanStart: true, c: c})
	v5subscribe(watcher, map[string]byte{"will": 2})
	will := func(payload string) *paho.WillMessage {
		return &paho.WillMessage{Topic: topic("will"), QoS: 1, Payload: []byte(payload)}
	}
	proper, _ := v5connect(v5opts{id: "proper", cleanStart: true, will: will("proper")})
	v5disconnect(proper)
	withWill, _ := v5connect(v5opts{id: "with-will", cleanStart: true, will: will("0x04"),
		disconnect: 0x04})
	v5disconnect(withWill)

	k := newCutter()
	// Done() alone never closes after a lost connection that is not retried (autopaho's queue
	// goroutine still waits for a connection): wait for the drop, then stop the manager.
	ended := func(cm *autopaho.ConnectionManager, down chan struct{}) {
		select {
		case <-down:
		case <-time.After(*timeout):
			fail("the cut connection is still up")
		}
		v5disconnect(cm)
	}
	format, expiry := byte(1), uint32(600)
	brokenDown, resumedDown, lateDown := make(chan struct{}, 1), make(chan struct{}, 1),
		make(chan struct{}, 1)
	broken, _ := v5connect(v5opts{addr: k.addr(), id: "broken", cleanStart: true,
		down: brokenDown, will: will("broken"), willProps: &paho.WillProperties{
			PayloadFormat: &format, MessageExpiry: &expiry, ContentType: "text/plain",
			User: paho.UserProperties{{Key: "site", Value: "outpost"}}}})
	k.cut()
	ended(broken, brokenDown)
	ok := c.wait(map[string]int{topic("will"): 2})

	// Both wills are delayed by the same interval and "resumed" is cut first: had the broker
	// sent its will despite the resumed session, it would come before "late".
	delay := uint32(2)
	delayed := &paho.WillProperties{WillDelayInterval: &delay}
	resumed, _ := v5connect(v5opts{addr: k.addr(), id: "resumed", cleanStart: true,
		expiry: 300, down: resumedDown, will: will("resumed"), willProps: delayed})
	late, _ := v5connect(v5opts{addr: k.addr(), id: "late", cleanStart: true, expiry: 300,
		down: lateDown,
		will: will("late"), willProps: delayed})
	k.cut()
	cutAt := time.Now()
	ended(resumed, resumedDown)
	ended(late, lateDown)
	again, ack := v5connect(v5opts{id: "resumed", cleanStart: false, expiry: 300})
	emit("connack", map[string]any{"connection": "resumed", "session_present": ack.SessionPresent})
	ok = c.wait(map[string]int{topic("will"): 3}) && ok
	if at := c.arrival(topic("will"), "late"); !at.IsZero() {
		emit("delayed", map[string]any{"payload": "late", "after_ms": at.Sub(cutAt).Milliseconds(),
			"delay_ms": delay * 1000})
	}
	if _, err := watcher.Publish(ctx(), &paho.Publish{Topic: topic("will"), QoS: 1,
		Payload: []byte("marker")}); err != nil {
		fail("marker: %v", err)
	}
	ok = c.wait(map[string]int{topic("will"): 4}) && ok
	c.report(topic("will"))
	v5disconnect(again)
	v5disconnect(watcher)
	done(ok)
}

func done(ok bool) {
	emit("done", map[string]any{"complete": ok})
	if !ok {
		os.Exit(1)
	}
}

func main() {
	flag.Parse()
	if os.Getenv("GOCLIENTS_DEBUG") != "" { // what the client did, when a scenario fails
		mqtt.DEBUG = log.New(os.Stderr, "DEBUG ", log.Lmicroseconds)
		mqtt.ERROR = log.New(os.Stderr, "ERROR ", log.Lmicroseconds)
	}
	scenarios := map[string]func(){
		"v3-qos": v3QoS, "v3-session": v3Session, "v3-filestore": v3FileStore,
		"v3-reconnect": v3Reconnect, "v3-will": v3Will,
		"v5-qos": v5QoS, "v5-session": v5Session, "v5-restart": v5Restart, "v5-will": v5Will,
	}
	if flag.NArg() != 1 || scenarios[flag.Arg(0)] == nil {
		fmt.Fprintln(os.Stderr, "usage: goclients [flags] SCENARIO; scenarios:")
		for name := range scenarios {
			fmt.Fprintln(os.Stderr, "  "+name)
		}
		os.Exit(2)
	}
	scenarios[flag.Arg(0)]()
}
