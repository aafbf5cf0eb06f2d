// A node-snap7 server (snap7's C S7 server) for the bridge's S7 tests and benchmark: a small PLC.
//
// Usage: node server.js PORT [COUNT] [HZ]
//   PORT   TCP port on 127.0.0.1 (an S7 PLC listens on 102)
//   COUNT  REALs in DB3 from byte 0 changing at HZ (the benchmark), default 0 (no DB3)
//   HZ     how often they change, default 10
// Prints "READY <port>" on stdout once it listens; SIGTERM stops it.
//
// Memory (every value big-endian, as in a PLC):
//   DB1 (256 bytes) every type, see LAYOUT below; DB1.DBD124 (DINT) counts up every 100 ms
//   DB2 (1024 bytes) a WSTRING[254] at DBB0 (512 bytes: more than one 480-byte PDU), then
//       REAL i at DBD(512 + 4 i), i = 0..127
//   M (64 bytes)  M0.1 = 1, MB5 = 7, MW10 = 1000, MD20 = REAL 1.5
//   I (128 bytes) I0.0 = 1, ID4 = DINT 70000, IW64 = 27648
//   Q (16 bytes)  Q0.1 = 1, QB1 = 0x5A, QW2 = 500
//   C (16 counters) C3 = 42 (BCD), T (16 timers) T2 = S5TIME 12.3 s (base 100 ms, 123)
// No DB4 .. DB99: reading one is refused with "object does not exist".
"use strict";

const snap7 = require("node-snap7");

const port = Number(process.argv[2]);
const count = Number(process.argv[3] || 0);
const hz = Number(process.argv[4] || 10);

function bcd(n) { return ((Math.floor(n / 10) % 10) << 4) | (n % 10); }

function dt(buffer, at, d, ms) {  // DATE_AND_TIME: BCD bytes, ms in 3 BCD digits, weekday 1..7
    const year = d.getUTCFullYear() % 100;
    [year, d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(),
        d.getUTCSeconds()].forEach((v, i) => { buffer[at + i] = bcd(v); });
    buffer[at + 6] = bcd(Math.floor(ms / 10));
    buffer[at + 7] = ((ms % 10) << 4) | (d.getUTCDay() + 1);
}

function dtl(buffer, at, d, ns) {  // DTL: binary, weekday 1 (Sunday) .. 7
    buffer.writeUInt16BE(d.getUTCFullYear(), at);
    [d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCDay() + 1, d.getUTCHours(), d.getUTCMinutes(),
        d.getUTCSeconds()].forEach((v, i) => { buffer[at + 2 + i] = v; });
    buffer.writeUInt32BE(ns, at + 8);
}

function string(buffer, at, max, text) {  // STRING[max]: max length, actual length, latin-1
    buffer[at] = max; buffer[at + 1] = text.length; buffer.write(text, at + 2, "latin1");
}

function wstring(buffer, at, max, text) {  // WSTRING[max]: UInt16 max, UInt16 length, UTF-16BE
    buffer.writeUInt16BE(max, at); buffer.writeUInt16BE(text.length, at + 2);
    for (let i = 0; i < text.length; i++) buffer.writeUInt16BE(text.charCodeAt(i), at + 4 + 2 * i);
}

// DB1: the layout the tests read (byte offsets)
const when = new Date(Date.UTC(2024, 2, 15, 13, 45, 30));
const db1 = Buffer.alloc(256);
db1[0] = 0b00001001;                           //   0.0 BOOL true, 0.3 BOOL true
db1[1] = 0xAB;                                 //   1   BYTE 171
db1.writeUInt16BE(0xBEEF, 2);                  //   2   WORD 48879
db1.writeUInt32BE(0xDEADBEEF, 4);              //   4   DWORD
db1.writeInt16BE(-1234, 8);                    //   8   INT
db1.writeInt32BE(-123456789, 10);              //  10   DINT
db1.writeFloatBE(21.5, 14);                    //  14   REAL
db1.writeDoubleBE(Math.PI, 18);                //  18   LREAL
string(db1, 26, 20, "hello S7");               //  26   STRING[20] (22 bytes)
wstring(db1, 48, 10, "grüße ☃");               //  48   WSTRING[10] (24 bytes)
dt(db1, 72, when, 123);                        //  72   DATE_AND_TIME (8 bytes)
dtl(db1, 80, when, 123456789);                 //  80   DTL (12 bytes)
db1.writeInt8(-5, 92);                         //  92   SINT
db1[93] = 200;                                 //  93   USINT
db1.writeUInt16BE(60000, 94);                  //  94   UINT
db1.writeUInt32BE(4000000000, 96);             //  96   UDINT
db1.writeBigInt64BE(-9000000000000000n, 100);  // 100   LINT
db1.writeBigUInt64BE(18000000000000000000n, 108); // 108 ULINT
db1.writeFloatBE(50.0, 120);                   // 120   REAL setpoint (written by tests)
db1.writeInt32BE(0, 124);                      // 124   DINT counter, +1 every 100 ms
//                                                128.. 255 free for writes

const db2 = Buffer.alloc(1024);
wstring(db2, 0, 254, "Ω".repeat(254));
for (let i = 0; i < 128; i++) db2.writeFloatBE(i + 0.5, 512 + 4 * i);

const mk = Buffer.alloc(64);
mk[0] = 0b10; mk[5] = 7; mk.writeUInt16BE(1000, 10); mk.writeFloatBE(1.5, 20);
const pe = Buffer.alloc(128);
pe[0] = 1; pe.writeInt32BE(70000, 4); pe.writeUInt16BE(27648, 64);
const pa = Buffer.alloc(16);
pa[0] = 0b10; pa[1] = 0x5A; pa.writeUInt16BE(500, 2);
// snap7's server takes the word of timer or counter n from byte n >> 1 of its area (a PLC
// keeps it at 2 n), so C3 and T2 are put where it looks: byte 1.
const ct = Buffer.alloc(32);
ct.writeUInt16BE(0x0042, 1);                   // C3 = 42 (BCD)
const tm = Buffer.alloc(32);
tm.writeUInt16BE(0x1123, 1);                   // T2 = base 1 (100 ms) x 123 = 12.3 s

const server = new snap7.S7Server();
server.SetParam(server.LocalPort, port);
server.RegisterArea(server.srvAreaDB, 1, db1);
server.RegisterArea(server.srvAreaDB, 2, db2);
server.RegisterArea(server.srvAreaMK, mk);
server.RegisterArea(server.srvAreaPE, pe);
server.RegisterArea(server.srvAreaPA, pa);
server.RegisterArea(server.srvAreaCT, ct);
server.RegisterArea(server.srvAreaTM, tm);

let bench = null;
if (count > 0) {
    bench = Buffer.alloc(4 * count);
    server.RegisterArea(server.srvAreaDB, 3, bench);
}

let tick = 0;
setInterval(() => {  // the counter in DB1.DBD124 (GetArea and SetArea lock the area)
    const now = server.GetArea(server.srvAreaDB, 1);
    now.writeInt32BE(now.readInt32BE(124) + 1, 124);
    server.SetArea(server.srvAreaDB, 1, now);
}, 100);
if (bench !== null) {
    setInterval(() => {
        tick += 1;
        for (let i = 0; i < count; i++) bench.writeFloatBE(tick + i / 1000, 4 * i);
        server.SetArea(server.srvAreaDB, 3, bench);
    }, 1000 / hz);
}

if (process.env.S7_EVENTS) server.on("event", (e) => console.error(server.EventText(e)));
server.StartTo("127.0.0.1", (err) => {
    if (err) {
        console.error(`cannot start: ${server.ErrorText(err)}`);
        process.exit(1);
    }
    console.log(`READY ${port}`);
});
process.on("SIGTERM", () => { server.Stop(); process.exit(0); });
