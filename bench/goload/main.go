// Command goload is the Go load generator of bench/: the six scenarios of bench/loadgen.py
// (fan-in, fan-out, qos1, latency, idle, retained) with the same client ids, topics, QoS,
// window and figures, driven by the Eclipse Paho MQTT 3.1.1 client (paho.mqtt.golang).
//
//	goload SCENARIO -port 1883 -broker-pid PID [-warmup 2 -duration 10 ...]
//
// # How this works
//
// One process runs every client of a scenario as paho clients (clean session, keepalive 600,
// 64-byte payloads); bench.compare starts it pinned to the load CPU, so the Go runtime runs on
// that one core (GOMAXPROCS follows the affinity). Each client connects through bufferedConn
// (conn.go): paho does all the MQTT, the connection only batches its system calls.
//
// The throughput scenarios (throughput.go) work like bench.loadgen's: subscribers connect and
// subscribe first, then the publishers connect; then go, a warm-up, and a fixed measured
// window at whose start and end the counters, this process's CPU time (getrusage), the
// broker's (/proc/PID/stat) and every CPU's busy time (/proc/stat) are sampled. The figures
// are differences over the window. Publishers are closed-loop: they pause while more than
// -window messages per subscriber are sent but not yet delivered (shared atomic counters,
// checked before every PUBLISH; a paused publisher sleeps 0.2 ms), so the broker is measured
// at the rate it sustains without dropping. QoS 0 publishers publish back to back;
// a QoS 1 publisher keeps -inflight (32) PUBLISHes outstanding, publishing the next when the
// oldest is acknowledged. Subscribers count in paho's message handler (in order, on paho's
// router goroutine) and count as errors any message with another QoS, the retain or DUP flag,
// or another payload size. After the window the publishers stop (a QoS 0 publisher waits
// until its last PUBLISH is written, a QoS 1 one for every PUBACK, then DISCONNECT), the
// subscribers drain until nothing arrives for 0.5 s, and lost = sent x
// subscribers - delivered is exact.
//
// latency: a QoS 1 publisher on an absolute schedule; the payload starts with the send time
// (ns on Go's monotonic clock, CLOCK_MONOTONIC underneath; publisher and subscriber share the
// process) and a sequence number; the subscriber takes the time in its handler. idle: N
// connections, at most -idle-concurrency handshakes at a time, broker VmRSS before and after.
// retained: N retained QoS 1 PUBLISHes, -retained-inflight outstanding, until every PUBACK;
// then a `#` subscriber at QoS 0 is timed from SUBSCRIBE until it holds every bench/ret/ topic
// with the retain flag.
//
// Output: one JSON object on stdout, {"options": {...}, "result": {...}}, whose result has the
// keys bench.loadgen returns for the scenario. GOLOAD_CPUPROFILE=FILE writes a CPU profile of
// the run (go tool pprof). Every wait is bounded; a failure (refused CONNECT, lost
// connection, timeout) prints a message on stderr and exits with status 1.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

const (
	payloadSize  = 64
	setupTimeout = 20 * time.Second
)

// options mirrors bench.loadgen.LoadOptions (same names in the JSON).
type options struct {
	host             string
	port             int
	brokerPID        int
	warmup           float64
	duration         float64
	latencyDuration  float64
	latencyRate      float64
	window           int
	inflight         int
	idleConnections  int
	idleConcurrency  int
	idleSettle       float64
	retained         int
	retainedInflight int
	readBuffer       int
	lowat            int
}

func (o *options) json() map[string]any {
	return map[string]any{
		"generator": "go", "warmup": o.warmup, "duration": o.duration,
		"latency_duration": o.latencyDuration, "latency_rate": o.latencyRate,
		"window": o.window, "inflight": o.inflight, "idle_connections": o.idleConnections,
		"idle_concurrency": o.idleConcurrency, "idle_settle": o.idleSettle,
		"retained": o.retained, "retained_inflight": o.retainedInflight,
		"read_buffer": o.readBuffer, "lowat": o.lowat, "cpus_allowed": cpusAllowed(),
	}
}

// loadError is a scenario that could not run: the message goes to stderr, the exit status is 1.
type loadError struct{ msg string }

func (e *loadError) Error() string { return e.msg }

func fail(format string, args ...any) {
	panic(&loadError{fmt.Sprintf(format, args...)})
}

// lost records the first connection a scenario lost; checked at the end of the window.
var (
	lostMu  sync.Mutex
	lostErr error
)

func connectionLost(id string) mqtt.ConnectionLostHandler {
	return func(_ mqtt.Client, err error) {
		lostMu.Lock()
		defer lostMu.Unlock()
		if lostErr == nil {
			lostErr = fmt.Errorf("%s: connection lost: %w", id, err)
		}
	}
}

func checkLost(what string) {
	lostMu.Lock()
	defer lostMu.Unlock()
	if lostErr != nil {
		fail("%s: %v", what, lostErr)
	}
}

// connect opens one clean-session MQTT 3.1.1 client and checks its CONNACK: accepted, no
// session present (what bench.workers.open_client demands: exactly 20 02 00 00).
func connect(o *options, id string, readBuffer int) mqtt.Client {
	opts := mqtt.NewClientOptions().
		AddBroker(fmt.Sprintf("tcp://%s:%d", o.host, o.port)).
		SetClientID(id).
		SetProtocolVersion(4).
		SetCleanSession(true).
		SetKeepAlive(600 * time.Second).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(setupTimeout).
		SetOrderMatters(true).
		SetConnectionLostHandler(connectionLost(id)).
		SetCustomOpenConnectionFn(dialer(readBuffer))
	c := mqtt.NewClient(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(setupTimeout) {
		fail("%s: no CONNACK within %s", id, setupTimeout)
	}
	if err := tok.Error(); err != nil {
		fail("%s: %v", id, err)
	}
	ct := tok.(*mqtt.ConnectToken)
	if ct.ReturnCode() != 0 || ct.SessionPresent() {
		c.Disconnect(0)
		fail("%s: CONNACK code %d, session present %v is not an accepting one", id,
			ct.ReturnCode(), ct.SessionPresent())
	}
	return c
}

// subscribe sends one SUBSCRIBE and checks that its SUBACK grants exactly qos.
func subscribe(c mqtt.Client, filter string, qos byte, handler mqtt.MessageHandler) {
	tok := c.Subscribe(filter, qos, handler)
	if !tok.WaitTimeout(setupTimeout) {
		fail("no SUBACK for %q within %s", filter, setupTimeout)
	}
	if err := tok.Error(); err != nil {
		fail("SUBSCRIBE %q: %v", filter, err)
	}
	if granted := tok.(*mqtt.SubscribeToken).Result()[filter]; granted != qos {
		fail("SUBACK grants QoS %d, not %d, on %q", granted, qos, filter)
	}
}

// waitToken waits for a token for at most d; a timeout or an error fails the scenario.
func waitToken(t mqtt.Token, d time.Duration, what string) {
	if !t.WaitTimeout(d) {
		fail("%s: no answer within %s", what, d)
	}
	if err := t.Error(); err != nil {
		fail("%s: %v", what, err)
	}
}

// ---------------------------------------------------------------------------------------------
// /proc and getrusage readings (bench/procstat.py's)

// clkTck is USER_HZ, the unit of /proc/PID/stat times: 100 on every Linux architecture Go
// supports (sysconf(_SC_CLK_TCK) would need cgo).
const clkTck = 100

// brokerCPU is the user + system CPU seconds of a process (0 if it is gone).
func brokerCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	text := string(data)
	fields := strings.Fields(text[strings.LastIndexByte(text, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / clkTck
}

// selfCPU is this process's user + system CPU seconds, every thread.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func rssKiB(pid int) (int64, bool) {
	if pid <= 0 {
		return 0, false
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if rest, ok := strings.CutPrefix(scanner.Text(), "VmRSS:"); ok {
			fields := strings.Fields(rest)
			if len(fields) > 0 {
				v, err := strconv.ParseInt(fields[0], 10, 64)
				return v, err == nil
			}
		}
	}
	return 0, false
}

func cpusAllowed() string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// cpuTimes is busy and total jiffies per CPU from /proc/stat.
type cpuTimes struct{ busy, total map[int]int64 }

func readCPUTimes() cpuTimes {
	t := cpuTimes{busy: map[int]int64{}, total: map[int]int64{}}
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		fields := strings.Fields(string(line))
		if len(fields) < 5 || !strings.HasPrefix(fields[0], "cpu") || fields[0] == "cpu" {
			continue
		}
		cpu, err := strconv.Atoi(fields[0][3:])
		if err != nil {
			continue
		}
		var values []int64
		for _, f := range fields[1:] {
			v, _ := strconv.ParseInt(f, 10, 64)
			values = append(values, v)
		}
		idle := values[3]
		if len(values) > 4 {
			idle += values[4]
		}
		var all int64
		for i := 0; i < 8 && i < len(values); i++ {
			all += values[i] // guest time is already counted in user time
		}
		t.busy[cpu] = all - idle
		t.total[cpu] = all
	}
	return t
}

func (t cpuTimes) busyPercentSince(earlier cpuTimes) map[string]float64 {
	out := map[string]float64{}
	for cpu, total := range t.total {
		span := total - earlier.total[cpu]
		if span > 0 {
			out[strconv.Itoa(cpu)] = round(100*float64(t.busy[cpu]-earlier.busy[cpu])/float64(span), 1)
		}
	}
	return out
}

func round(v float64, digits int) float64 {
	scale := math.Pow(10, float64(digits))
	return math.Round(v*scale) / scale
}

// sample is the counters and CPU times at one instant (bench.loadgen.Sample).
type sample struct {
	at        time.Time
	sent      int64
	delivered int64
	loadCPU   float64
	brokerCPU float64
	cpus      cpuTimes
}

func takeSample(o *options, sent, delivered func() int64) sample {
	return sample{
		at: time.Now(), sent: sent(), delivered: delivered(), loadCPU: selfCPU(),
		brokerCPU: brokerCPU(o.brokerPID), cpus: readCPUTimes(),
	}
}

// cpuReport is bench.loadgen._cpu_report: CPU use over the window in percent of one core.
func cpuReport(first, last sample) map[string]any {
	span := last.at.Sub(first.at).Seconds()
	load := round(100*(last.loadCPU-first.loadCPU)/span, 1)
	return map[string]any{
		"loadgen_cpu_pct":         load,
		"loadgen_cpu_by_role_pct": map[string]float64{"goload": load},
		"broker_cpu_pct":          round(100*(last.brokerCPU-first.brokerCPU)/span, 1),
		"cpu_busy_pct":            last.cpus.busyPercentSince(first.cpus),
	}
}

// ---------------------------------------------------------------------------------------------

var scenarios = map[string]func(*options) map[string]any{
	"fan-in":   func(o *options) map[string]any { return runThroughput(fanIn, o) },
	"fan-out":  func(o *options) map[string]any { return runThroughput(fanOut, o) },
	"qos1":     func(o *options) map[string]any { return runThroughput(qos1, o) },
	"latency":  runLatency,
	"idle":     runIdle,
	"retained": runRetained,
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) (status int) {
	usage := "usage: goload {fan-in|fan-out|qos1|latency|idle|retained} [flags]"
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	name := args[0]
	scenario, ok := scenarios[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown scenario %q\n%s\n", name, usage)
		return 2
	}
	o := &options{}
	fs := flag.NewFlagSet("goload", flag.ContinueOnError)
	fs.StringVar(&o.host, "host", "127.0.0.1", "broker address")
	fs.IntVar(&o.port, "port", 1883, "broker port")
	fs.IntVar(&o.brokerPID, "broker-pid", 0, "sample this process's CPU and RSS")
	fs.Float64Var(&o.warmup, "warmup", 2, "seconds before the measured window")
	fs.Float64Var(&o.duration, "duration", 10, "measured window, seconds")
	fs.Float64Var(&o.latencyDuration, "latency-duration", 10, "latency window, seconds")
	fs.Float64Var(&o.latencyRate, "latency-rate", 1000, "latency publish rate, msg/s")
	fs.IntVar(&o.window, "window", 1000, "messages per subscriber sent but not yet delivered")
	fs.IntVar(&o.inflight, "inflight", 32, "QoS 1 PUBLISHes in flight per publisher")
	fs.IntVar(&o.idleConnections, "idle-connections", 5000, "idle connections")
	fs.IntVar(&o.idleConcurrency, "idle-concurrency", 200, "idle handshakes at a time")
	fs.Float64Var(&o.idleSettle, "idle-settle", 1, "seconds before reading the broker's RSS")
	fs.IntVar(&o.retained, "retained", 50000, "retained messages")
	fs.IntVar(&o.retainedInflight, "retained-inflight", 1000, "retained PUBLISHes in flight")
	fs.IntVar(&o.readBuffer, "read-buffer", 64<<10, "read buffer per throughput connection, bytes")
	fs.IntVar(&o.lowat, "lowat", 32<<10, "SO_RCVLOWAT of a QoS 0 subscriber at most, bytes")
	fs.IntVar(&yields, "yields", yields, "times a connection's flusher yields before it writes")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	mqtt.ERROR = noLog{}
	if path := os.Getenv("GOLOAD_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer pprof.StopCPUProfile()
			}
		}
	}
	defer func() {
		if r := recover(); r != nil {
			var le *loadError
			if err, ok := r.(error); ok && errors.As(err, &le) {
				fmt.Fprintf(os.Stderr, "goload %s: %s\n", name, le.msg)
				status = 1
				return
			}
			panic(r)
		}
	}()
	result := scenario(o)
	out, err := json.Marshal(map[string]any{"options": o.json(), "result": result})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(string(out))
	return 0
}

// noLog silences paho's error log (a lost connection is reported through checkLost).
type noLog struct{}

func (noLog) Println(...any)        {}
func (noLog) Printf(string, ...any) {}
