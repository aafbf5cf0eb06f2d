"""pylogix against the bridge's EtherNet/IP client (pycomm3's connection, planned Multiple
Service Packets), both reading the same tags of cpppo's Logix simulator: wall time and the
client's CPU per read of `--tags` DINTs. A measurement for docs/bridge.md, not a test:

    .venv/bin/pip install pylogix==1.1.6   # not a dependency of the project
    .venv/bin/python -m tests.bridge.enip.compare_clients --tags 100 --rounds 20
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

from bridge.enip.config import EnipDeviceConfig
from bridge.enip.device import point_read
from bridge.enip.plan import plan_reads
from bridge.enip.session import open_session
from tests.bridge.enip.support import LogixSimulator


def report(label: str, tags: int, rounds: int, wall: float, cpu: float) -> None:
    print(f"{label:<52} {wall / rounds * 1000:7.1f} ms per read of {tags} tags, client CPU "
          f"{cpu / rounds * 1000:5.1f} ms per read")


def measure(label: str, tags: int, rounds: int, read: Callable[[], object]) -> None:
    read()  # the first read may set things up
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        read()
    report(label, tags, rounds, time.perf_counter() - wall, time.process_time() - cpu)


async def measure_async(label: str, tags: int, rounds: int,
                        read: Callable[[], Awaitable[object]]) -> None:
    await read()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        await read()
    report(label, tags, rounds, time.perf_counter() - wall, time.process_time() - cpu)


async def bridge_client(port: int, tags: int, rounds: int) -> None:
    config = EnipDeviceConfig.model_validate({
        "name": "compare", "host": "127.0.0.1", "port": port,
        "points": [{"name": f"t{i}", "tag": f"T{i}", "type": "DINT"} for i in range(tags)]})
    session = await open_session(config)
    plan = plan_reads([point_read(point) for point in config.points], session.connection_size)

    async def read() -> None:
        for request in plan:
            await session.exchange(request.services)

    try:
        await measure_async(f"bridge: pycomm3 connection, {len(plan)} planned request(s)",
                            tags, rounds, read)
    finally:
        await session.close()


def main() -> None:
    """Start the simulator, measure both clients, stop it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tags", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    from pylogix import PLC  # not a dependency: installed by hand for this measurement

    simulator = LogixSimulator(tags=[f"T{i}=DINT" for i in range(args.tags)]).start()
    names = [f"T{i}" for i in range(args.tags)]
    try:
        with PLC("127.0.0.1") as plc:
            plc.Port = simulator.port
            measure("pylogix: PLC.Read(list of names)", args.tags, args.rounds,
                    lambda: plc.Read(names))
            measure("pylogix: one PLC.Read per tag", args.tags, args.rounds,
                    lambda: [plc.Read(name) for name in names])
        asyncio.run(bridge_client(simulator.port, args.tags, args.rounds))
    finally:
        simulator.kill()


if __name__ == "__main__":
    main()
