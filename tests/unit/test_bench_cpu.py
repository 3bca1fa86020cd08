"""The benchmarks' per-role CPU split survives ``serve`` replacing its job worker."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from bench._service import ProcessCpu, Service, cpu_by_role
from bench.datasets.runner import cpu_seconds_under

SERVE = (1, 100)
OLD_WORKER = (2, 110)
NEW_WORKER = (3, 500)


def test_a_replaced_worker_is_counted_once_and_to_the_worker():
    before = {
        SERVE: ProcessCpu("api", None, own_s=10.0, reaped_s=0.0),
        OLD_WORKER: ProcessCpu("worker", SERVE, own_s=40.0, reaped_s=0.0),
    }
    # The old worker spent 2 s more, ended and was reaped (42 s into serve's
    # children figure); the new one has spent 1 s; serve itself 3 s.
    after = {
        SERVE: ProcessCpu("api", None, own_s=13.0, reaped_s=42.0),
        NEW_WORKER: ProcessCpu("worker", SERVE, own_s=1.0, reaped_s=0.0),
    }
    spent = cpu_by_role(before, after)
    assert spent["api"] == 3.0
    assert spent["worker"] == 3.0  # subtracting role totals gave 1 - 40 = -39


def test_a_reused_pid_is_a_new_process():
    before = {(7, 100): ProcessCpu("worker", None, own_s=5.0, reaped_s=0.0)}
    after = {(7, 900): ProcessCpu("worker", None, own_s=0.5, reaped_s=0.0)}
    assert cpu_by_role(before, after)["worker"] == 0.5


def test_cpu_seconds_counts_a_reaped_child(tmp_path):
    burner = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    parent = (
        "import subprocess, sys, time\n"
        f"subprocess.run([sys.executable, '-c', {burner!r}])\n"
        "print('reaped', flush=True)\n"
        "time.sleep(30)\n"
    )
    service = Service(data_dir=tmp_path, database_url=None, extra_env={}, ready_timeout_s=1.0)
    service.process = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE)
    try:
        assert service.process.stdout.readline() == b"reaped\n"
        time.sleep(0.05)
        sample = service.cpu_sample()
        assert sample is not None and len(sample) == 1  # the child is gone
        (only,) = sample.values()
        assert only.reaped_s >= 0.25
        assert service.cpu_seconds() >= only.own_s + 0.25
    finally:
        service.process.kill()
        service.process.wait()
        service.process.stdout.close()


def test_cpu_seconds_under_keeps_an_ended_thread():
    done = threading.Event()

    def burn() -> None:
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass
        done.wait()

    thread = threading.Thread(target=burn)
    thread.start()
    time.sleep(0.4)
    with_thread = cpu_seconds_under(os.getpid())
    done.set()
    thread.join()
    assert cpu_seconds_under(os.getpid()) >= with_thread  # a plain sum lost ~0.2 s here
