// BACnet/IP devices for the bridge's BACnet tests and benchmark, written with @bacnet-js/client
// (a TypeScript BACnet stack: another implementation than the bridge's).
//
// Usage: node device.js HOST PORT [COUNT] [HZ] [MODE]
//   HOST:PORT  the unicast address (a 127.0.0.x address; BACnet/IP's port is 47808)
//   COUNT      analog-values 1000 .. 1000 + COUNT - 1 on device 1001 changing at HZ (benchmark)
//   MODE       "normal" (default) or "garbage": every datagram is answered with junk
// Who-Is broadcasts are heard on 127.255.255.255:PORT (a second socket, shared with the other
// test devices on that port through SO_REUSEADDR). Prints "READY HOST:PORT"; SIGTERM stops it.
//
// One process is three devices at one IP address, as behind a BACnet router:
//   device 1001: on the IP network itself (no network number)
//   devices 2001 (MAC 01) and 2002 (MAC 02): on network 5 behind the router at HOST:PORT; this
//   script is that router: it takes requests addressed to DNET 5 / DADR, strips the
//   destination and hands them to the device; its answers get SNET 5 / SADR (the device's
//   MAC) before they go back. Device 2002 does not support COV (SubscribeCOV is refused).
// Objects of every device (instance 1 unless said):
//   analog-input 1 "temperature" 21.5 degC; analog-input 2 "faulty" status-flags fault;
//   analog-input 3 "oos" out of service; analog-output 1 "valve" % (commandable, relinquish
//   default 0); analog-value 1 "setpoint" degC (commandable, relinquish default 20);
//   analog-value 2 "counter" +1 every 100 ms; binary-input 1 "door" active; binary-output 1
//   "pump" (commandable, inactive); binary-value 1 "enable" (commandable, active);
//   multi-state-input 1 "mode" 2 of 3; multi-state-output 1 "fan" (commandable, 1 of 4);
//   multi-state-value 1 "season" (commandable, 1 of 4).
// Writes go into the priority array at the request's priority (16 when absent); a null
// relinquishes that slot; present-value is the highest priority set, else the relinquish
// default. Out-of-range and wrongly typed values are refused with BACnet errors.
"use strict";

const dgram = require("dgram");
const bacnet = require("@bacnet-js/client");
const BACnetClient = bacnet.default;
const { ObjectType: T, PropertyIdentifier: P, ApplicationTag: A, ErrorClass: EC,
    ErrorCode: E, ConfirmedServiceChoice: S } = bacnet;

const host = process.argv[2];
const port = Number(process.argv[3]);
const count = Number(process.argv[4] || 0);
const hz = Number(process.argv[5] || 10);
const mode = process.argv[6] || "normal";
const ARRAY_ALL = 0xFFFFFFFF;
const NETWORK = 5;

const unicast = dgram.createSocket({ type: "udp4", reuseAddr: true });
const broadcast = dgram.createSocket({ type: "udp4", reuseAddr: true });

if (mode === "garbage") {
    let n = 0;
    const junk = (msg, rinfo) => {
        n += 1;  // alternately: not BACnet at all, and a BVLC header that lies about the length
        const reply = n % 2 ? Buffer.from("garbage! " + n) : Buffer.from([0x81, 0x0a, 0x00, 0x40, 1, 0, 0x30]);
        unicast.send(reply, rinfo.port, rinfo.address);
    };
    unicast.on("message", junk);
    broadcast.on("message", junk);
    unicast.bind(port, host, () => broadcast.bind(port, "127.255.255.255",
        () => console.log(`READY ${host}:${port}`)));
    return;
}

function flags(fault, oos) { return { type: A.BIT_STRING, value: { bitsUsed: 4, value: [(fault ? 2 : 0) | (oos ? 8 : 0)] } }; }

function makeObjects(id) {
    const o = {};
    const add = (type, instance, name, pv, extra = {}) => {
        o[`${type}:${instance}`] = { type, instance, name, pv, fault: false, oos: false, ...extra };
    };
    add(T.ANALOG_INPUT, 1, "temperature", 21.5, { units: 62 });
    add(T.ANALOG_INPUT, 2, "faulty", 0, { units: 62, fault: true });
    add(T.ANALOG_INPUT, 3, "oos", 5.5, { units: 98, oos: true });
    add(T.ANALOG_OUTPUT, 1, "valve", 0, { units: 98, commandable: true, relinquish: 0, min: 0, max: 100 });
    add(T.ANALOG_VALUE, 1, "setpoint", 20, { units: 62, commandable: true, relinquish: 20 });
    add(T.ANALOG_VALUE, 2, "counter", 0, { units: 95 });
    add(T.BINARY_INPUT, 1, "door", 1);
    add(T.BINARY_OUTPUT, 1, "pump", 0, { commandable: true, relinquish: 0 });
    add(T.BINARY_VALUE, 1, "enable", 1, { commandable: true, relinquish: 1 });
    add(T.MULTI_STATE_INPUT, 1, "mode", 2, { states: 3 });
    add(T.MULTI_STATE_OUTPUT, 1, "fan", 1, { commandable: true, relinquish: 1, states: 4 });
    add(T.MULTI_STATE_VALUE, 1, "season", 1, { commandable: true, relinquish: 1, states: 4 });
    if (id === 1001) {
        for (let i = 0; i < count; i++) add(T.ANALOG_VALUE, 1000 + i, `bench${i}`, i + 0.5, { units: 95 });
    }
    for (const obj of Object.values(o)) if (obj.commandable) obj.priority = new Array(16).fill(null);
    return o;
}

function kind(type) {
    if ([T.ANALOG_INPUT, T.ANALOG_OUTPUT, T.ANALOG_VALUE].includes(type)) return "analog";
    if ([T.BINARY_INPUT, T.BINARY_OUTPUT, T.BINARY_VALUE].includes(type)) return "binary";
    return "multistate";
}

function pvData(obj) {
    const k = kind(obj.type);
    if (k === "analog") return { type: A.REAL, value: obj.pv };
    if (k === "binary") return { type: A.ENUMERATED, value: obj.pv };
    return { type: A.UNSIGNED_INTEGER, value: obj.pv };
}

class Device {
    constructor(id, mac, cov) {
        this.id = id; this.mac = mac; this.cov = cov;
        this.objects = makeObjects(id);
        this.subscriptions = new Map();  // key -> {receiver, process, object, expires}
        this.client = new BACnetClient({ transport: new Link(this), apduTimeout: 2000 });
        this.serve();
    }

    property(obj, id) {
        switch (id) {
            case P.PRESENT_VALUE: return [pvData(obj)];
            case P.STATUS_FLAGS: return [flags(obj.fault, obj.oos)];
            case P.OBJECT_NAME: return [{ type: A.CHARACTER_STRING, value: obj.name }];
            case P.OBJECT_IDENTIFIER: return [{ type: A.OBJECTIDENTIFIER, value: { type: obj.type, instance: obj.instance } }];
            case P.OBJECT_TYPE: return [{ type: A.ENUMERATED, value: obj.type }];
            case P.OUT_OF_SERVICE: return [{ type: A.BOOLEAN, value: obj.oos }];
            case P.UNITS: return obj.units === undefined ? null : [{ type: A.ENUMERATED, value: obj.units }];
            case P.NUMBER_OF_STATES: return obj.states ? [{ type: A.UNSIGNED_INTEGER, value: obj.states }] : null;
            case P.RELINQUISH_DEFAULT: return obj.commandable ? [{ ...pvData({ ...obj, pv: obj.relinquish }) }] : null;
            case P.PRIORITY_ARRAY: return obj.commandable ? obj.priority.map((v) => v === null
                ? { type: A.NULL, value: null } : pvData({ ...obj, pv: v })) : null;
            default: return null;
        }
    }

    deviceProperty(id) {
        switch (id) {
            case P.OBJECT_NAME: return [{ type: A.CHARACTER_STRING, value: `test device ${this.id}` }];
            case P.OBJECT_IDENTIFIER: return [{ type: A.OBJECTIDENTIFIER, value: { type: T.DEVICE, instance: this.id } }];
            case P.VENDOR_NAME: return [{ type: A.CHARACTER_STRING, value: "bacnet-js test" }];
            case P.MODEL_NAME: return [{ type: A.CHARACTER_STRING, value: "device.js" }];
            case P.MAX_APDU_LENGTH_ACCEPTED: return [{ type: A.UNSIGNED_INTEGER, value: 1476 }];
            case P.SEGMENTATION_SUPPORTED: return [{ type: A.ENUMERATED, value: 3 }];  // no segmentation
            case P.SYSTEM_STATUS: return [{ type: A.ENUMERATED, value: 0 }];
            case P.OBJECT_LIST: return [{ type: A.OBJECTIDENTIFIER, value: { type: T.DEVICE, instance: this.id } },
                ...Object.values(this.objects).map((o) => ({ type: A.OBJECTIDENTIFIER, value: { type: o.type, instance: o.instance } }))];
            default: return null;
        }
    }

    read(objectId, id) {  // [values] or {errorClass, errorCode}
        if (objectId.type === T.DEVICE && (objectId.instance === this.id || objectId.instance === 0x3FFFFF)) {
            return this.deviceProperty(id) || { errorClass: EC.PROPERTY, errorCode: E.UNKNOWN_PROPERTY };
        }
        const obj = this.objects[`${objectId.type}:${objectId.instance}`];
        if (!obj) return { errorClass: EC.OBJECT, errorCode: E.UNKNOWN_OBJECT };
        return this.property(obj, id) || { errorClass: EC.PROPERTY, errorCode: E.UNKNOWN_PROPERTY };
    }

    serve() {
        const c = this.client;
        c.on("whoIs", (msg) => {
            const { lowLimit, highLimit } = msg.payload || {};
            if (lowLimit !== undefined && (this.id < lowLimit || this.id > highLimit)) return;
            c.iAmResponse(msg.header.sender, this.id, 3, 999);
        });
        c.on("readProperty", (msg) => {
            const { objectId, property } = msg.payload;
            const got = this.read(objectId, property.id);
            if (!Array.isArray(got)) return c.errorResponse(msg.header.sender, S.READ_PROPERTY, msg.invokeId, got.errorClass, got.errorCode);
            c.readPropertyResponse(msg.header.sender, msg.invokeId, objectId, property, got);
        });
        c.on("readPropertyMultiple", (msg) => {
            const results = msg.payload.properties.map((spec) => ({
                objectId: spec.objectId,
                values: spec.properties.map((prop) => {
                    const got = this.read(spec.objectId, prop.id);
                    return { property: { id: prop.id, index: prop.index ?? ARRAY_ALL },
                        value: Array.isArray(got) ? got : [{ value: { type: "BacnetError", ...got } }] };
                }),
            }));
            c.readPropertyMultipleResponse(msg.header.sender, msg.invokeId, results);
        });
        c.on("writeProperty", (msg) => {
            const refuse = (errorClass, errorCode) => c.errorResponse(msg.header.sender, S.WRITE_PROPERTY, msg.invokeId, errorClass, errorCode);
            const { objectId, value } = msg.payload;
            const obj = this.objects[`${objectId.type}:${objectId.instance}`];
            if (!obj) return refuse(EC.OBJECT, E.UNKNOWN_OBJECT);
            if (value.property.id !== P.PRESENT_VALUE) return refuse(EC.PROPERTY, E.WRITE_ACCESS_DENIED);
            if (!obj.commandable) return refuse(EC.PROPERTY, E.WRITE_ACCESS_DENIED);
            const written = value.value[0];
            const priority = value.priority || 16;
            if (priority < 1 || priority > 16 || priority === 6) return refuse(EC.PROPERTY, E.WRITE_ACCESS_DENIED);
            if (written.type === A.NULL) {
                obj.priority[priority - 1] = null;
            } else {
                const k = kind(obj.type);
                const expected = k === "analog" ? A.REAL : k === "binary" ? A.ENUMERATED : A.UNSIGNED_INTEGER;
                if (written.type !== expected) return refuse(EC.PROPERTY, E.INVALID_DATA_TYPE);
                const v = written.value;
                if ((k === "binary" && v > 1) || (k === "multistate" && (v < 1 || v > obj.states))
                    || (obj.min !== undefined && (v < obj.min || v > obj.max))) return refuse(EC.PROPERTY, E.VALUE_OUT_OF_RANGE);
                obj.priority[priority - 1] = v;
            }
            const active = obj.priority.find((v) => v !== null);
            c.simpleAckResponse(msg.header.sender, S.WRITE_PROPERTY, msg.invokeId);
            this.set(obj, active === undefined ? obj.relinquish : active);
        });
        c.on("subscribeCov", (msg) => {
            if (!this.cov) return c.errorResponse(msg.header.sender, S.SUBSCRIBE_COV, msg.invokeId, EC.SERVICES, E.OPTIONAL_FUNCTIONALITY_NOT_SUPPORTED);
            const p = msg.payload;
            const obj = this.objects[`${p.monitoredObjectId.type}:${p.monitoredObjectId.instance}`];
            if (!obj) return c.errorResponse(msg.header.sender, S.SUBSCRIBE_COV, msg.invokeId, EC.OBJECT, E.UNKNOWN_OBJECT);
            const key = `${msg.header.sender.address}/${p.subscriberProcessId}/${obj.type}:${obj.instance}`;
            if (p.cancellationRequest) { this.subscriptions.delete(key); return c.simpleAckResponse(msg.header.sender, S.SUBSCRIBE_COV, msg.invokeId); }
            const sub = { receiver: { address: msg.header.sender.address }, process: p.subscriberProcessId, obj,
                lifetime: p.lifetime || 0, expires: p.lifetime ? Date.now() + p.lifetime * 1000 : Infinity };
            this.subscriptions.set(key, sub);
            c.simpleAckResponse(msg.header.sender, S.SUBSCRIBE_COV, msg.invokeId);
            this.notify(sub);  // the initial notification the standard asks for
        });
    }

    notify(sub) {
        const remaining = sub.lifetime ? Math.max(0, Math.round((sub.expires - Date.now()) / 1000)) : 0;
        // CovNotify.encode writes the array index only when it is *not* given and the priority
        // only when it is: index 0 and no priority leave both out, as they should be.
        this.client.unconfirmedCOVNotification(sub.receiver, sub.process, this.id,
            { type: sub.obj.type, instance: sub.obj.instance }, remaining, [
                { property: { id: P.PRESENT_VALUE, index: 0 }, value: [pvData(sub.obj)] },
                { property: { id: P.STATUS_FLAGS, index: 0 }, value: [flags(sub.obj.fault, sub.obj.oos)] }]);
    }

    set(obj, pv) {
        if (obj.pv === pv) return;
        obj.pv = pv;
        const now = Date.now();
        for (const [key, sub] of this.subscriptions) {
            if (sub.expires < now) { this.subscriptions.delete(key); continue; }
            if (sub.obj === obj) this.notify(sub);
        }
    }
}

// The transport of one device: what it sends goes out of the shared socket, through the router
// part for a routed device.
class Link extends require("events").EventEmitter {
    constructor(device) { super(); this.device = device; }
    open() {}
    close() {}
    getBroadcastAddress() { return `127.255.255.255:${port}`; }
    getMaxPayload() { return 1482; }
    send(buffer, offset, receiver) {
        let out = Buffer.from(buffer.subarray(0, offset));
        const mac = this.device.mac;
        if (mac !== null) {  // add SNET / SADR after the NPDU's control octet (no DNET: unicast back)
            const snet = Buffer.from([NETWORK >> 8, NETWORK & 0xFF, 1, mac]);
            out = Buffer.concat([out.subarray(0, 4), Buffer.from([1, out[5] | 0x08]), snet, out.subarray(6)]);
            out.writeUInt16BE(out.length, 2);
        }
        const [address, p] = (receiver || `127.255.255.255:${port}`).split(":");
        unicast.send(out, Number(p || 47808), address);
    }
}

const direct = new Device(1001, null, true);
const routed = { 1: new Device(2001, 1, true), 2: new Device(2002, 2, false) };

// The router: a request with DNET 5 goes to the device with that DADR (0xFFFF / a broadcast
// DADR: to every device), its destination stripped; one without DNET is for device 1001.
function receive(msg, rinfo) {
    if (msg.length < 6 || msg[0] !== 0x81 || msg[4] !== 1) return;
    const sender = `${rinfo.address}:${rinfo.port}`;
    const control = msg[5];
    if (control & 0x80) return;  // network layer messages: none needed by the tests
    if (!(control & 0x20)) return direct.client._transport.emit("message", msg, sender);
    const dnet = msg.readUInt16BE(6), dlen = msg[8], dadr = msg.subarray(9, 9 + dlen);
    let at = 9 + dlen;
    let source = Buffer.alloc(0);
    if (control & 0x08) { const slen = msg[at + 2]; source = msg.subarray(at, at + 3 + slen); at += 3 + slen; }
    at += 1;  // hop count
    const local = Buffer.concat([msg.subarray(0, 4), Buffer.from([1, control & ~0x20]), source, msg.subarray(at)]);
    local.writeUInt16BE(local.length, 2);
    if (dnet === 0xFFFF) {
        direct.client._transport.emit("message", local, sender);
        for (const d of Object.values(routed)) d.client._transport.emit("message", local, sender);
    } else if (dnet === NETWORK) {
        const targets = dlen === 0 ? Object.values(routed) : [routed[dadr[0]]].filter(Boolean);
        for (const d of targets) d.client._transport.emit("message", local, sender);
    }
}

unicast.on("message", receive);
broadcast.on("message", receive);

setInterval(() => {
    for (const d of [direct, ...Object.values(routed)]) {
        const counter = d.objects[`${T.ANALOG_VALUE}:2`];
        d.set(counter, counter.pv + 1);
    }
}, 100);
if (count) {
    let tick = 0;
    setInterval(() => {
        tick += 1;
        for (let i = 0; i < count; i++) direct.set(direct.objects[`${T.ANALOG_VALUE}:${1000 + i}`], i + tick * 0.25);
    }, 1000 / hz);
}

unicast.bind(port, host, () => broadcast.bind(port, "127.255.255.255",
    () => console.log(`READY ${host}:${port}`)));
process.on("SIGTERM", () => process.exit(0));
