"""A day of load in miniature: `hsstore serve` (CPU, the tiny model, SQLite) under steady extraction and verified reads
for `--duration` seconds, then the faults a long-running service meets (a burst of connections, slow-header clients,
a slow reader, SIGKILL under load and a restart).

The load, all at once:
  readers   `--reader-processes` x `--reader-threads`, each in turn: a whole entry, two layers, a token range, a batch
            of 8 and a page of the key listing, every body verified (the client's default)
  writer    one thread extracting new samples without pause: `--workload chat` (the day's), 2 a request of 20 to
            `--max-words` words; `--workload window` (a downtime window's, #63), 4 a request of 16 to 8,192 tokens,
            the short mix (16-2,048) and the long (256-8,192) drawn in turn, sent as token ids: many lengths, each
            sequence new, as flat out as the device allows
  polls     /metrics and /readyz every second
Sampled every `--sample-every` seconds: the server's RSS, open fds and threads. Per `--window` seconds: p50/p99 of
each operation, beside the first window's. What the record says of memory: RSS after `--warmup` against RSS at its
end, and the slope of a straight line through the last `--tail` seconds (MiB a minute).

    python benchmarks/soak.py --duration 120 --window 30 --warmup 30 --tail 60       # two minutes
    python benchmarks/soak.py --duration 1800 --out benchmarks/results/soak-cpu.json  # the record: 30 minutes
    python benchmarks/soak.py --workload window --duration 1800 --warmup 300 \
        --out benchmarks/results/soak-window-cpu.json                                 # a window's 30 minutes

Run it from a checkout that does not change while it runs (a `git worktree`): the server it starts imports the tree.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import multiprocessing
import os
import random
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.records import cpu_model  # noqa: E402
from client import FeatureClient  # noqa: E402
from schemas.api import ListedKey  # noqa: E402
from schemas.keys import FeatureKey  # noqa: E402

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau"


def commit() -> str | None:
    """The commit this tree is at, with `+changes` when it differs from it (a record names what it measured)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        return None
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def proc_stats(pid: int) -> dict[str, int]:
    """RSS (MiB), open fds and threads of process `pid`, from /proc."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {
        "rss_mib": int(status["VmRSS"].split()[0]) // 1024,
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": int(status["Threads"]),
    }


class Server:
    """`hsstore serve` in its own process, on a free loopback port, over one data directory (kept across restarts)."""

    def __init__(self, model_dir: Path, data_dir: Path, log: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "HSSTORE_MODEL_DIR": str(model_dir),
            "HSSTORE_DATA_DIR": str(data_dir),
            "HSSTORE_DEVICE": "cpu",
            "PYTHONPATH": str(ROOT),
            **env,
        }
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180) -> None:
        hsstore = Path(sys.executable).with_name("hsstore")
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(hsstore), "serve", "--port", str(self.port)], env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}); see {self.log}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the server was not ready in {timeout} s; see {self.log}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


# a window's sequences: the extraction benchmark's short and long mixes (benchmarks/extract.py), the short widened
# down to 16 tokens; ids below the tiny model's vocabulary (service/model/devmodel.py: 1,024)
WINDOW_MIXES = ((16, 2048), (256, 8192))
WINDOW_VOCAB = 1024


def sample_of(rng: random.Random, tag: str, max_words: int) -> dict[str, Any]:
    text = " ".join(rng.choices(WORDS.split(), k=rng.randint(20, max_words)))
    return {"messages": [{"role": "user", "content": f"{text} ({tag})"}]}


def window_sample(rng: random.Random, count: int) -> dict[str, Any]:
    """The `count`th sample of a window: the mixes in turn, a length drawn uniformly in the mix's range."""
    low, high = WINDOW_MIXES[count % len(WINDOW_MIXES)]
    return {"token_ids": [rng.randrange(WINDOW_VOCAB) for _ in range(rng.randint(low, high))]}


# what the writer extracts a request: (samples a request, how one is made from the rng, its tag, its place)
WORKLOADS: dict[str, tuple[int, Callable[[random.Random, str, int, int], dict[str, Any]]]] = {
    "chat": (2, lambda rng, tag, count, max_words: sample_of(rng, f"{tag}{count}", max_words)),
    "window": (4, lambda rng, tag, count, max_words: window_sample(rng, count)),
}


# -- the load -------------------------------------------------------------------------------------------------------
Event = tuple[str, float, float, str | None]  # (operation, when it ended, seconds it took, error or None)


def timed_op(events: list[Event], name: str, op: Any) -> Any:
    start = time.monotonic()
    try:
        result = op()
    except Exception as exc:
        events.append((name, time.monotonic(), time.monotonic() - start, f"{type(exc).__name__}: {exc}"[:300]))
        return None
    events.append((name, time.monotonic(), time.monotonic() - start, None))
    return result


def reader_loop(url: str, stop: threading.Event, events: list[Event], seed: int) -> None:
    rng = random.Random(seed)
    keys: list[ListedKey] = []
    with FeatureClient(url, timeout=120) as hs:
        while not stop.is_set():
            listed = timed_op(events, "list", lambda: list(itertools.islice(hs.keys(page_size=500), 500)))
            keys = listed or keys
            if len(keys) < 8:
                time.sleep(0.2)
                continue
            for _ in range(10):
                if stop.is_set():
                    break
                key = rng.choice(keys).key()
                timed_op(events, "get", lambda key=key: hs.fetch(key))
                timed_op(events, "get_layers", lambda key=key: hs.fetch(key, layers=[1, 3]))
                timed_op(events, "get_tokens", lambda key=key: hs.fetch(key, tokens=(0, 16)))
                batch = [k.key() for k in rng.sample(keys, 8)]
                timed_op(events, "batch8", lambda batch=batch: hs.get_batch(batch))


def reader_process(url: str, threads: int, seconds: float, out: Any, seed: int) -> None:
    """`threads` readers for `seconds`; their events put on `out` at the end."""
    stop = threading.Event()
    events: list[Event] = []
    run_for(seconds, stop, [functools.partial(reader_loop, url, stop, events, seed * 100 + i) for i in range(threads)])
    out.put(events)


def run_for(seconds: float, stop: threading.Event, loops: list[Callable[[], None]]) -> None:
    """Each of `loops` in a thread of its own for `seconds`; then `stop` set and every one awaited."""
    workers = [threading.Thread(target=loop, daemon=True) for loop in loops]
    for worker in workers:
        worker.start()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join(120)


def writer_loop(
    url: str,
    stop: threading.Event,
    events: list[Event],
    acknowledged: list[FeatureKey],
    max_words: int,
    tag: str,
    workload: str = "chat",
) -> None:
    rng = random.Random(tag)
    per_request, make = WORKLOADS[workload]
    count = 0
    with FeatureClient(url, timeout=300) as hs:
        while not stop.is_set():
            samples = [make(rng, f"{tag}-{i}-", count * per_request + i, max_words) for i in range(per_request)]
            count += 1
            response = timed_op(events, "extract", lambda samples=samples: hs.extract(samples))
            if response is not None:
                acknowledged.extend(result.manifest.feature_key() for result in response.results)


def poll_loop(url: str, stop: threading.Event, events: list[Event]) -> None:
    with httpx.Client(timeout=30) as http:
        while not stop.is_set():
            timed_op(events, "metrics", lambda: http.get(f"{url}/metrics").raise_for_status())
            timed_op(events, "readyz", lambda: http.get(f"{url}/readyz").raise_for_status())
            stop.wait(1.0)


def sampler_loop(pid: int, stop: threading.Event, samples: list[dict[str, float]], every: float, t0: float) -> None:
    while not stop.is_set():
        try:
            samples.append({"t": round(time.monotonic() - t0, 1), **proc_stats(pid)})
        except FileNotFoundError:
            return
        stop.wait(every)


# -- what the record says -------------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def windows(events: list[Event], t0: float, width: float) -> list[dict[str, Any]]:
    """p50/p99 (ms) and counts of each operation per window of `width` seconds."""
    by_window: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    errors: dict[int, int] = defaultdict(int)
    for name, ended, took, error in events:
        index = int((ended - t0) // width)
        if error is None:
            by_window[index][name].append(took * 1000)
        else:
            errors[index] += 1
    return [
        {
            "window": index,
            "from_s": index * width,
            "errors": errors[index],
            "ops": {
                name: {"n": len(ms), "p50_ms": round(percentile(ms, 0.5), 2), "p99_ms": round(percentile(ms, 0.99), 2)}
                for name, ms in sorted(by_window[index].items())
            },
        }
        for index in sorted(by_window)
    ]


def slope_mib_per_min(samples: list[dict[str, float]], since: float) -> float:
    points = [(s["t"], s["rss_mib"]) for s in samples if s["t"] >= since]
    if len(points) < 3:
        return float("nan")
    return statistics.linear_regression([t for t, _ in points], [r for _, r in points]).slope * 60


def memory_summary(samples: list[dict[str, float]], warmup: float, tail: float, duration: float) -> dict[str, Any]:
    after = [s for s in samples if s["t"] >= warmup]
    first, last = after[0], after[-1]
    return {
        "rss_after_warmup_mib": first["rss_mib"],
        "rss_end_mib": last["rss_mib"],
        "rss_peak_mib": max(s["rss_mib"] for s in after),
        "rss_growth_after_warmup": round(last["rss_mib"] / first["rss_mib"] - 1, 4),
        "rss_slope_last_mib_per_min": round(slope_mib_per_min(samples, duration - tail), 3),
        "fds": [min(s["fds"] for s in after), max(s["fds"] for s in after)],
        "threads": [min(s["threads"] for s in after), max(s["threads"] for s in after)],
    }


def stated_memory(url: str, samples: list[dict[str, float]]) -> dict[str, Any]:
    """The budget the server states (/v1/info's host_memory) at the end of the load, and whether every RSS sample
    stayed under it."""
    stated = httpx.get(f"{url}/v1/info", timeout=30).json().get("host_memory")
    if stated is None:  # an earlier release's server states none
        return {}
    peak = max(s["rss_mib"] for s in samples)
    return {**stated, "peak_rss_mib": peak, "within_budget": peak <= stated["budget_mib"]}


def run_load(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.monotonic()
    stop = threading.Event()
    events: list[Event] = []
    acknowledged: list[FeatureKey] = []
    samples: list[dict[str, float]] = []
    threads = [
        threading.Thread(target=sampler_loop, args=(server.pid, stop, samples, args.sample_every, t0), daemon=True),
        threading.Thread(
            target=writer_loop,
            args=(server.url, stop, events, acknowledged, args.max_words, "load", args.workload),
            daemon=True,
        ),
        threading.Thread(target=poll_loop, args=(server.url, stop, events), daemon=True),
    ]
    for thread in threads:
        thread.start()
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    readers = [
        context.Process(target=reader_process, args=(server.url, args.reader_threads, args.duration, queue, p))
        for p in range(args.reader_processes)
    ]
    for reader in readers:
        reader.start()
    last_print = t0
    while time.monotonic() - t0 < args.duration:
        time.sleep(1)
        if samples and time.monotonic() - last_print >= args.window:
            last_print = time.monotonic()
            print(f"{samples[-1]['t']:7.0f} s  {samples[-1]}  ops {len(events)}", flush=True)
    for _ in readers:  # every reader's events taken before any is joined: a reader exits once its events are sent
        events.extend(queue.get(timeout=300))
    for reader in readers:
        reader.join()
    stop.set()
    for thread in threads:
        thread.join(300)
    # the windows are the timed load's: what ended after it (the readers' last turns) is counted, not timed
    per_window = windows([e for e in events if e[1] - t0 < args.duration], t0, args.window)
    errors = [e for e in events if e[3] is not None]
    first, last = per_window[0]["ops"], per_window[-1]["ops"]
    return {
        "operations": len(events),
        "errors": len(errors),
        "error_examples": sorted({e[3] for e in errors if e[3]})[:10],
        "acknowledged": len(acknowledged),
        "acknowledged_keys": acknowledged,
        "memory": memory_summary(samples, args.warmup, args.tail, args.duration),
        "host_memory": stated_memory(server.url, samples),
        "p99_last_over_first": {
            name: round(last[name]["p99_ms"] / first[name]["p99_ms"], 2) for name in first if name in last
        },
        "windows": per_window,
        "samples": samples,
    }


# -- the faults -----------------------------------------------------------------------------------------------------
def slow_headers(port: int, count: int, byte_every: float, limit: float) -> dict[str, Any]:
    """`count` connections each sending a request head a byte every `byte_every` s: how long the server let each
    live, and the first line it answered with before it cut them (None: still open at `limit`)."""
    head = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 4096
    opened = time.monotonic()
    open_ = {i: socket.create_connection(("127.0.0.1", port)) for i in range(count)}
    cut: dict[int, float] = {}
    answers: set[str] = set()
    sent = 0
    while open_ and time.monotonic() - opened < limit:
        readable, _, _ = select.select(list(open_.values()), [], [], 0)
        for i, conn in list(open_.items()):
            try:
                if conn in readable:
                    answer = conn.recv(4096)
                    if answer:
                        answers.add(answer.split(b"\r\n", 1)[0].decode(errors="replace"))
                    raise ConnectionResetError
                conn.send(head[sent : sent + 1])
            except OSError:
                cut[i] = round(time.monotonic() - opened, 2)
                conn.close()
                del open_[i]
        sent += 1
        time.sleep(byte_every)
    for conn in open_.values():
        conn.close()
    return {
        "connections": count,
        "cut": len(cut),
        "cut_after_s": [min(cut.values()), max(cut.values())] if cut else None,
        "answered": sorted(answers),
    }


def slow_reader(url: str, key: FeatureKey, stop: threading.Event) -> int:
    """One whole entry read 1 KiB every 50 ms until `stop`: bytes read."""
    read = 0
    with (
        httpx.Client(timeout=60) as http,
        http.stream("GET", f"{url}/v1/features/{key.prompt_hash}", params=key.params()) as response,
    ):
        for piece in response.iter_raw(1024):
            read += len(piece)
            if stop.wait(0.05):
                break
    return read


def reads_p99(url: str, keys: list[FeatureKey], seconds: float, threads: int = 2) -> float:
    """p99 (ms) of whole-entry reads by `threads` readers over `seconds`."""
    stop = threading.Event()
    events: list[Event] = []

    def read(seed: int) -> None:
        rng = random.Random(seed)
        with FeatureClient(url, timeout=60) as hs:
            while not stop.is_set():
                key = rng.choice(keys)
                timed_op(events, "get", lambda key=key: hs.fetch(key))

    run_for(seconds, stop, [functools.partial(read, i) for i in range(threads)])
    return percentile([took * 1000 for _, _, took, error in events if error is None], 0.99)


def slow_clients(server: Server, keys: list[FeatureKey], seconds: float) -> dict[str, Any]:
    """Reads' p99 alone, then beside 20 slow-header connections and a slow reader."""
    alone = reads_p99(server.url, keys, seconds)
    stop = threading.Event()
    reader = threading.Thread(target=slow_reader, args=(server.url, keys[0], stop), daemon=True)
    reader.start()
    found: dict[str, Any] = {}
    loris = threading.Thread(target=lambda: found.update(slow_headers(server.port, 20, 0.5, seconds + 30)))
    loris.start()
    beside = reads_p99(server.url, keys, seconds)
    stop.set()
    loris.join()
    reader.join(60)
    return {"reads_p99_ms_alone": alone, "reads_p99_ms_beside_slow_clients": beside, "slow_headers": found}


def burst(url: str, count: int) -> dict[str, Any]:
    """`count` connections opened at once, each asking /v1/info on a fresh connection."""
    barrier = threading.Barrier(count)
    statuses: list[str] = []

    def ask() -> None:
        with httpx.Client(timeout=60) as http:
            barrier.wait()
            try:
                statuses.append(str(http.get(f"{url}/v1/info").status_code))
            except httpx.HTTPError as exc:
                statuses.append(type(exc).__name__)

    askers = [threading.Thread(target=ask) for _ in range(count)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join()
    return {"connections": count, "answers": dict(Counter(statuses))}


def kill_under_load(server: Server, keys: list[FeatureKey], max_words: int, after: float) -> dict[str, Any]:
    """SIGKILL while a writer extracts and readers read; then a restart, a scrub (`hsstore verify`) and every
    acknowledged entry read back verified. What the clients raised meanwhile, by kind (each must be typed)."""
    stop = threading.Event()
    events: list[Event] = []
    acknowledged: list[FeatureKey] = []
    loads = [threading.Thread(target=writer_loop, args=(server.url, stop, events, acknowledged, max_words, "kill"))]
    loads += [threading.Thread(target=reader_loop, args=(server.url, stop, events, i)) for i in range(4)]
    for load in loads:
        load.start()
    time.sleep(after)
    server.kill()
    time.sleep(2)
    stop.set()
    for load in loads:
        load.join(120)
    raised = Counter((e[3] or "").split(":", 1)[0] for e in events if e[3] is not None)
    server.start()
    hsstore = Path(sys.executable).with_name("hsstore")
    scrub = subprocess.run(
        [str(hsstore), "verify", server.env["HSSTORE_DATA_DIR"]], capture_output=True, text=True, env=server.env
    )
    verified = 0
    with FeatureClient(server.url, timeout=120) as hs:
        for key in [*keys, *acknowledged]:
            hs.fetch(key)  # verified on receipt: raises on any byte that differs from what was recorded
            verified += 1
    return {
        "acknowledged_before_kill": len(acknowledged),
        "read_back_verified": verified,
        "of": len(keys) + len(acknowledged),
        "verify": scrub.stdout.strip().splitlines()[-1:] + scrub.stderr.strip().splitlines()[-1:],
        "verify_exit": scrub.returncode,
        "client_errors_during_kill": dict(raised),
    }


def run_faults(server: Server, acknowledged: list[FeatureKey], args: argparse.Namespace) -> dict[str, Any]:
    keys = acknowledged[-200:]
    return {
        "slow_clients": slow_clients(server, keys, args.fault_seconds),
        "burst": burst(server.url, 150),
        "kill": kill_under_load(server, keys, args.max_words, args.fault_seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=120)
    parser.add_argument("--window", type=float, default=60)
    parser.add_argument("--warmup", type=float, default=60, help="seconds before RSS is taken as settled")
    parser.add_argument("--tail", type=float, default=600, help="the last seconds the RSS slope is fitted over")
    parser.add_argument("--sample-every", type=float, default=5)
    parser.add_argument("--reader-processes", type=int, default=2)
    parser.add_argument("--reader-threads", type=int, default=6)
    parser.add_argument("--max-words", type=int, default=300)
    parser.add_argument("--workload", choices=tuple(WORKLOADS), default="chat", help="what the writer extracts")
    parser.add_argument("--model-dir", type=Path, default=None, help="default: a tiny Qwen3.5 built for the run")
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server (repeatable)")
    parser.add_argument("--faults", action=argparse.BooleanOptionalAction, default=True, help="the faults after it")
    parser.add_argument("--fault-seconds", type=float, default=15, help="each slow-client phase; the kill's lead")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    args.tail = min(args.tail, args.duration - args.warmup)

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="hsstore-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    model_dir = args.model_dir
    if model_dir is None:
        from service.model.devmodel import build_devmodel

        model_dir = build_devmodel(work / "model")
    env = dict(item.split("=", 1) for item in args.env)
    server = Server(model_dir, work / "data", work / "server.log", env)
    server.start()
    record: dict[str, Any] = {"command": " ".join(["python", *sys.argv]), "commit": commit(), "cpu": cpu_model()}
    try:
        load = run_load(server, args)
        acknowledged = load.pop("acknowledged_keys")
        record["load"] = load
        if args.faults:
            record["faults"] = run_faults(server, acknowledged, args)
    finally:
        server.stop()
    summary = {k: v for k, v in record.items() if k != "load"}
    summary["load"] = {k: v for k, v in record["load"].items() if k not in ("windows", "samples")}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
