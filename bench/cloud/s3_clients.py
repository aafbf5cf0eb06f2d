"""Two S3 client libraries side by side, for the lander's choice: boto3 and obstore.

    .venv/bin/python -m bench.cloud.s3_clients [--objects 200] [--threads 8]

Starts a SeaweedFS S3 server (tests/support/seaweedfs.py) and, for each library in a fresh
Python process: the time to import it and make a client, the resident memory after that,
and PUTs of ``--objects`` objects of 1 MiB of gzipped bronze-like JSON lines (about the
size of a full bronze file), one at a time and from ``--threads`` threads (the lander
uploads from worker threads). One JSON line per library.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.seaweedfs import start_seaweedfs

ROOT = Path(__file__).resolve().parents[2]

_CHILD = r'''
import gzip, json, os, resource, sys, time
from concurrent.futures import ThreadPoolExecutor
lib, endpoint, key, secret, bucket, count, threads = sys.argv[1:8]
count, threads = int(count), int(threads)
started = time.perf_counter()
if lib == "boto3":
    import boto3
    from botocore.config import Config
    client = boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=threads * 2))
    def put(name, body):
        client.put_object(Bucket=bucket, Key=name, Body=body)
else:
    import obstore
    from obstore.store import S3Store
    store = S3Store(bucket, endpoint=endpoint, region="us-east-1", access_key_id=key,
                    secret_access_key=secret, virtual_hosted_style_request=False,
                    client_options={"allow_http": True})
    def put(name, body):
        obstore.put(store, name, body)
import_s = time.perf_counter() - started
def rss_mib():  # VmRSS: ru_maxrss would carry the parent's peak across exec
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) for l in status if l.startswith("VmRSS:")) / 1024
def cpu_s():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
client_rss = rss_mib()
line = json.dumps({"gateway": "gw-1", "epoch": "e-1", "seq": 1, "payload": "x" * 180})
rows, body = 0, b""
lines = []
for seq in range(200_000):
    noise = os.urandom(8).hex()  # gzip compresses it as it does real ids and times
    lines.append(line.replace('"seq": 1', f'"seq": {seq}').encode() + noise.encode() + b"\n")
    if seq % 1000 == 999:
        body = gzip.compress(b"".join(lines), 6)
        if len(body) >= 1 << 20:
            break
put(f"{lib}/warm", body)
cpu0 = cpu_s()
t = time.perf_counter()
for i in range(count):
    put(f"{lib}/serial/{i}", body)
serial = count / (time.perf_counter() - t)
t = time.perf_counter()
with ThreadPoolExecutor(threads) as pool:
    list(pool.map(lambda i: put(f"{lib}/threads/{i}", body), range(count)))
parallel = count / (time.perf_counter() - t)
cpu = cpu_s() - cpu0
print(json.dumps({"library": lib, "object_bytes": len(body),
                  "import_and_client_s": round(import_s, 3),
                  "rss_after_client_mib": round(client_rss, 1),
                  "puts_per_s_one_thread": round(serial, 1),
                  f"puts_per_s_{threads}_threads": round(parallel, 1),
                  "cpu_ms_per_put": round(cpu / (2 * count) * 1000, 2),
                  "rss_after_puts_mib": round(rss_mib(), 1)}))
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=200)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--libraries", default="boto3,obstore")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="s3-clients-") as work, \
            start_seaweedfs(Path(work)) as s3:
        bucket = s3.create_bucket("clients")
        for lib in args.libraries.split(","):
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, lib, s3.endpoint, s3.access_key, s3.secret_key,
                 bucket, str(args.objects), str(args.threads)],
                cwd=ROOT, check=True, capture_output=True, text=True,
            )  # fmt: skip
            print(out.stdout.strip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
