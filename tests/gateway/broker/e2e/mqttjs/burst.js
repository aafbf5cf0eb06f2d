// A burst from MQTT.js (the client inside Node-RED), as Node-RED's mqtt-out node sends one:
// `count` publishes written in a loop without awaiting any acknowledgement, MQTT 5.
//
//   node burst.js URL COUNT QOS TOPIC
//
// A second MQTT.js client subscribes to TOPIC (QoS 1) first and counts what it receives. The
// script ends when every publish is acknowledged and delivered, or when the publisher is cut
// off (a DISCONNECT from the broker, a closed socket), and prints one JSON line:
//   {"acked": n, "delivered": n, "disconnect": reasonCode|null, "errors": [...]}
// It never times out by itself: the test that runs it decides how long to wait.
"use strict";

const mqtt = require("mqtt");

const [url, countText, qosText, topic] = process.argv.slice(2);
const count = Number(countText);
const qos = Number(qosText);
const options = { protocolVersion: 5, reconnectPeriod: 0, clean: true };

const result = { acked: 0, delivered: 0, disconnect: null, errors: [] };
let finished = false;

function finish() {
  if (finished) return;
  finished = true;
  process.stdout.write(JSON.stringify(result) + "\n");
  subscriber.end(true);
  if (publisher) publisher.end(true);
}

function check() {
  if (result.acked === count && result.delivered === count) finish();
}

let publisher = null;
const subscriber = mqtt.connect(url, { ...options, clientId: "mqttjs-burst-sub" });
subscriber.on("error", (err) => { result.errors.push("subscriber: " + err.message); finish(); });
subscriber.on("message", () => { result.delivered += 1; check(); });
subscriber.on("connect", () => {
  subscriber.subscribe(topic, { qos: 1 }, (err) => {
    if (err) { result.errors.push("subscribe: " + err.message); finish(); return; }
    publisher = mqtt.connect(url, { ...options, clientId: "mqttjs-burst-pub" });
    publisher.on("disconnect", (packet) => { result.disconnect = packet.reasonCode; finish(); });
    publisher.on("error", (err) => { result.errors.push("publisher: " + err.message); finish(); });
    publisher.on("close", () => { if (result.acked < count) finish(); });
    publisher.on("connect", () => {
      for (let i = 0; i < count; i += 1) {
        publisher.publish(topic, "m" + i, { qos }, (err) => {
          if (err) { result.errors.push("publish: " + err.message); return; }
          result.acked += 1;
          check();
        });
      }
    });
  });
});
