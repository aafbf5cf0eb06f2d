// Aedes as a peer broker of bench.compare: in memory, the queue limit out of the way, one TCP
// listener. Usage: node broker.mjs PORT HOST
import { createServer } from 'node:net'
import { Aedes } from 'aedes'

const [port, host] = [Number(process.argv[2]), process.argv[3] || '127.0.0.1']
const broker = await Aedes.createBroker({ concurrency: 1000, queueLimit: 1_000_000 })
createServer(broker.handle).listen(port, host, () => console.log(`aedes listening on ${host}:${port}`))
