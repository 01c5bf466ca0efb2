"""Bad input to every ``clusterlab`` command gives one line on stderr naming what is wrong, a non-zero
exit code and never a Python traceback: nonexistent and non-directory paths, a
file where a directory is expected, output files that cannot be written (checked before a run, not
after it), numbers out of range, unknown names. The table runs in-process through ``main([...])``
(cheap); a sample also runs as the real ``clusterlab`` console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clusterlab.core.runtime.config import ClusterConfig
from clusterlab.harness.recorder import RunRecorder

from clusterlab.cli import main

# (arguments with {PLACEHOLDERS}, exit code, text the one stderr line must contain)
TABLE: list[tuple[str, int, str]] = [
    # the top level
    ("bogus", 2, "invalid choice: 'bogus'"),
    ("--no-such-option", 2, "unrecognized arguments: --no-such-option"),
    ("codec-selfcheck extra", 2, "unrecognized arguments: extra"),
    # demo
    ("demo --members 4", 2, "invalid choice: 4"),
    ("demo --seed x", 2, "argument --seed: 'x' is not a whole number"),
    ("demo --dir {FILE}", 2, "--dir {FILE}: is a file, not a directory"),
    ("demo --dir {UNDER_FILE}", 2, "--dir {UNDER_FILE}: {FILE} is a file, not a directory"),
    # cluster start
    ("cluster", 2, "the following arguments are required: ACTION"),
    ("cluster stop", 2, "invalid choice: 'stop'"),
    ("cluster start --members x", 2, "argument --members: 'x' is not a whole number"),
    ("cluster start --members 0", 2, "argument --members: must be 1 to 9, not 0"),
    ("cluster start --members -3", 2, "argument --members: must be 1 to 9, not -3"),
    ("cluster start --members 100", 2, "argument --members: must be 1 to 9, not 100"),
    ("cluster start --seed 1.5", 2, "argument --seed: '1.5' is not a whole number"),
    ("cluster start --seed -1", 2, "argument --seed: must be 0 to 9223372036854775807, not -1"),
    ("cluster start --refresh 0", 2, "argument --refresh: must be above 0 and at most 60 seconds, not 0"),
    ("cluster start --refresh nan", 2, "argument --refresh: must be above 0 and at most 60 seconds, not nan"),
    ("cluster start --refresh 1e9", 2, "argument --refresh: must be above 0 and at most 60 seconds, not 1e9"),
    ("cluster start --segment-length x", 1, "--segment-length 'x' is not a number of bytes"),
    ("cluster start --segment-length 1000", 1, "--segment-length must be a power of two from 65536"),
    ("cluster start --segment-length 2g", 1, "to 1073741824 (1 GiB) bytes, got 2147483648"),
    ("cluster start --service nosuch", 1, "unknown service 'nosuch'"),
    ("cluster start --service no_such_module:make", 1, "--service no_such_module:make: no module 'no_such_module'"),
    ("cluster start --service json:", 1, "no factory name after ':'"),
    ("cluster start --dir {FILE}", 1, "--dir {FILE}: is a file, not a directory"),
    ("cluster start --dir {UNDER_FILE}", 1, "--dir {UNDER_FILE}: {FILE} is a file, not a directory"),
    ("cluster start --dir {BAD_CLUSTER}", 1, "is not a valid cluster configuration"),
    ("cluster start --dir {NOT_JSON_CLUSTER}", 1, "cannot read {NOT_JSON_CLUSTER}/cluster.json"),
    # client
    ("client get k", 2, "the following arguments are required: --dir"),
    ("client --dir {CLUSTER}", 2, "the following arguments are required: OP"),
    ("client --dir {CLUSTER} frob k", 2, "invalid choice: 'frob'"),
    ("client --dir {CLUSTER} put k", 2, "the following arguments are required: value"),
    ("client --dir {CLUSTER} get", 2, "the following arguments are required: key"),
    ("client --dir {CLUSTER} --timeout x get k", 2, "argument --timeout: 'x' is not a number"),
    ("client --dir {CLUSTER} --timeout 0 get k", 2, "--timeout: must be above 0 and at most 3600 seconds, not 0"),
    ("client --dir {CLUSTER} --timeout -2 get k", 2, "--timeout: must be above 0 and at most 3600 seconds, not -2"),
    ("client --dir {CLUSTER} --timeout inf get k", 2, "--timeout: must be above 0 and at most 3600 seconds, not inf"),
    ("client --dir {CLUSTER} --timeout 1e12 get k", 2, "--timeout: must be above 0 and at most 3600 seconds"),
    ("client --dir {MISSING} get k", 1, "no cluster directory {MISSING}"),
    ("client --dir {FILE} get k", 1, "{FILE}: is a file, not a directory"),
    ("client --dir {EMPTY} get k", 1, "{EMPTY} is not a cluster directory: cluster.json not found"),
    ("client --dir {CLUSTER} get k", 1, "the cluster at {CLUSTER} is not running (no control sockets)"),
    ("client --dir {BAD_CLUSTER} get k", 1, "is not a valid cluster configuration"),
    # tool
    ("tool", 2, "the following arguments are required: dir, action"),
    ("tool {CLUSTER} explode", 2, "invalid choice: 'explode'"),
    ("tool {CLUSTER} list-members --timeout 0", 2, "--timeout: must be above 0 and at most 3600 seconds, not 0"),
    ("tool {CLUSTER} list-members --timeout 86400", 2, "--timeout: must be above 0 and at most 3600 seconds"),
    ("tool {MISSING} list-members", 1, "no cluster directory {MISSING}"),
    ("tool {FILE} list-members", 1, "{FILE}: is a file, not a directory"),
    ("tool {EMPTY} snapshot", 1, "is not a cluster directory"),
    ("tool {CLUSTER} suspend", 1, "is not running (no control sockets)"),
    # tool: member-directory actions (ClusterTool recording log, snapshot, errors, counters)
    ("tool {MISSING} recording-log", 1, "no directory {MISSING}"),
    ("tool {FILE} counters", 1, "{FILE}: is a file, not a directory"),
    ("tool {EMPTY} recording-log", 1, "no recording log in {EMPTY} (recording.log does not exist)"),
    ("tool {EMPTY} describe-latest-snapshot", 1, "no recording log in {EMPTY}"),
    ("tool {EMPTY} seed-recording-log-from-snapshot", 1, "no recording log in {EMPTY}"),
    ("tool {EMPTY} counters", 1, "{EMPTY}/counters.json does not exist"),
    ("tool {EMPTY} errors", 1, "{EMPTY}/counters.json does not exist"),
    ("tool {CLUSTER} errors", 1, "{CLUSTER} is a cluster directory: say which member with --member N"),
    ("tool {CLUSTER} errors --member 7", 1, "member 7 is not in {CLUSTER}/cluster.json"),
    ("tool {CLUSTER} errors --member 99", 2, "argument --member: must be 0 to 8, not 99"),
    ("tool {CLUSTER} recording-log --member 0", 1, "member 0 has no directory yet"),
    ("tool {EMPTY} recording-log --member 0", 1, "--member needs a cluster directory (with cluster.json)"),
    ("tool {CLUSTER} list-members --member 0", 1, "--member is for the member actions"),
    ("tool {CLUSTER} counters --member x", 2, "argument --member: 'x' is not a whole number"),
    ("tool {NON_EMPTY} counters --timeout 0", 2, "--timeout: must be above 0 and at most 3600 seconds, not 0"),
    # trace
    ("trace summary", 2, "the following arguments are required: run"),
    ("trace summary {MISSING}", 2, "{MISSING}: no such run directory"),
    ("trace summary {FILE}", 2, "{FILE}: not a directory"),
    ("trace summary {EMPTY}", 2, "{EMPTY}: not a clusterlab run"),
    ("trace summary {TWO_RUNS}", 2, "holds 2 runs; give one of"),
    ("trace show {RUN} --from 0", 2, "the following arguments are required: --member"),
    ("trace show {RUN} --member 0", 2, "the following arguments are required: --from"),
    ("trace show {RUN} --member x --from 0", 2, "argument --member: 'x' is not a whole number"),
    ("trace show {RUN} --member 7 --from 0", 2, "--member 7: no messages of member 7 in {RUN}; members recorded: 0, 1"),
    ("trace show {RUN} --member 9 --from 0", 2, "argument --member: must be 0 to 8, not 9"),
    ("trace show {RUN} --member 0 --from -1", 2, "argument --from: must be 0 to 9223372036854775807, not -1"),
    ("trace show {RUN} --member 0 --from 0 --channel bogus", 2, "channels recorded: consensus, log"),
    ("trace show {MISSING} --member 0 --from 0", 2, "no such run directory"),
    # run
    ("run", 2, "the following arguments are required: SCENARIO"),
    ("run nosuch", 2, "unknown scenario 'nosuch'; known: leader-kill"),
    ("run leader-isolation --members 4", 2, "runs on 3 or 5 members, not 4"),
    ("run leader-kill --seed x", 2, "argument --seed: 'x' is not a whole number"),
    ("run leader-kill --seed -1", 2, "argument --seed: must be 0 to 9223372036854775807, not -1"),
    ("run leader-kill --duration 0", 2, "argument --duration: must be above 0 and at most 3600 seconds, not 0"),
    ("run leader-kill --duration nan", 2, "argument --duration: must be above 0 and at most 3600 seconds, not nan"),
    ("run leader-kill --duration=-inf", 2, "argument --duration: must be above 0 and at most 3600 seconds, not -inf"),
    ("run leader-kill --sim --duration 1e12", 2, "argument --duration: must be above 0 and at most 3600 seconds"),
    ("run leader-kill --members 100", 2, "argument --members: must be 1 to 9, not 100"),
    ("run leader-kill --rate -1", 2, "argument --rate: must be above 0 and at most 10000 ops per second, not -1"),
    ("run leader-kill --rate 1e9", 2, "argument --rate: must be above 0 and at most 10000 ops per second"),
    ("run leader-kill --clients 0", 2, "argument --clients: must be 1 to 64, not 0"),
    ("run leader-kill --clients 1000", 2, "argument --clients: must be 1 to 64, not 1000"),
    ('run leader-kill --sim --schedule [{"quiet":1e12}]', 2, "seconds must be a number from 0 to 3600"),
    ('run leader-kill --sim --schedule [{"nemesis":"kill","seconds":1,"who":"nobody"}]', 2, "kill who must be one of"),
    ('run leader-kill --sim --schedule [{"nemesis":"pause","seconds":1,"who":7}]', 2, "option who must be a string"),
    ("run leader-kill --sim --workload ledger.workload:make", 2, "--workload ledger.workload:make: name the service"),
    ("run leader-kill --service nosuch", 2, "unknown service 'nosuch': use one of kv, counter, timers, echo"),
    ("run leader-kill --dir {NON_EMPTY}", 2, "--dir {NON_EMPTY} is not empty"),
    ("run leader-kill --dir {FILE}", 2, "--dir {FILE}: is a file, not a directory"),
    ("run leader-kill --json {MISSING}/out.json", 2, "--json {MISSING}/out.json: directory {MISSING} does not exist"),
    ("run leader-kill --json {EMPTY}", 2, "--json {EMPTY}: is a directory"),
    ("run leader-kill --json {UNDER_FILE}/x.json", 2, "--json {UNDER_FILE}/x.json: {FILE} is a file, not a directory"),
    ("report {RUN} --out {FILE}/r.html", 2, "--out {FILE}/r.html: {FILE} is a file, not a directory"),
    ("run leader-kill --json /proc/clusterlab-out.json", 2, "--json /proc/clusterlab-out.json: cannot be written"),
    # check
    ("check", 2, "the following arguments are required: RUN"),
    ("check {MISSING}", 2, "RUN {MISSING}: no such directory"),
    ("check {FILE}", 2, "RUN {FILE}: is a file, not a directory"),
    ("check {EMPTY}", 2, "not a run directory"),
    ("check {RUN} {MISSING}", 2, "RUN {MISSING}: no such directory"),
    ("check {RUN} --limit 0", 2, "argument --limit: must be 1 to 100000, not 0"),
    ("check {RUN} --limit 10000000000", 2, "argument --limit: must be 1 to 100000, not 10000000000"),
    ("check {RUN} --json /proc/clusterlab-out.json", 2, "cannot be written"),
    ("check {RUN} --json {EMPTY}", 2, "--json {EMPTY}: is a directory"),
    # golden
    ("golden frob", 2, "invalid choice: 'frob'"),
    ("golden bless {RUN}", 2, "the following arguments are required: --name"),
    ("golden bless {MISSING} --name x", 2, "{MISSING}: no such run directory"),
    ("golden bless {EMPTY} --name x", 2, "not a clusterlab run"),
    ("golden verify no-such-golden", 2, "no golden named 'no-such-golden'"),
    ("golden bless {RUN} --name x --duration 0", 2, "argument --duration: must be above 0 and at most 3600 seconds"),
    ("golden regenerate no-such-golden", 2, "no recipe named no-such-golden"),
    ("golden verify --json /proc/clusterlab-out.json", 2, "cannot be written"),
    ("golden verify --json {MISSING}/g.json", 2, "directory {MISSING} does not exist"),
    # sweep and shrink
    ("sweep random --seeds 1-100000000", 2, "argument --seeds: seeds '1-100000000': more than 1000000 seeds"),
    ("sweep random --seeds 99999999999999999999", 2, "a seed must be 0 to 9223372036854775807"),
    ("sweep random --members 3,100", 2, "argument --members: '3,100': sizes must be 1 to 9, not 100"),
    ("sweep random --jobs 0", 2, "argument --jobs: must be 1 to 256, not 0"),
    ("sweep random --jobs 100000", 2, "argument --jobs: must be 1 to 256, not 100000"),
    ("sweep random --duration inf", 2, "argument --duration: must be above 0 and at most 3600 seconds, not inf"),
    ("sweep random --settle 1e9", 2, "argument --settle: must be above 0 and at most 600 seconds"),
    ("sweep random --clients 65", 2, "argument --clients: must be 1 to 64, not 65"),
    ("sweep random --rate nan", 2, "argument --rate: must be above 0 and at most 10000 ops per second, not nan"),
    ("shrink {EMPTY} --max-runs 0", 2, "argument --max-runs: must be 1 to 10000, not 0"),
    # mutants and spark
    ("mutants --seeds 0", 2, "argument --seeds: must be 1 to 1000000, not 0"),
    ("mutants --jobs 1000", 2, "argument --jobs: must be 1 to 256, not 1000"),
    ("mutants --budget-s inf", 2, "argument --budget-s: must be above 0 and at most 86400 seconds, not inf"),
    ("spark start --warm -1", 2, "argument --warm: must be 0 to 1000, not -1"),
    ("spark start --driver-memory lots", 2, "argument --driver-memory: 'lots' is not a size like 2g or 512m"),
    ("spark start --driver-memory 10m", 2, "argument --driver-memory: must be 256 to 1048576 MiB, not 10m"),
    # demo
    ("demo --seed -5", 2, "argument --seed: must be 0 to 9223372036854775807, not -5"),
    # report
    ("report", 2, "the following arguments are required: RUN"),
    ("report {MISSING}", 2, "RUN {MISSING}: no such run directory"),
    ("report {FILE}", 2, "RUN {FILE}: is a file, not a directory"),
    ("report {EMPTY}", 2, "not a clusterlab run"),
    ("report {RUN} --out {EMPTY}", 2, "--out {EMPTY}: is a directory"),
    ("report {RUN} --out {MISSING}/r.html", 2, "directory {MISSING} does not exist"),
]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("bad-input")
    (root / "file.txt").write_text("not a directory\n")
    (root / "empty").mkdir()
    (root / "non-empty").mkdir()
    (root / "non-empty" / "x").write_text("x")
    (root / "bad-cluster").mkdir()
    (root / "bad-cluster" / "cluster.json").write_text("[1, 2]")
    (root / "not-json-cluster").mkdir()
    (root / "not-json-cluster" / "cluster.json").write_text("{members: 3")
    ClusterConfig.create(root / "cluster", 3).save()
    run = RunRecorder(root / "run", "bad-input-run")
    for member in (0, 1):
        rec = run.process(f"node-{member}", member)
        rec.message("send", "consensus", 1 - member, b"\x00" * 16)
        rec.message("send", "log", 1 - member, b"\x00" * 16)
    run.finish("ok")
    for name in ("trace", "trace-second"):
        RunRecorder(root / "two-runs" / name, name).finish("ok")
    shutil.copytree(root / "run", root / "bad-json-run")
    (root / "bad-json-run" / "run.json").write_text("{not json")
    return {
        "FILE": str(root / "file.txt"),
        "UNDER_FILE": str(root / "file.txt" / "sub"),
        "EMPTY": str(root / "empty"),
        "NON_EMPTY": str(root / "non-empty"),
        "MISSING": str(root / "missing"),
        "CLUSTER": str(root / "cluster"),
        "BAD_CLUSTER": str(root / "bad-cluster"),
        "NOT_JSON_CLUSTER": str(root / "not-json-cluster"),
        "RUN": str(root / "run"),
        "TWO_RUNS": str(root / "two-runs"),
        "BAD_JSON_RUN": str(root / "bad-json-run"),
    }


def _fill(template: str, paths: dict[str, str]) -> str:
    for key, value in paths.items():
        template = template.replace("{" + key + "}", value)
    return template


def run_main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse
        return int(e.code or 0)


@pytest.mark.parametrize(("args", "code", "message"), TABLE, ids=[t[0] for t in TABLE])
def test_bad_input_gives_one_line_and_no_traceback(
    args: str, code: int, message: str, paths: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [_fill(a, paths) for a in args.split()]
    before = set(os.listdir(paths["EMPTY"]))
    got = run_main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert got == code, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert _fill(message, paths) in lines[0]
    assert set(os.listdir(paths["EMPTY"])) == before  # nothing was created by a refused command
    assert not Path(paths["MISSING"]).exists()


def test_trace_summary_of_unparseable_run_json_is_incomplete(
    paths: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A run.json that does not parse is a damaged trace, not bad input: INCOMPLETE (exit 3), naming the file."""
    got = run_main(["trace", "summary", paths["BAD_JSON_RUN"]])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert got == 3
    assert "INCOMPLETE" in out and "run.json" in out


SUBPROCESS_SAMPLE = [
    "cluster start --dir {FILE}",
    "client --dir {MISSING} get k",
    "trace show {RUN} --member 7 --from 0",
    "run leader-kill --json /proc/clusterlab-out.json",
    "run leader-kill --sim --duration 1e12",
    "cluster start --members 100",
    "check {FILE}",
]


@pytest.mark.parametrize("args", SUBPROCESS_SAMPLE)
def test_the_console_script_gives_the_same_one_line(args: str, paths: dict[str, str]) -> None:
    argv = [_fill(a, paths) for a in args.split()]
    done = subprocess.run([sys.executable, "-m", "clusterlab.cli", *argv], capture_output=True, text=True, timeout=120)
    expected = next(_fill(m, paths) for a, _, m in TABLE if a == args)
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr + done.stdout
    assert len(done.stderr.strip().splitlines()) == 1 and expected in done.stderr, done.stderr


def test_the_trace_of_the_table_is_a_run(paths: dict[str, str]) -> None:
    """The table's RUN really is a recorded run (so its errors are about the arguments, not the run)."""
    meta = json.loads((Path(paths["RUN"]) / "run.json").read_text())
    assert meta["outcome"] == "ok" and run_main(["trace", "summary", paths["RUN"]]) == 0
