"""A new user's first hour with the CLI: errors in one or two lines, ids that paste back, JSON for scripts, JSONL
mistakes named by file and line, and no torch for commands that only talk to a service."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from typer.testing import CliRunner, Result

from client import FeatureClient
from hsstore.cli import app
from schemas.featureset import FeatureSet
from schemas.prompt_hash import prompt_hash
from service.main import create_app
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import REPO, LiveServer, coding_prompts, free_port

runner = CliRunner()


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "80", **(env or {})})


def ok(*args: str) -> str:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


def failed(*args: str, env: dict[str, str] | None = None) -> list[str]:
    """The stderr lines of a command that must fail cleanly: exit 1, one or two lines, no traceback."""
    result = invoke(*args, env=env)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output and "pydantic" not in result.output, result.output
    return lines


def listed(*args: str) -> list[dict[str, Any]]:
    """`hsstore entries --json ...`: one JSON object per line and entry."""
    return [json.loads(line) for line in ok("entries", "--json", *args).splitlines()]


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def prompts(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "prompts.jsonl", [json.dumps(p) for p in coding_prompts()[:3]])


def test_connection_refused_names_the_url_and_how_to_set_it() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    first, hint = failed("entries", "--url", url)
    assert url in first and "refused" in first.lower()
    assert "--url" in hint and "HSSTORE_URL" in hint
    failed("window", "status", env={"HSSTORE_URL": url})


def test_url_and_token_belong_to_the_root_and_go_anywhere_on_the_line() -> None:
    import typer.main

    from hsstore.cli.group import hoist_root_options

    def commands(group: Any) -> list[Any]:  # a group's leaf commands, through its subgroups (`window open`)
        found: list[Any] = []
        for command in group.commands.values():
            found.extend(commands(command) if hasattr(command, "commands") else [command])
        return found

    root = typer.main.get_command(app)
    assert {"url", "token", "debug"} <= {p.name for p in root.params}
    for command in commands(root):  # defined once: no command repeats them
        assert not {"url", "token", "debug"} & {p.name for p in command.params}, command.name
    assert hoist_root_options(["window", "status", "--url", "h:1", "--token=t", "--debug"]) == [
        "--url",
        "h:1",
        "--token=t",
        "--debug",
        "window",
        "status",
    ]
    assert hoist_root_options(["import", "--", "--url"]) == ["import", "--", "--url"]
    url = f"http://127.0.0.1:{free_port()}"
    for args in (("--url", url, "entries"), ("entries", f"--url={url}")):
        assert url in failed(*args)[0]


def test_debug_shows_the_traceback() -> None:
    from client import ConnectionFailedError

    url = f"http://127.0.0.1:{free_port()}"
    assert isinstance(invoke("--debug", "jobs", "--url", url).exception, ConnectionFailedError)
    assert isinstance(invoke("jobs", "--url", url, env={"HSSTORE_DEBUG": "1"}).exception, ConnectionFailedError)


def test_another_server_on_the_port_is_named_as_not_hsstore(foreign_url: str) -> None:
    first, hint = failed("entries", "--url", foreign_url)
    assert "404" in first and "text/html" in first and "not as an hsstore service" in first
    assert "HSSTORE_URL" in hint


def test_a_config_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    (line,) = failed("serve", env={"HSSTORE_CONFIG": str(missing)})
    assert str(missing) in line and "does not exist" in line
    (line,) = failed("serve", "--config", str(missing))
    assert str(missing) in line and "does not exist" in line
    broken = tmp_path / "broken.toml"
    broken.write_text("windows = [\n")
    (line,) = failed("serve", env={"HSSTORE_CONFIG": str(broken)})
    assert "not valid TOML" in line


def test_an_unreachable_catalog_or_a_wrong_store_url_is_one_line(tmp_path: Path) -> None:
    from tests.conftest import free_port

    down = f"postgresql://hsstore:secret@127.0.0.1:{free_port()}/hsstore"
    env = {"HSSTORE_DATA_DIR": str(tmp_path / "d"), "HSSTORE_CATALOG_URL": down}
    (line,) = failed("serve", env=env)
    assert "the catalog at postgresql://hsstore:***@127.0.0.1" in line and "cannot be reached" in line
    assert "secret" not in line
    (line,) = failed("serve", env={"HSSTORE_DATA_DIR": str(tmp_path / "d"), "HSSTORE_STORE_URL": "ftp://x/y"})
    assert "store_url 'ftp://x/y'" in line and "s3://" in line


@pytest.mark.parametrize("command", ["extract", "warm"])
def test_jsonl_mistakes_are_named_by_file_and_line_and_nothing_is_sent(
    command: str, live_url: str, tmp_path: Path, settings: Settings
) -> None:
    good = json.dumps({"text": "fine"})
    cases = {
        "not JSON": [good, '{"text": "a"'],
        "got an array": [good, "", "[1, 2]"],
        "txt: unknown field (known: id, messages, chat_template_kwargs, text, token_ids, completion)": [
            good,
            json.dumps({"txt": "x"}),
        ],
        "completion.txt: unknown field (known: text, token_ids, greedy)": [
            good,
            json.dumps({"text": "x", "completion": {"txt": "y"}}),
        ],
        "exactly one of messages, text, token_ids": [good, json.dumps({"id": "x"})],
        "deeper than the limit of 64 levels": [good, "[" * 100_000],
    }
    for words, lines in cases.items():
        path = write_jsonl(tmp_path / "bad.jsonl", lines)
        (line,) = failed(command, str(path), "--url", live_url)
        assert f"{path}, line {len(lines)}" in line and words in line, line
    (line,) = failed(command, str(tmp_path / "absent.jsonl"), "--url", live_url)
    assert "cannot read" in line and "absent.jsonl" in line
    blank = write_jsonl(tmp_path / "blank.jsonl", ["", "  "])
    (line,) = failed(command, str(blank), "--url", live_url)
    assert line.endswith("holds no samples (every line is blank)"), line
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    (line,) = failed(command, str(empty), "--url", live_url)
    assert line.endswith(f"{empty}: holds no samples"), line
    assert listed("--url", live_url) == []
    assert json.loads(ok("jobs", "--url", live_url, "--json")) == []


def test_a_sample_the_service_refuses_is_named_by_line(live_url: str, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [json.dumps({"text": "ok"}), json.dumps({"token_ids": [1, 10**6]})])
    (line,) = failed("extract", str(path), "--url", live_url)
    assert f"{path}, line 2" in line and "vocabulary" in line


def test_extract_stopped_midway_says_what_was_stored(live_url: str, tmp_path: Path) -> None:
    lines = [json.dumps({"text": f"sample {i}"}) for i in range(3)] + [json.dumps({"token_ids": [10**6]})]
    path = write_jsonl(tmp_path / "p.jsonl", lines)
    first, hint = failed("extract", str(path), "--url", live_url, "--batch", "2")
    assert f"{path}, line 4" in first
    assert "first 2 samples (to line 2) were stored" in hint


def test_extract_prints_each_samples_id_and_prompt_hash_and_the_featureset(live_url: str, prompts: Path) -> None:
    out = ok("extract", str(prompts), "--url", live_url, "--layers", "3,embed,1")
    featureset = FeatureSet(layers=["embed", 1, 3])
    assert f"featureset {featureset.id} (layers embed,1,3)" in out
    for sample in coding_prompts()[:3]:
        assert f"extracted     {prompt_hash(sample)[:10]}  {sample['id']}" in out
    records = [json.loads(line) for line in ok("extract", str(prompts), "--url", live_url, "--json").splitlines()]
    assert [r["prompt_hash"] for r in records] == [prompt_hash(s) for s in coding_prompts()[:3]]
    assert [r["line"] for r in records] == [1, 2, 3] and {r["status"] for r in records} == {"extracted"}


def test_listed_ids_paste_back_and_fit_80_columns(live_url: str, prompts: Path, tmp_path: Path) -> None:
    ok("extract", str(prompts), "--url", live_url, "--backend", "torch")
    listing = ok("entries", "--url", live_url)
    rows = listing.splitlines()
    assert rows[0].split() == ["PROMPT", "TOKENS", "BACKEND", "FEATURESET", "CONTENT", "CREATED"]
    assert all(len(row) <= 80 for row in rows), listing
    for row, manifest in zip(rows[1:], listed("--url", live_url), strict=True):
        prompt, _, _, featureset, content, *_ = row.split()
        assert manifest["prompt_hash"].startswith(prompt) and manifest["featureset_id"] == featureset
        shown = ok("get", prompt, "--url", live_url, "--featureset", featureset, "--content-hash", content)
        assert f"content_hash    {manifest['content_hash']} (verified)" in shown
    prompt = rows[1].split()[0]
    out_file = tmp_path / "x.safetensors"
    wrote = ok("get", prompt, "--url", live_url, "--out", str(out_file))
    assert f"wrote {out_file} ({out_file.stat().st_size:,} bytes" in wrote
    assert "torch" in ok("compare", prompt, "--url", live_url, "--a", "torch", "--b", "torch")
    (line,) = failed("get", "abc", "--url", live_url)
    assert "6 to 64 lowercase hex" in line
    first, _ = failed("get", "0" * 12, "--url", live_url)
    assert "no stored entry's prompt hash starts with" in first


def test_entries_filters_and_pages(live_url: str, prompts: Path) -> None:
    ok("extract", str(prompts), "--url", live_url)
    everything = listed("--url", live_url)
    assert len(everything) == 3 and not {"fingerprint", "layer_stats", "featureset"} & set(everything[0])
    assert everything[0]["featureset_id"] and everything[0]["content_hash"]
    whole = listed("--url", live_url, "--full")
    assert [m["content_hash"] for m in whole] == [m["content_hash"] for m in everything]
    assert whole[0]["fingerprint"]["torch"] and whole[0]["layer_stats"]
    one = everything[1]["prompt_hash"]
    only = listed("--url", live_url, "--prompt-hash", one[:8])
    assert [m["prompt_hash"] for m in only] == [one]
    assert len(listed("--url", live_url, "--backend", "torch")) == 3
    assert listed("--url", live_url, "--since", "2999-01-01") == []
    assert len(listed("--url", live_url, "--since", "1h")) == 3
    paged = invoke("entries", "--json", "--url", live_url, "--limit", "2")
    assert len(paged.stdout.splitlines()) == 2 and "more: hsstore entries --json --cursor" in paged.stderr
    first = invoke("entries", "--url", live_url, "--limit", "2")
    assert len(first.stdout.splitlines()) == 3 and "more: hsstore entries --cursor" in first.stderr
    cursor = first.stderr.split("--cursor ")[1].split()[0]
    rest = ok("entries", "--url", live_url, "--limit", "2", "--cursor", cursor).splitlines()
    assert len(rest) == 2 and rest[1].split()[0] == everything[2]["prompt_hash"][:10]


def test_an_ambiguous_get_names_the_flags_that_pick_one(live_url: str, prompts: Path) -> None:
    ok("extract", str(prompts), "--url", live_url)
    ok("extract", str(prompts), "--url", live_url, "--layers", "1")  # a second featureset for the same prompts
    first, hint = failed("get", prompt_hash(coding_prompts()[0])[:10], "--url", live_url)
    assert "entries" in first
    assert hint.strip() == "name one: --model-revision REVISION, --backend BACKEND, --featureset ID"


def test_help_names_what_each_option_takes_and_the_root_options() -> None:
    said = ok("entries", "--help")
    assert "<bool>" not in said and "<str>" not in said, said
    assert "--featureset ID" in said and "--limit N" in said and "--json " in said and "--json <" not in said
    assert "--url URL, --token TOKEN, --debug" in " ".join(said.split())  # the root's, named in a subcommand's help
    assert "--debug  " in ok("--help") and "<bool>" not in ok("--help")
    assert "--minutes X" in ok("window", "open", "--help")
    # arguments in usage lines as click writes them: `JSONL`, not typer's `{JSONL}`
    assert " warm [OPTIONS] JSONL\n" in ok("warm", "--help").splitlines(keepends=True)[0]
    assert " dataset create [OPTIONS] NAME\n" in ok("dataset", "create", "--help").splitlines(keepends=True)[0]


def test_jobs_print_ids_that_paste_back(live_url: str, prompts: Path) -> None:
    submitted = ok("warm", str(prompts), "--url", live_url, "--backend", "torch")
    job_id = submitted.split()[1].rstrip(":")
    listing = ok("jobs", "--url", live_url).splitlines()
    assert listing[0].split() == ["JOB", "STATE", "DONE/TOTAL", "FAILED", "TOKENS", "CREATED"]
    assert all(len(row) <= 80 for row in listing)
    short = listing[1].split()[0]
    assert job_id.startswith(short) and "3/3" in listing[1]
    assert f"job {job_id}: done" in ok("jobs", short, "--url", live_url)
    assert json.loads(ok("jobs", short, "--url", live_url, "--json"))["id"] == job_id
    assert json.loads(ok("jobs", "show", short, "--json", "--url", live_url))["id"] == job_id
    assert invoke("jobs", "cancel", short, "--url", live_url).exit_code == 0
    assert f"job {job_id}: done" in ok("jobs", short, "--url", live_url)  # a done job stays done
    (line, *_) = failed("jobs", "ffffff", "--url", live_url)
    assert "no job" in line


def test_window_status_without_a_schedule_says_the_gpu_is_always_ours(live_url: str) -> None:
    assert "always open" in ok(
        "window", "status", "--url", live_url
    )  # open/close: tests/hsstore/cli/test_cli_first_day.py


def test_window_status_shows_the_next_scheduled_opening(settings: Settings, tiny_loaded: LoadedModel) -> None:
    scheduled: FastAPI = create_app(settings.model_copy(update={"windows": ["Sat 03:00-04:00 UTC"]}), tiny_loaded)
    with LiveServer(scheduled) as url:
        status = ok("window", "status", "--url", url)
        assert "next opens" in status and "03:00:00Z" in status
        assert "OPEN (manual until" in ok("window", "open", "--minutes", "30", "--url", url)
        assert "window closed; next opens" in ok("window", "close", "--url", url)


_NO_TORCH = """
import sys
from hsstore.cli import app
try:
    app()
except SystemExit as exit:
    code = exit.code
print("torch imported" if "torch" in sys.modules else "no torch", code, file=sys.stderr)
"""


def test_commands_that_need_no_model_do_not_import_torch(live_url: str, prompts: Path) -> None:
    ok("extract", str(prompts), "--url", live_url)
    key = prompt_hash(coding_prompts()[0])
    for command in (["entries"], ["jobs"], ["window", "status"], ["get", key[:10]], ["compare", key, "--a", "torch"]):
        done = subprocess.run(
            [sys.executable, "-c", _NO_TORCH, *command, "--url", live_url],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.stderr.strip().endswith("no torch 0"), (command, done.stderr)


def test_a_reader_that_stops_reading_gets_no_error(live_url: str, prompts: Path) -> None:
    """`hsstore entries | head -1`: the pipe's reader leaves before the listing is written (here before anything
    is: its read end is closed first). No `error: Broken pipe`, the status a shell gives such a writer."""
    ok("extract", str(prompts), "--url", live_url)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hsstore.cli", "entries", "--url", live_url],
            cwd=REPO,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141 and done.stderr == "", (done.returncode, done.stderr)


def test_refusals_come_before_the_heavy_imports(tmp_path: Path) -> None:
    """`serve` on a busy port and `verify` or `rebuild-catalog` on a directory without a store answer at once: the
    check runs before torch and the service are imported."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for command in (
            ["serve", "--port", str(port), "--data-dir", str(tmp_path / "store")],
            ["verify", str(tmp_path / "missing")],
            ["rebuild-catalog", str(tmp_path / "missing")],
        ):
            done = subprocess.run(
                [sys.executable, "-c", _NO_TORCH, *command], cwd=REPO, capture_output=True, text=True, timeout=60
            )
            assert done.stderr.strip().endswith("no torch 1"), (command, done.stderr)
            assert done.stderr.startswith("error: "), done.stderr


def test_serve_says_where_what_and_who_and_logs_requests(server_process, tiny_model_dir: Path, tmp_path: Path) -> None:
    server = server_process(
        {"HSSTORE_MODEL_DIR": str(tiny_model_dir), "HSSTORE_DATA_DIR": str(tmp_path / "d"), "HSSTORE_DEVICE": "cpu"}
    ).start()
    ok("entries", "--url", server.url)
    server.stop()
    log = server.output()
    port = server.url.rsplit(":", 1)[1]
    assert f"listening on http://127.0.0.1:{port}" in log
    assert f"model: {tiny_model_dir}" in log and "model_revision: sha256:" in log
    assert "backends this host can run: torch" in log
    assert f"data dir: {(tmp_path / 'd').resolve()}" in log
    assert "auth: off" in log and "extraction windows: none" in log
    assert '"GET /v1/entries?limit=50 HTTP/1.1" 200' in log  # the access log


def test_a_replica_without_a_model_says_so(server_process, tmp_path: Path) -> None:
    server = server_process({"HSSTORE_DATA_DIR": str(tmp_path / "d"), "HSSTORE_TOKENS": '{"t": ["read"]}'}).start()
    server.stop()
    log = server.output()
    assert "model: none: serves stored features and takes imports; extraction is refused" in log
    assert "auth: on (1 bearer tokens)" in log and "read-only replica" not in log


def test_extract_and_warm_take_a_featureset_by_its_id_as_get_does(live_url: str, prompts: Path) -> None:
    first = [
        json.loads(line)
        for line in ok("extract", str(prompts), "--url", live_url, "--layers", "3,1", "--json").splitlines()
    ]
    (featureset_id,) = {row["featureset"] for row in first}
    again = ok("extract", str(prompts), "--url", live_url, "--featureset", featureset_id, "--json")
    assert [(r["featureset"], r["status"]) for r in map(json.loads, again.splitlines())] == [
        (featureset_id, "existing")
    ] * 3
    with FeatureClient(live_url) as client:
        default = client.info().default_featureset_id
    assert default is not None
    by_default = [
        json.loads(line)
        for line in ok("extract", str(prompts), "--url", live_url, "--featureset", default, "--json").splitlines()
    ]
    assert {row["featureset"] for row in by_default} == {default}  # none stored yet: the default is known by its id
    assert f"featureset {featureset_id}" in ok("warm", str(prompts), "--url", live_url, "--featureset", featureset_id)
    unknown, hint = failed("extract", str(prompts), "--url", live_url, "--featureset", "0123456789abcdef")
    assert "neither the model's default nor held" in unknown and "--layers" in hint
    (both,) = failed("extract", str(prompts), "--url", live_url, "--featureset", featureset_id, "--layers", "1")
    assert "not both" in both


def test_version_and_what_serve_takes(live_url: str) -> None:
    from service import __version__

    assert ok("--version").strip() == f"hsstore {__version__}"
    with FeatureClient(live_url) as client:
        assert client.info().version == __version__
    said = " ".join(ok("serve", "--help").split())
    assert "--device DEVICE" in said and "--port N" in said and "--data-dir PATH" in said
    assert "--url" not in said and "--token" not in said  # the client's options mean nothing to a server


@pytest.mark.parametrize("where", ["under-a-file", "a-file", "unmakeable"])
def test_a_data_dir_that_cannot_be_one_is_named_with_its_setting(where: str, tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    data_dir = {"under-a-file": a_file / "d", "a-file": a_file, "unmakeable": Path("/proc/hsstore")}[where]
    (line,) = failed("serve", env={"HSSTORE_DATA_DIR": str(data_dir)})
    assert f"data_dir {data_dir}" in line and "HSSTORE_DATA_DIR" in line, line
    said = {"under-a-file": f"lies under {a_file}, which is a file", "a-file": "is a file", "unmakeable": "cannot be"}
    assert said[where] in line
    if where != "unmakeable":  # the catalog's check says the same, not "no catalog yet"
        (line,) = failed("migrate", "--check", "--data-dir", str(data_dir))
        assert said[where] in line and "no catalog yet" not in line
