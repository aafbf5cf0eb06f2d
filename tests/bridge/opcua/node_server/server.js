// A node-opcua server for the bridge's OPC UA tests and benchmark: a small PLC.
//
// Usage: node server.js PORT PKI_DIR [COUNT] [HZ]
//   PORT     TCP port (opc.tcp://127.0.0.1:PORT/UA/Plc)
//   PKI_DIR  where node-opcua keeps its certificates (kept across restarts of one test)
//   COUNT    extra Double variables ns=1;s=Load.N changing at HZ (the benchmark), default 0
//   HZ       how often they change, default 10
// Prints "READY <port>" on stdout once it listens; SIGTERM stops it.
//
// Address space (namespace 1, under Objects/PLC):
//   Counter      UInt32, +1 every 100 ms (source timestamp = when it changed)
//   Temperature  Double, changes every 100 ms
//   Running      Boolean, toggles every 500 ms
//   Mode         Int32 enumeration value 0..2 (writable)
//   Setpoint     Double, writable
//   Name         String, writable
//   Started      DateTime (the server's start)
//   Vector       Double[3] array
//   Locked       Double, writable by AccessLevel but not by this user (BadUserAccessDenied)
//   Failing      Double with StatusCode BadSensorFailure
//   Doubtful     Double with StatusCode UncertainLastUsableValue
"use strict";

const {
    OPCUAServer, OPCUACertificateManager, Variant, DataType, DataValue, StatusCodes,
    VariantArrayType,
} = require("node-opcua");

const port = Number(process.argv[2]);
const pkiDir = process.argv[3];
const count = Number(process.argv[4] || 0);
const hz = Number(process.argv[5] || 10);

async function main() {
    const server = new OPCUAServer({
        port,
        resourcePath: "/UA/Plc",
        buildInfo: { productName: "outpost test PLC", buildNumber: "1" },
        allowAnonymous: true,
        serverCertificateManager: new OPCUACertificateManager({
            rootFolder: pkiDir, automaticallyAcceptUnknownCertificate: true,
        }),
        maxConnectionsPerEndpoint: 100,
    });
    await server.initialize();
    const addressSpace = server.engine.addressSpace;
    const namespace = addressSpace.getOwnNamespace();
    const plc = namespace.addObject({ organizedBy: addressSpace.rootFolder.objects, browseName: "PLC" });

    function variable(name, dataType, value, options = {}) {
        const node = namespace.addVariable({
            componentOf: plc, nodeId: `s=${name}`, browseName: name, dataType,
            ...options,
        });
        node.setValueFromSource(new Variant({ dataType: DataType[dataType], value, ...(options.variant || {}) }),
            StatusCodes.Good, new Date());
        return node;
    }
    const rw = { accessLevel: "CurrentRead | CurrentWrite", userAccessLevel: "CurrentRead | CurrentWrite" };

    const counter = variable("Counter", "UInt32", 0);
    const temperature = variable("Temperature", "Double", 20.0);
    const running = variable("Running", "Boolean", false);
    variable("Mode", "Int32", 1, rw);
    variable("Setpoint", "Double", 21.5, rw);
    variable("Name", "String", "line 1", rw);
    variable("Started", "DateTime", new Date());
    variable("Vector", "Double", [1.5, 2.5, 3.5], { valueRank: 1, arrayDimensions: [3], variant: { arrayType: VariantArrayType.Array } });
    variable("Locked", "Double", 7.0, { accessLevel: "CurrentRead | CurrentWrite", userAccessLevel: "CurrentRead" });
    const failing = variable("Failing", "Double", 0.0);
    failing.setValueFromSource(new Variant({ dataType: DataType.Double, value: 0.0 }), StatusCodes.BadSensorFailure, new Date());
    const doubtful = variable("Doubtful", "Double", 3.0);
    doubtful.setValueFromSource(new Variant({ dataType: DataType.Double, value: 3.0 }), StatusCodes.UncertainLastUsableValue, new Date());

    const loads = [];
    for (let i = 0; i < count; i++) {
        loads.push(namespace.addVariable({ componentOf: plc, nodeId: `s=Load.${i}`, browseName: `Load.${i}`, dataType: "Double" }));
    }

    let tick = 0;
    setInterval(() => {
        tick += 1;
        const now = new Date();
        counter.setValueFromSource(new Variant({ dataType: DataType.UInt32, value: tick }), StatusCodes.Good, now);
        temperature.setValueFromSource(new Variant({ dataType: DataType.Double, value: 20 + (tick % 50) / 10 }), StatusCodes.Good, now);
        if (tick % 5 === 0) {
            running.setValueFromSource(new Variant({ dataType: DataType.Boolean, value: tick % 10 === 0 }), StatusCodes.Good, now);
        }
    }, 100);
    if (count > 0) {
        let step = 0;
        setInterval(() => {
            step += 1;
            const now = new Date();
            for (let i = 0; i < loads.length; i++) {
                loads[i].setValueFromSource(new Variant({ dataType: DataType.Double, value: step + i / 1000 }), StatusCodes.Good, now);
            }
        }, 1000 / hz);
    }

    await server.start();
    process.stdout.write(`READY ${port}\n`);
    process.on("SIGTERM", async () => {
        await server.shutdown(0);
        process.exit(0);
    });
}

main().catch((err) => {
    process.stderr.write(`server failed: ${err.stack || err}\n`);
    process.exit(1);
});
